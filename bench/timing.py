"""The timing section: plain and monitored rounds in this process, in ABBA order."""
from __future__ import annotations

import os
import statistics

from loop import ALL, Monitoring, timed_round
from workloads import Workload


def run_timing(workload: Workload, rounds: int, steps: int, tmp: str,
               monitoring: Monitoring = ALL, device: str = "cpu") -> dict:
    """Per-round ratios of monitored to plain loop time, and their median."""
    trace = os.path.join(tmp, f"timing-{workload.name}.jsonl")

    def one(monitored, n):
        return timed_round(workload, n, trace if monitored else None, monitoring, device=device)
    for monitored in (False, True):     # discarded: first-touch, allocator, lazy imports
        one(monitored, max(1, steps // 4))
    plain, mon, step_ratios = [], [], []
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)     # ABBA: cancels drift
        times = {m: one(m, steps) for m in order}
        plain.append(times[False][0])
        mon.append(times[True][0])
        step_ratios.append(statistics.median(times[True][1]) / statistics.median(times[False][1]))
    ratios = [m / p for m, p in zip(mon, plain)]
    return {"rounds": rounds, "steps": steps, "warmup": workload.warmup,
            "plain_s": plain, "monitored_s": mon, "ratios": ratios,
            # Diagnostic for a loaded machine: a preempted step inflates a loop's sum, hardly
            # its median step.
            "step_median_ratios": step_ratios, "step_median_ratio": statistics.median(step_ratios),
            "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
            "max_ratio": max(ratios),
            "plain_ms_per_step": 1e3 * statistics.median(plain) / steps,
            "monitored_ms_per_step": 1e3 * statistics.median(mon) / steps,
            "added_ms_per_step": 1e3 * (statistics.median(mon) - statistics.median(plain)) / steps}
