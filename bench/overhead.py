#!/usr/bin/env python
"""Monitoring overhead of neuraldbg against plain training (a benchmark, not a test).

    python bench/overhead.py                      # everything, full size (several minutes)
    python bench/overhead.py --quick              # smoke check, about a minute
    python bench/overhead.py --workloads mlp,tiny --sections timing --json out.json
    python bench/overhead.py --profile tiny       # where the monitor spends its time

Sections (see docs/benchmarks.md for the method and the targets):

  timing   In this process, each workload trains plain and monitored, alternating (ABBA
           order), for several rounds. A monitored round runs inside `with NeuralDbg(...)`,
           the engine of `neuraldbg run`, entered before the workload is built (as the CLI
           starts before the script runs). Only the training loop is timed: building the
           model and the warm-up steps are not. Reported: the median over rounds of
           monitored/plain loop time. `--device cuda` trains on a GPU (this section only).
  memory   Per workload, two fresh processes run the same training: `python bench/child.py
           ...` and `python -m neuraldbg_cli run ... bench/child.py ...` (the real CLI). Each
           reports its own peak RSS (VmHWM); the monitored one's trace is measured.
  long     The tiny model for 10k steps (plain and under the CLI), VmRSS at step 1k and 10k.
  compile  The MLP under torch.compile (inductor, cold cache per process), plain and under
           the CLI: first-step (compile) time, steady step time, graph breaks, recompiles.
  instructions  (only when named; needs valgrind) Per workload, machine instructions per
           step after its warm-up (the tiny model: over the timing section's window; the
           others: 2 steps), plain and under the CLI, counted by callgrind in two fresh
           processes: unmoved by the machine's load, for comparing versions (instructions.py).
  floor    (only when named) In this process, rounds of plain, bare and monitored training:
           the bare observer reads every leaf output and every gradient once and judges
           nothing, the least a full-batch monitor can cost; its ratio beside neuraldbg's
           (floor.py).

Files: workloads.py (what is trained), loop.py (the timed loop), timing.py, processes.py,
instructions.py, floor.py and child.py (the sections), machine.py (probes), profiler.py (--profile),
report.py (tables).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass

import torch
from loop import Monitoring
from machine import loadavg, machine
from report import TARGETS, report
from workloads import WORKLOADS

SECTIONS = ("timing", "memory", "long", "compile")     # (the default)
OPTIONAL = ("instructions", "floor")    # (run only when named: minutes per workload)


@dataclass(frozen=True)
class Sizes:
    """How much of each section to run: full, or --quick."""

    rounds: int
    long_steps: int
    memory_reps: int
    compile_steps: int
    compile_warmup: int
    compile_reps: int

    @classmethod
    def of(cls, args) -> Sizes:
        q = args.quick
        return cls(rounds=args.rounds or (3 if q else 7),
                   long_steps=args.long_steps or (3000 if q else 10000),
                   memory_reps=1 if q else 3,
                   compile_steps=20 if q else 60, compile_warmup=3 if q else 5,
                   compile_reps=1 if q else 2)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few rounds, fewer steps: a smoke check")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of " + ",".join(WORKLOADS))
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help="comma list of " + ",".join(SECTIONS + OPTIONAL) + " (default: all but "
                        + " and ".join(OPTIONAL) + ")")
    p.add_argument("--rounds", type=int, default=None, help="timing rounds (default 7, quick 3)")
    p.add_argument("--long-steps", type=int, default=None, help="tiny long run (default 10000, quick 3000)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads here and in the children (default: torch's own)")
    p.add_argument("--every", type=int, default=1, metavar="N",
                   help="monitor 1 step in N (NeuralDbg(every=N), `neuraldbg run --every N`; default 1)")
    p.add_argument("--stop-on", default=None, metavar="STATES",
                   help="stop on these states (NeuralDbg(stop_on=...), `neuraldbg run "
                        "--stop-on`; default no stop)")
    p.add_argument("--detectors", default=None, metavar="SIGNALS",
                   help="comma list of the signals monitored (NeuralDbg(detectors=...), "
                        "`neuraldbg run --detectors`; default all)")
    p.add_argument("--device", default="cpu",
                   help="where the timing section trains (cpu, cuda, cuda:1; default cpu)")
    p.add_argument("--json", metavar="PATH", help="save all results as JSON")
    p.add_argument("--profile", metavar="WORKLOAD", help="cProfile one monitored workload and exit")
    p.add_argument("--profile-steps", type=int, default=None)
    p.add_argument("--top", type=int, default=25)
    return p


def run_sections(names, sections, sizes, quick, monitoring, tmp, device="cpu") -> dict:
    """Runs the chosen sections in order, with progress lines; their results by section."""
    from processes import run_compile, run_long, run_memory
    from timing import run_timing

    res = {}
    if "timing" in sections:
        res["timing"] = {}
        for name in names:
            w = WORKLOADS[name]
            print(f"timing {name} ({w.description}): {sizes.rounds} rounds x {w.steps(quick)} steps ...",
                  flush=True)
            res["timing"][name] = t = run_timing(w, sizes.rounds, w.steps(quick), tmp, monitoring,
                                                 device)
            print(f"  median ratio {t['median_ratio']:.3f}  ratios "
                  f"{' '.join(f'{r:.3f}' for r in t['ratios'])}", flush=True)
    if "floor" in sections:
        res["floor"] = _floor(names, sizes.rounds, quick, monitoring, tmp)
    if "memory" in sections:
        res["memory"] = {}
        for name in names:
            steps = WORKLOADS[name].child_steps(quick)
            print(f"memory {name}: {sizes.memory_reps} x 2 processes x {steps} steps ...", flush=True)
            res["memory"][name] = r = run_memory(name, steps, sizes.memory_reps, tmp, monitoring)
            print(f"  peak RSS {r['peak_rss_plain_mb']:.1f} -> {r['peak_rss_monitored_mb']:.1f} MB, "
                  f"trace {r['trace_bytes']} B", flush=True)
    if "long" in sections:
        print(f"long: tiny model {sizes.long_steps} steps, plain and monitored ...", flush=True)
        res["long"] = run_long(sizes.long_steps, tmp, monitoring)
    if "instructions" in sections:
        res["instructions"] = _instructions(names, quick, monitoring, tmp)
    if "compile" in sections:
        print(f"compile: mlp under torch.compile, {sizes.compile_reps} process(es) each plain and "
              "monitored ...", flush=True)
        res["compile"] = run_compile("mlp", sizes.compile_steps, sizes.compile_warmup,
                                     sizes.compile_reps, tmp, monitoring)
    return res


def _floor(names, rounds, quick, monitoring, tmp) -> dict:
    from floor import run_floor

    out = {}
    for name in names:
        w = WORKLOADS[name]
        print(f"floor {name}: {rounds} rounds x {w.steps(quick)} steps, plain, bare and "
              "monitored ...", flush=True)
        out[name] = r = run_floor(w, rounds, w.steps(quick), tmp, monitoring)
        print(f"  bare {r['bare_ratio']:.3f}, monitored {r['monitored_ratio']:.3f}", flush=True)
    return out


def _instructions(names, quick, monitoring, tmp) -> dict:
    from instructions import available, run_instructions

    if not available():
        print("instructions: valgrind not found, section skipped", flush=True)
        return {}
    out = {}
    for name in names:
        w = WORKLOADS[name]
        steps = w.counted_steps(quick)
        print(f"instructions {name}: callgrind, {steps} steps after {w.warmup}, plain and "
              "monitored ...", flush=True)
        out[name] = r = run_instructions(name, steps, w.warmup, tmp, monitoring)
        print(f"  {r['plain_per_step']:,.0f} -> {r['monitored_per_step']:,.0f} a step, "
              f"ratio {r['ratio']:.3f}", flush=True)
    return out


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.every < 1:
        p.error(f"--every must be a positive integer, got {args.every}")
    monitoring = Monitoring(args.every, args.detectors, args.stop_on)
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["BENCH_THREADS"] = str(args.threads)      # the children read it
    elif os.environ.get("BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
    if args.profile:
        from profiler import run_profile

        if args.profile not in WORKLOADS:
            p.error(f"unknown workload: {args.profile}")
        w = WORKLOADS[args.profile]
        print(run_profile(w, args.profile_steps or 2 * w.steps(quick=True), args.top, monitoring))
        return 0
    names = [w for w in args.workloads.split(",") if w]
    sections = [s for s in args.sections.split(",") if s]
    known = SECTIONS + OPTIONAL
    for bad in [w for w in names if w not in WORKLOADS] + [s for s in sections if s not in known]:
        p.error(f"unknown workload or section: {bad}")
    res = {"machine": machine(), "quick": args.quick, "targets": TARGETS}
    if args.every != 1:
        res["every"] = args.every
    if args.detectors:
        res["detectors"] = args.detectors
    if args.stop_on:
        res["stop_on"] = args.stop_on
    if args.device != "cpu":
        res["device"] = args.device     # (the timing section's; the other sections run on the CPU)
    print(f"machine: {res['machine']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="neuraldbg-bench-") as tmp:
        res.update(run_sections(names, sections, Sizes.of(args), args.quick, monitoring, tmp,
                                args.device))
    res["machine"]["loadavg_end"] = loadavg()
    print(report(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        print(f"\nresults saved to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
