"""How fast `neuraldbg report` writes the HTML report of a big run, and how fast chromium opens it.

    python bench/report_open.py                          # 500 layers, 100k steps
    python bench/report_open.py --layers 50 --steps 1000

A synthetic trace is written to a temporary folder: LAYERS layers summarised on the schedule
the monitor uses (one step in 10 for the first 100 summaries, then half as often each time
the run doubles: about 430 summaries per layer at 100k steps), the loss, every layer's first
states and a few failures (a layer dies, the gradients before it vanish, the loss spikes).
Reported: the trace's size, the seconds of `write_report`, the HTML's size, and the seconds
of headless chromium loading the page until its script has drawn it (data-ready), with the
time of a blank page subtracted as chromium's own start-up."""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

EVERY, POINTS = 10, 100         # the monitor's summary schedule (thresholds: summary)


def summary_steps(steps: int) -> list:
    """The steps the monitor summarises (observe/summaries.py's SummaryClock, which imports
    nothing of torch but lives in the torch wing): multiples of an interval that doubles each
    time the run reaches POINTS intervals."""
    out, interval, step = [], EVERY, 0
    while step < steps:
        while step >= interval * POINTS:
            interval *= 2
        out.append(step)
        step = (step // interval + 1) * interval
    return out


def write_trace(path, layers: int = 500, steps: int = 100_000, seed: int = 0) -> str:
    """A trace of a run of `steps` steps over `layers` layers (fc/act pairs); returns the path."""
    rnd = random.Random(seed)
    names = [f"blocks.{i // 2}.{'fc' if i % 2 == 0 else 'act'}" for i in range(layers)]
    dying = names[layers // 2 | 1] if layers > 1 else names[0]     # an activation layer
    onset = steps * 6 // 10
    lines = [
        '{"event": "run_start", "schema": 2, "version": "bench", "script": "synthetic.py", '
        '"argv": ["synthetic.py"], "torch": "2.13.0", "thresholds": {}, "rank": 0, "world_size": 1}',
        '{"event": "model", "step": 0, "root": "Net", "layers": [' + ", ".join(
            f'{{"name": "{n}", "type": "{"Linear" if n.endswith("fc") else "ReLU"}", '
            f'"kind": "{"param" if n.endswith("fc") else "relu"}", "params": 10}}' for n in names) + "]}",
    ]

    def transition(step, layer, signal, was, to, **stats):
        fc = layer.endswith("fc")
        stats_text = ", ".join(f'"{k}": {v}' for k, v in stats.items())
        was_text = "null" if was is None else f'"{was}"'
        lines.append(f'{{"event": "transition", "step": {step}, "layer": "{layer}", "module_type": '
                     f'"{"Linear" if fc else "ReLU"}", "kind": "{"param" if fc else "relu"}", "signal": '
                     f'"{signal}", "from": {was_text}, "to": "{to}", "stats": {{{stats_text}}}}}')

    for n in names:
        transition(0, n, "activation", None, "normal", rms=0.5)
        if n.endswith("fc"):
            transition(0, n, "gradient", None, "healthy", grad_norm=0.1)
    lines.append('{"event": "transition", "step": 0, "layer": "(loss)", "module_type": "loss", "kind": '
                 '"loss", "signal": "loss", "from": null, "to": "normal", "stats": {"loss": 2.3}}')
    told = False
    for step in summary_steps(steps):
        if step > onset and not told:   # the story, written once confirmed, as the monitor does
            told = True
            transition(onset, dying, "activation", "normal", "dead", dead_ratio=0.97, units=64, rms=0.01)
            for n in names[:names.index(dying)][-5::2]:      # the Linear layers before it
                transition(onset + 4, n, "gradient", "healthy", "vanishing", grad_norm=0.0)
            lines.append(f'{{"event": "transition", "step": {onset + 2}, "layer": "(loss)", '
                         '"module_type": "loss", "kind": "loss", "signal": "loss", "from": "normal", '
                         '"to": "spiking", "stats": {"loss": 9.1, "median": 1.2}}')
        dead = step >= onset
        before = names.index(dying)
        for i, n in enumerate(names):
            wobble = 1 + 0.1 * rnd.random()
            if n.endswith("fc"):
                grad = 0.0 if dead and i < before else 0.1 * wobble
                stats = (f'"rms": {0.5 * wobble:.4g}, "grad_norm": {grad:.4g}, '
                         f'"update_ratio": {0.001 * wobble:.4g}')
            else:
                died = dead and n == dying
                rms, inactive = (0.01, 0.97) if died else (0.3 * wobble, 0.4 * wobble)
                stats = f'"rms": {rms:.4g}, "inactive": {inactive:.4g}'
            lines.append(f'{{"event": "summary", "step": {step}, "layer": "{n}", "stats": {{{stats}}}}}')
        loss = 2.3 * (0.2 + 0.8 * (1 - step / steps)) * (1 + 0.05 * rnd.random())
        stats = f'"loss": {loss:.4g}'
        lines.append(f'{{"event": "summary", "step": {step}, "layer": "(loss)", "stats": {{{stats}}}}}')
    lines.append(f'{{"event": "run_end", "status": "completed", "steps": {steps}, "exit_code": 0, '
                 '"error": null}')
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def chromium() -> str | None:
    if shutil.which("chromium"):
        return shutil.which("chromium")
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def open_seconds(binary: str, html: Path) -> tuple:
    """(seconds until chromium dumped the drawn DOM, whether the page's script finished)."""
    with tempfile.TemporaryDirectory() as profile:
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", "--window-size=1200,900", "--virtual-time-budget=2000",
               "--dump-dom", html.resolve().as_uri()]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, timeout=120).stdout
        return time.perf_counter() - t0, b'data-ready="1"' in out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=500)
    ap.add_argument("--steps", type=int, default=100_000)
    args = ap.parse_args()
    from neuraldbg_cli.publish.html import write_report

    with tempfile.TemporaryDirectory() as folder:
        trace, html = Path(folder) / "big.jsonl", Path(folder) / "big.html"
        t0 = time.perf_counter()
        write_trace(trace, args.layers, args.steps)
        print(f"trace: {args.layers} layers, {args.steps} steps, {trace.stat().st_size / 1e6:.1f} MB, "
              f"{sum(1 for _ in trace.open()):,} lines, written in {time.perf_counter() - t0:.2f} s")
        t0 = time.perf_counter()
        write_report([str(trace)], str(html))
        print(f"write_report: {time.perf_counter() - t0:.2f} s, HTML {html.stat().st_size / 1e6:.2f} MB")
        binary = chromium()
        if binary is None:
            print("chromium: not installed (apt install chromium), load not measured")
            return
        blank = Path(folder) / "blank.html"
        blank.write_text("<!DOCTYPE html><title>blank</title>", encoding="utf-8")
        base = min(open_seconds(binary, blank)[0] for _ in range(2))
        runs = [open_seconds(binary, html) for _ in range(3)]
        best = min(s for s, _ in runs)
        print(f"chromium: {best:.2f} s to load and draw (best of 3; blank page {base:.2f} s, so "
              f"{best - base:.2f} s for the report), drawn: {all(ok for _, ok in runs)}")


if __name__ == "__main__":
    main()
