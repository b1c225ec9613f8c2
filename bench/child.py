#!/usr/bin/env python
"""One fresh process of the memory, long or compile section (run by processes.py).

    python bench/child.py train WORKLOAD --steps N [--rss-at 1000,10000]
    python bench/child.py compile WORKLOAD --steps N --warmup W
    python bench/child.py count WORKLOAD --steps N --warmup W    (under callgrind: instructions.py)

Run plain, or as the script of `neuraldbg run`; prints one line, MARK and a JSON object.
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import statistics
import sys
import time

import torch
from loop import timed_loop
from machine import peak_rss_mb, vmrss_mb
from workloads import WORKLOADS

MARK = "BENCH_CHILD "


def train(name: str, steps: int, rss_at: set) -> dict:
    """Trains eagerly; VmRSS before the build and after each step in rss_at."""
    out = {"rss_mb_at": {}, "rss_mb_before_build": vmrss_mb()}
    step = WORKLOADS[name].build()
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
        if i + 1 in rss_at:
            out["rss_mb_at"][i + 1] = vmrss_mb()
    out["loop_s"] = time.perf_counter() - t0
    return out


def count(name: str, steps: int, warmup: int) -> dict:
    """Trains `warmup` steps, then `steps` more inside one call of functools.reduce, the C
    function that instructions.py tells callgrind to count in: the counted steps alone, not
    the imports, the build or the warm-up (nothing else in a training step calls it)."""
    step = WORKLOADS[name].build()
    for i in range(warmup):
        step(i)
    functools.reduce(lambda _, i: step(i), range(warmup, warmup + steps), None)
    return {}


def compiled(name: str, steps: int, warmup: int) -> dict:
    """Trains under torch.compile: compile (first step) time, step times, dynamo's counts."""
    from torch._dynamo.utils import counters

    recompiles = _recompile_log()
    counters.clear()
    step = WORKLOADS[name].build(compile_model=True)
    t0 = time.perf_counter()
    step(0)
    out = {"first_step_s": time.perf_counter() - t0}
    for i in range(1, warmup):
        step(i)
    out["after_warmup_s"] = time.perf_counter() - t0
    out["loop_s"], per_step = timed_loop(step, warmup, steps)
    out["ms_per_step"] = 1e3 * out["loop_s"] / steps
    out["median_ms_per_step"] = 1e3 * statistics.median(per_step)
    gb = counters.get("graph_break", {})
    out["graph_breaks"] = sum(gb.values())
    out["graph_break_reasons"] = [f"{n}x {k[:160]}" for k, n in
                                  sorted(gb.items(), key=lambda kv: -kv[1])[:5]]
    out["unique_graphs"] = counters["stats"].get("unique_graphs", 0)
    out["frames_compiled"] = counters["frames"].get("ok", 0)
    out["recompiles"] = len(recompiles)
    out["recompile_reasons"] = recompiles[:5]
    return out


def _recompile_log() -> list:
    """A list that fills with the first line of each recompile record (what
    TORCH_LOGS=recompiles prints): dynamo's counters do not count recompiles."""
    recompiles = []

    class Count(logging.Handler):
        def emit(self, record):
            recompiles.append(record.getMessage().splitlines()[0][:200])
    torch._logging.set_logs(recompiles=True)
    logging.getLogger("torch._dynamo.guards.__recompiles").addHandler(Count())
    return recompiles


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=("train", "compile", "count"))
    p.add_argument("workload", choices=list(WORKLOADS))
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warmup", type=int, default=0,
                   help="compile: untimed steps after the first; count: steps before those counted")
    p.add_argument("--rss-at", default="", help="train: comma list of steps to read VmRSS after")
    args = p.parse_args(argv)
    if os.environ.get("BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
    out = {"workload": args.workload, "steps": args.steps}
    if args.kind == "train":
        rss_at = {int(s) for s in args.rss_at.split(",")} if args.rss_at else set()
        out.update(train(args.workload, args.steps, rss_at))
    else:
        out["rss_mb_at"] = {}
        run = count if args.kind == "count" else compiled
        out.update(run(args.workload, args.steps, args.warmup))
    out["peak_rss_mb"] = peak_rss_mb()
    out["rss_mb_end"] = vmrss_mb()
    print(MARK + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
