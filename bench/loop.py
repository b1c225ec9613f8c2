"""The timed training loop, and one round of it: plain, or inside a neuraldbg session."""
from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass

import torch
from workloads import Step, Workload


def timed_loop(step: Step, first: int, steps: int, sync=lambda: None) -> tuple[float, list]:
    """(seconds for steps first..first+steps-1, the seconds of each step). `sync` waits for
    the device before the loop and after it (on a GPU the per-step times are the host's)."""
    clock = time.perf_counter
    per_step = []
    sync()
    t0 = prev = clock()
    for i in range(first, first + steps):
        step(i)
        now = clock()
        per_step.append(now - prev)
        prev = now
    sync()
    end = clock()
    per_step[-1] += end - prev
    return end - t0, per_step


@dataclass(frozen=True)
class Monitoring:
    """How the monitored side is monitored: one step in `every`, the `detectors` named (a
    comma list of signals; None: all), stopping on the states `stop_on` (None: no stop), as
    `NeuralDbg(every=, detectors=, stop_on=)` and `neuraldbg run --every --detectors
    --stop-on` take them."""
    every: int = 1
    detectors: str | None = None
    stop_on: str | None = None

    def kwargs(self) -> dict:
        """NeuralDbg's keyword arguments (the defaults left out: an older version takes them)."""
        out = {"every": self.every} if self.every != 1 else {}
        if self.stop_on:
            out["stop_on"] = self.stop_on
        return {**out, "detectors": self.detectors} if self.detectors else out

    def cli(self) -> list:
        """The same as options of `neuraldbg run`."""
        return [f"--{k}={v}" for k, v in self.kwargs().items()]

    def describe(self) -> str:
        which = "every step monitored" if self.every == 1 else f"1 step in {self.every} monitored"
        which += f", stopping on {self.stop_on}" if self.stop_on else ""
        return f"{which}, detectors {self.detectors}" if self.detectors else which


ALL = Monitoring()


def session(trace: str | None, monitoring: Monitoring = ALL):
    """A neuraldbg session writing `trace` (default thresholds, every module observed,
    quiet), or nothing when trace is None."""
    if trace is None:
        return contextlib.nullcontext()
    from neuraldbg_cli import NeuralDbg

    return NeuralDbg(trace=trace, **monitoring.kwargs())


def timed_round(workload: Workload, steps: int, trace: str | None = None,
                monitoring: Monitoring = ALL,
                around=contextlib.nullcontext, device: str = "cpu") -> tuple[float, list]:
    """timed_loop over `steps` steps of a fresh model, after `workload.warmup` untimed ones;
    monitored when `trace` is given. The session starts before the model is built, as under
    `neuraldbg run`, where the script builds it after the hooks are installed. `around()`
    wraps the timed loop only (the profiler). `device`: where the model and its data are
    made (torch's default device while it is built)."""
    gc.collect()
    sync = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    with session(trace, monitoring):
        # Built under torch.device(device), trained outside it: the context is a torch
        # function mode, a Python call added to every torch call, which real training loops
        # (a model moved with .to(device)) do not pay, and which made the monitor's own torch
        # calls look dearer than they are.
        with torch.device(device):
            step = workload.build()
        for i in range(workload.warmup):
            step(i)
        with around():
            return timed_loop(step, workload.warmup, steps, sync)
