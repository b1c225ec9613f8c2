"""The results as text tables, one per section, with ok/OVER against the targets."""
from __future__ import annotations

from loop import Monitoring
from workloads import WORKLOADS

TARGETS = {"ratio": {name: w.ratio_target for name, w in WORKLOADS.items()},
           "peak_rss_overhead": 0.10, "long_rss_growth": 0.05}


def _ok(flag) -> str:
    return "ok" if flag else "OVER"


def report(res: dict) -> str:
    """The whole report (starting with an empty line), for the results of overhead.py."""
    m = res["machine"]
    lines = ["", f"machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, torch {m['torch']} "
             f"({m['torch_threads']} threads), python {m['python']}",
             f"load average: start {m['loadavg_start']}, end {m.get('loadavg_end')}"
             f"{'  (quick run)' if res['quick'] else ''}"]
    if res.get("timing"):
        lines += _timing(res["timing"], Monitoring(res.get("every", 1), res.get("detectors")),
                         res.get("device", "cpu"))
    if res.get("floor"):
        lines += _floor(res["floor"])
    if res.get("memory"):
        lines += _memory(res["memory"])
    if res.get("long"):
        lines += _long(res["long"])
    if res.get("compile"):
        lines += _compile(res["compile"])
    if res.get("instructions"):
        lines += _instructions(res["instructions"])
    return "\n".join(lines)


def _timing(timing, monitoring, device="cpu") -> list:
    lines = ["", f"training-loop time, monitored / plain ({monitoring.describe()}, on {device})",
             f"{'workload':12} {'rounds':>6} {'steps':>6} {'plain ms/step':>14} {'mon ms/step':>12} "
             f"{'+ms/step':>9} {'median':>7} {'min':>6} {'max':>6} {'target':>7}      {'step-med':>8}"]
    for name, t in timing.items():
        target = TARGETS["ratio"][name]
        lines.append(
            f"{name:12} {t['rounds']:6d} {t['steps']:6d} {t['plain_ms_per_step']:14.3f} "
            f"{t['monitored_ms_per_step']:12.3f} {t['added_ms_per_step']:9.3f} "
            f"{t['median_ratio']:7.3f} {t['min_ratio']:6.3f} {t['max_ratio']:6.3f} "
            f"{'<=' + format(target, '.2f'):>7} {_ok(t['median_ratio'] <= target):4} "
            f"{t['step_median_ratio']:8.3f}")
    lines.append("(median/min/max: of the per-round ratios of loop time; step-med: median over rounds "
                 "of the ratio of median step times, a noise check)")
    return lines


def _floor(floor) -> list:
    lines = ["", "the floor: a bare observer (every leaf output and every gradient read once, nothing "
             "judged) beside neuraldbg, against plain training",
             f"{'workload':12} {'rounds':>6} {'steps':>6} {'plain ms/step':>14} {'bare':>6} "
             f"{'+ms':>7} {'monitored':>9} {'+ms':>7} {'above bare':>10} {'target':>7} "
             f"{'floor/target':>12}"]
    for name, r in floor.items():
        target = TARGETS["ratio"][name]
        b, m = r["bare_ratio"], r["monitored_ratio"]
        lines.append(
            f"{name:12} {r['rounds']:6d} {r['steps']:6d} {r['plain_ms_per_step']:14.3f} {b:6.3f} "
            f"{r['bare_added_ms_per_step']:7.3f} {m:9.3f} {r['monitored_added_ms_per_step']:7.3f} "
            f"{r['monitored_added_ms_per_step'] - r['bare_added_ms_per_step']:10.3f} "
            f"{'<=' + format(target, '.2f'):>7} {(b - 1) / (target - 1):11.0%}")
    lines.append("(ratios: medians over rounds of loop time / plain loop time; floor/target: the share "
                 "of the target's allowance the bare observer uses by itself)")
    return lines


