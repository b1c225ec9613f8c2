"""The timed training loop, and one round of it: plain, or inside a neuraldbg session."""
from __future__ import annotations

import contextlib
import gc
import time

from workloads import Step, Workload


def timed_loop(step: Step, first: int, steps: int) -> tuple[float, list]:
    """(seconds for steps first..first+steps-1, the seconds of each step)."""
    clock = time.perf_counter
    per_step = []
    t0 = prev = clock()
    for i in range(first, first + steps):
        step(i)
        now = clock()
        per_step.append(now - prev)
        prev = now
    return prev - t0, per_step


def session(trace: str | None, every: int = 1):
    """A neuraldbg session writing `trace` (default thresholds, every module observed,
    quiet), or nothing when trace is None."""
    if trace is None:
        return contextlib.nullcontext()
    from neuraldbg_cli import NeuralDbg

    return NeuralDbg(trace=trace, every=every)


def timed_round(workload: Workload, steps: int, trace: str | None = None, every: int = 1,
                around=contextlib.nullcontext) -> tuple[float, list]:
    """timed_loop over `steps` steps of a fresh model, after `workload.warmup` untimed ones;
    monitored when `trace` is given. The session starts before the model is built, as under
    `neuraldbg run`, where the script builds it after the hooks are installed. `around()`
    wraps the timed loop only (the profiler)."""
    gc.collect()
    with session(trace, every):
        step = workload.build()
        for i in range(workload.warmup):
            step(i)
        with around():
            return timed_loop(step, workload.warmup, steps)
