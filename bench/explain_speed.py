"""How fast `neuraldbg explain` reads big traces, and in how much memory.

    python bench/explain_speed.py                    # 100k, 1M and 3M events
    python bench/explain_speed.py --events 200000    # one size

A synthetic trace of LAYERS layers whose activations and gradients flap between states (the
worst case for the reader: every line a transition) is written to a temporary folder; each
measurement runs in a fresh child process, so peak memory (max RSS) is that of one explain.
Reported: the seconds of a bare `json.loads` pass over the file's lines (the floor any reader
pays), of `neuraldbg explain` (read, analyse, render the text report), their ratio, events a
second and the peak RSS. The aim: within about 5x of the bare pass, under 500 MB at 1M events.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

LAYERS = 500
_ACT = ("normal", "anomalous", "dead", "saturated")
_GRAD = ("healthy", "vanishing", "exploding")


def write_trace(path: str, events: int, seed: int = 0) -> None:
    rnd = random.Random(seed)
    names = [f"blocks.{i // 4}.{('fc', 'act', 'proj', 'norm')[i % 4]}" for i in range(LAYERS)]
    state: dict = {}
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"event": "run_start", "schema": 1, "version": "bench", "script": "synthetic.py",
                            "argv": ["synthetic.py"], "torch": "2.13.0", "thresholds": {}, "rank": 0,
                            "world_size": 1}) + "\n")
        f.write(json.dumps({"event": "model", "step": 0, "root": "Net", "layers": [
            {"name": n, "type": "Linear", "kind": "param", "params": 10} for n in names]}) + "\n")
        step = 0
        for _ in range(events - 3):
            step += rnd.random() < 0.02
            layer = rnd.choice(names)
            signal = "gradient" if rnd.random() < 0.4 else "activation"
            choices = _GRAD if signal == "gradient" else _ACT
            prev = state.get((layer, signal))
            to = rnd.choice([s for s in choices if s != prev])
            state[layer, signal] = to
            f.write(json.dumps({"event": "transition", "step": step, "layer": layer,
                                "module_type": "Linear", "kind": "param", "signal": signal,
                                "from": prev, "to": to, "stats": {"rms": rnd.random(), "units": 64}})
                    + "\n")
        f.write(json.dumps({"event": "run_end", "status": "completed", "steps": step + 1,
                            "exit_code": 0, "error": None}) + "\n")


def _child(what: str, path: str) -> None:
    """One measurement, in this (fresh) process: prints seconds and peak RSS in MB."""
    t0 = time.perf_counter()
    if what == "json":
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)
    else:
        from neuraldbg_cli.cli import main
        with open(os.devnull, "w") as sink:
            saved, sys.stdout = sys.stdout, sink
            try:
                main(["explain", path])
            finally:
                sys.stdout = saved
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _measure(what: str, path: str) -> dict:
    env = {**os.environ, "NO_COLOR": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", what, path], capture_output=True,
                         text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, action="append",
                    help="trace size in events (repeatable; default 100k, 1M, 3M)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child)
        return
    print(f"{'events':>9} {'MB':>6} {'json s':>7} {'explain s':>9} {'ratio':>6} "
          f"{'events/s':>9} {'peak RSS':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.events or [100_000, 1_000_000, 3_000_000]:
            path = os.path.join(tmp, f"t{n}.jsonl")
            write_trace(path, n)
            size = os.path.getsize(path) / 2**20
            bare, ex = _measure("json", path), _measure("explain", path)
            print(f"{n:>9} {size:>6.0f} {bare['seconds']:>7.2f} {ex['seconds']:>9.2f} "
                  f"{ex['seconds'] / bare['seconds']:>6.1f} {n / ex['seconds']:>9.0f} "
                  f"{ex['rss_mb']:>7.0f}MB", flush=True)
            os.remove(path)


if __name__ == "__main__":
    main()