def _memory(memory) -> list:
    reps = next(iter(memory.values()))["reps"]
    lines = ["", f"peak RSS (VmHWM of a fresh process: python vs `neuraldbg run`; median of {reps} each) "
             "and the monitored run's trace",
             f"{'workload':12} {'steps':>6} {'plain MB':>9} {'mon MB':>9} {'+MB':>6} {'overhead':>9} "
             f"{'target':>7}      {'trace B':>9} {'events':>7} {'failures in trace'}"]
    limit = TARGETS["peak_rss_overhead"]
    for name, r in memory.items():
        fails = r["trace_failures"]
        lines.append(
            f"{name:12} {r['steps']:6d} {r['peak_rss_plain_mb']:9.1f} {r['peak_rss_monitored_mb']:9.1f} "
            f"{r['peak_rss_monitored_mb'] - r['peak_rss_plain_mb']:6.1f} "
            f"{100 * r['peak_rss_overhead']:8.1f}% {f'<={limit:.0%}':>7} "
            f"{_ok(r['peak_rss_overhead'] <= limit):4} "
            f"{r['trace_bytes']:9d} {r['trace_events']:7d} {', '.join(fails) or '-'}")
    return lines


def _long(long) -> list:
    e, n = long["early_step"], long["steps"]
    limit = TARGETS["long_rss_growth"]
    lines = ["", f"tiny model, VmRSS at step {e} and {n} (target: monitored growth <= {limit:.0%})"]
    for label in ("plain", "monitored"):
        r = long[label]
        extra = f"   trace {r['trace_bytes']} B, {r['trace_events']} events" if "trace_bytes" in r else ""
        lines.append(f"  {label:10} {r['rss_mb_early']:8.1f} MB -> {r['rss_mb_end']:8.1f} MB  "
                     f"{100 * r['growth']:+6.2f}%  ({r['loop_s']:.1f} s){extra}"
                     f"{'  ' + _ok(r['growth'] <= limit) if label == 'monitored' else ''}")
    return lines


def _compile(comp) -> list:
    lines = ["", f"torch.compile ({comp['workload']}, inductor, cold cache): {comp['steps']} timed steps "
             f"after {comp['warmup']}; median of {comp['reps']} process(es) each",
             f"  {'':10} {'first step s':>12} {'ms/step':>9} {'median ms':>9} {'graphs':>7} {'breaks':>7} "
             f"{'recompiles':>10} {'peak MB':>8}"]
    for label in ("plain", "monitored"):
        r = comp[label]
        lines.append(
            f"  {label:10} {r['first_step_s']:12.2f} {r['ms_per_step']:9.3f} {r['median_ms_per_step']:9.3f} "
            f"{r['unique_graphs']:7d} {r['graph_breaks']:7d} {r['recompiles']:10d} {r['peak_rss_mb']:8.1f}")
    lines.append(f"  monitored/plain: first step (compile) {comp['compile_ratio']:.3f}, loop time "
                 f"{comp['step_ratio']:.3f}, median step {comp['median_step_ratio']:.3f}")
    for label in ("plain", "monitored"):
        lines += [f"  {label} graph break: {reason}" for reason in comp[label]["graph_break_reasons"]]
        lines += [f"  {label} recompile: {reason}" for reason in comp[label]["recompile_reasons"]]
    t = comp["monitored"].get("trace")
    if t:
        lines.append(f"  monitored trace: {t['bytes']} B, {t['events']} events {t['by_event']}, "
                     f"steps {t['steps']}")
    return lines


def _instructions(counts) -> list:
    lines = ["", "machine instructions per step (callgrind, one thread, after the warm-up; not time: "
             "see instructions.py)",
             f"{'workload':12} {'steps':>6} {'plain':>13} {'monitored':>13} {'added':>13} {'ratio':>7}"]
    for name, r in counts.items():
        p, m = r["plain_per_step"], r["monitored_per_step"]
        lines.append(f"{name:12} {r['steps']:6d} {p:13,.0f} {m:13,.0f} {m - p:13,.0f} {r['ratio']:7.3f}")
    return lines
