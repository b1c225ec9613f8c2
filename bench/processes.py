"""The sections measured in fresh processes (memory, long, compile): child.py, run plain and
under the real CLI, `neuraldbg run`."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from child import MARK
from loop import ALL

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
CHILD = os.path.join(BENCH, "child.py")


def spawn(kind, name, steps, monitored, tmp, tag, rss_at="", warmup=0, env_extra=None,
          monitoring=ALL, prefix=()) -> dict:
    """Runs child.py in a fresh process (after the command `prefix`: a tool that runs it);
    its JSON line, plus its trace's figures if monitored."""
    cmd = [CHILD, kind, name, "--steps", str(steps), "--warmup", str(warmup)]
    if rss_at:
        cmd += ["--rss-at", rss_at]
    trace = os.path.join(tmp, f"{tag}-{name}.jsonl")
    if monitored:
        cmd = [sys.executable, "-m", "neuraldbg_cli", "run", "-q", *monitoring.cli(), "--trace",
               trace, *cmd]
    else:
        cmd = [sys.executable, *cmd]
    cmd = [*prefix, *cmd]
    env = dict(os.environ, **(env_extra or {}))
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - t0
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"child failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    out = json.loads(lines[-1][len(MARK):])
    out["process_wall_s"] = wall
    out["stderr_lines"] = len(proc.stderr.splitlines())
    if monitored:
        out["trace"] = trace_stats(trace)
    return out


def trace_stats(path) -> dict:
    """Size, events by type, run_end's step count and status, and any failure transitions."""
    events, kinds, end, failures = 0, {}, None, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            e = json.loads(line)
            events += 1
            kinds[e.get("event")] = kinds.get(e.get("event"), 0) + 1
            if e.get("event") == "run_end":
                end = e
            elif e.get("event") == "transition" and e["to"] not in ("normal", "healthy"):
                failures.append(f"{e['layer']} {e['signal']} {e['to']}@{e['step']}")
    return {"bytes": os.path.getsize(path), "events": events, "by_event": kinds,
            "steps": end.get("steps") if end else None, "status": end.get("status") if end else None,
            "failure_transitions": failures[:10]}


def _abba(reps):
    """(rep, monitored) in ABBA order: plain first in even reps, monitored first in odd ones."""
    return [(r, m) for r in range(reps) for m in ((False, True) if r % 2 == 0 else (True, False))]


def run_memory(name, steps, reps, tmp, monitoring=ALL) -> dict:
    """`reps` fresh processes each, plain and under `neuraldbg run`, in ABBA order; the peak
    RSS of each kind is the median over its processes (the allocator makes it vary)."""
    runs = {False: [], True: []}
    for r, monitored in _abba(reps):
        runs[monitored].append(spawn("train", name, steps, monitored, tmp, f"mem{r}",
                                    monitoring=monitoring))
    plain = statistics.median(x["peak_rss_mb"] for x in runs[False])
    mon = statistics.median(x["peak_rss_mb"] for x in runs[True])
    trace = runs[True][0]["trace"]
    return {"steps": steps, "reps": reps, "plain": runs[False], "monitored": runs[True],
            "peak_rss_plain_mb": plain, "peak_rss_monitored_mb": mon,
            "peak_rss_overhead": mon / plain - 1,
            "trace_bytes": trace["bytes"], "trace_events": trace["events"],
            "trace_steps": trace["steps"], "trace_failures": trace["failure_transitions"]}


def run_long(steps, tmp, monitoring=ALL) -> dict:
    """The tiny model for `steps` steps, plain and monitored; VmRSS at steps/10 and at the end."""
    early = steps // 10
    at = f"{early},{steps}"
    res = {"steps": steps, "early_step": early}
    for label, monitored in (("plain", False), ("monitored", True)):
        r = spawn("train", "tiny", steps, monitored, tmp, "long", rss_at=at, monitoring=monitoring)
        a, b = r["rss_mb_at"][str(early)], r["rss_mb_at"][str(steps)]
        res[label] = {"rss_mb_early": a, "rss_mb_end": b, "growth": b / a - 1,
                      "peak_rss_mb": r["peak_rss_mb"], "loop_s": r["loop_s"],
                      **({"trace_bytes": r["trace"]["bytes"], "trace_events": r["trace"]["events"]}
                         if monitored else {})}
    return res


def run_compile(name, steps, warmup, reps, tmp, monitoring=ALL) -> dict:
    """`reps` processes each plain and monitored, in ABBA order, each with a cold inductor
    cache; figures are medians over the processes of each kind."""
    res = {"workload": name, "steps": steps, "warmup": warmup, "reps": reps,
           "runs": {"plain": [], "monitored": []}}
    for k, (_, monitored) in enumerate(_abba(reps)):
        cache = tempfile.mkdtemp(prefix=f"inductor-{k}-", dir=tmp)
        res["runs"]["monitored" if monitored else "plain"].append(spawn(
            "compile", name, steps, monitored, tmp, f"compile{k}", warmup=warmup,
            monitoring=monitoring,
            env_extra={"TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                       "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}))
    for label, runs in res["runs"].items():
        res[label] = _compile_summary(runs)
    res["step_ratio"] = res["monitored"]["ms_per_step"] / res["plain"]["ms_per_step"]
    res["median_step_ratio"] = res["monitored"]["median_ms_per_step"] / res["plain"]["median_ms_per_step"]
    res["compile_ratio"] = res["monitored"]["first_step_s"] / res["plain"]["first_step_s"]
    return res


def _compile_summary(runs) -> dict:
    """Medians of the timings and peaks, the worst of the counts, the first run's reasons."""
    summary = {key: statistics.median(r[key] for r in runs)
               for key in ("first_step_s", "ms_per_step", "median_ms_per_step", "peak_rss_mb")}
    for key in ("unique_graphs", "graph_breaks", "recompiles"):
        summary[key] = max(r[key] for r in runs)
    summary["graph_break_reasons"] = runs[0]["graph_break_reasons"]
    summary["recompile_reasons"] = runs[0]["recompile_reasons"]
    if "trace" in runs[0]:
        summary["trace"] = runs[0]["trace"]
    return summary
