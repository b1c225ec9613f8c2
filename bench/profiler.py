"""--profile: cProfile of one monitored workload's timed loop, and where the monitor's time goes."""
from __future__ import annotations

import contextlib
import cProfile
import os
import pstats
import tempfile

from loop import ALL, Monitoring, timed_round
from workloads import Workload

OURS = "neuraldbg_cli"


def run_profile(workload: Workload, steps: int, top: int, monitoring: Monitoring = ALL) -> str:
    """Profiles `steps` monitored steps (set-up and warm-up are not profiled); the report."""
    prof = cProfile.Profile()

    @contextlib.contextmanager
    def profiling():
        prof.enable()
        try:
            yield
        finally:
            prof.disable()
    with tempfile.TemporaryDirectory() as tmp:
        wall, _ = timed_round(workload, steps, os.path.join(tmp, "profile.jsonl"), monitoring,
                              around=profiling)
    st = pstats.Stats(prof)
    lines = [f"profile of {workload.name} under monitoring: {steps} steps, {wall:.2f} s wall "
             f"(profiled), {st.total_tt:.2f} s in profile"]
    return "\n".join(lines + _entry_points(st) + _ours(st, top) + _top_self(st, top))


def _label(k) -> str:
    return f"{os.path.basename(k[0])}:{k[1]}({k[2]})"


def _row(share, k, v) -> str:
    _, nc, tt, ct, _ = v
    return f"  {share:5.1f}%  cum {ct:7.3f}s  self {tt:7.3f}s  {nc:8d} calls  {_label(k)}"


def _entry_points(st) -> list:
    """neuraldbg functions that torch calls (the hooks), with what the costliest three call."""
    total = st.total_tt
    ours = {k: v for k, v in st.stats.items() if OURS in k[0]}
    entries = sorted((k for k, v in ours.items() if not k[2].startswith("<")
                      and not any(OURS in c[0] for c in v[4])),
                     key=lambda k: -ours[k][3])
    out = ["", "monitor entry points, called by torch (cumulative time, share of the profiled loop):"]
    out += [_row(100 * ours[k][3] / total, k, ours[k]) for k in entries
            if ours[k][3] >= 0.001 * total]
    out.append(f"  {100 * sum(ours[k][3] for k in entries) / total:5.1f}%  all entry points together")
    st.calc_callees()
    for k in entries[:3]:
        out.append(f"  {_label(k)} calls:")
        for ct, nc, where in sorted(((v[3], v[1], _label(c)) for c, v in st.all_callees[k].items()),
                                    reverse=True)[:6]:
            out.append(f"      {100 * ct / total:5.1f}%  {nc:8d} calls  {where}")
    return out


def _ours(st, top) -> list:
    total = st.total_tt
    ours = {k: v for k, v in st.stats.items() if OURS in k[0]}
    out = ["", "neuraldbg functions by cumulative time:"]
    out += [_row(100 * ours[k][3] / total, k, ours[k])
            for k in sorted(ours, key=lambda k: -ours[k][3])[:top]]
    own = sum(v[2] for k, v in ours.items())
    return out + ["", f"self time in neuraldbg_cli Python code: {100 * own / total:.1f}%"]


def _top_self(st, top) -> list:
    total = st.total_tt
    rows = sorted(((tt, ct, nc, _label(k)) for k, (_, nc, tt, ct, _) in st.stats.items()),
                  reverse=True)
    return ["", f"top {top} functions by self time:"] + [
        f"  {100 * tt / total:5.1f}%  self {tt:7.3f}s  cum {ct:7.3f}s  {nc:8d} calls  {where}"
        for tt, ct, nc, where in rows[:top]]
