#!/usr/bin/env python
"""Monitoring overhead of neuraldbg against plain training (a benchmark, not a test).

    python bench/overhead.py                      # everything, full size (several minutes)
    python bench/overhead.py --quick              # smoke check, about a minute
    python bench/overhead.py --workloads mlp,tiny --sections timing --json out.json
    python bench/overhead.py --profile tiny       # where the monitor spends its time

Sections (see docs/benchmarks.md for the method and the targets):

  timing   In this process, each workload trains plain and monitored, alternating (ABBA
           order), for several rounds. A monitored round runs inside the engine `neuraldbg run`
           uses (neuraldbg_cli.session.Session: start() before the workload is built, as the
           CLI does before the script runs; finish() after). Only the training loop is timed:
           building the model and the warm-up steps are not. Reported: the median over rounds
           of monitored/plain loop time.
  memory   Per workload, two fresh processes run the same training: `python bench/overhead.py
           --child ...` and `python -m neuraldbg_cli run ... bench/overhead.py --child ...` (the
           real CLI). Each reports its own peak RSS (VmHWM); the monitored one's trace is
           measured (bytes, events).
  long     The tiny model for 10k steps (plain and under the CLI), VmRSS at step 1k and 10k.
  compile  The MLP under torch.compile (inductor, cold cache per process), plain and under
           the CLI: first-step (compile) time, steady step time, graph breaks, recompiles.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import json
import logging
import os
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn
from torch.nn import functional as F

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
MARK = "BENCH_CHILD "


# ---- workloads ---------------------------------------------------------------------------

def _batches(n, make):
    """A fixed pool of synthetic batches, cycled: data generation stays out of the loop."""
    return [make() for _ in range(n)]


def build_mlp(compile_model=False):
    """4-layer ReLU MLP 784-1024-1024-512-10, batch 256, SGD with momentum."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10))
    data = _batches(4, lambda: (torch.randn(256, 784), torch.randint(0, 10, (256,))))
    return _classifier(model, data, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                       compile_model)


class VGG(nn.Module):
    """VGG-style: (conv3x3-BN-ReLU) x2 then max-pool, three times (32-64-128 channels), then
    global average pooling and a linear classifier; 3x32x32 inputs."""

    def __init__(self, widths=(32, 64, 128), classes=10):
        super().__init__()
        layers, c = [], 3
        for w in widths:
            for _ in range(2):
                layers += [nn.Conv2d(c, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
                c = w
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(c, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def build_cnn(compile_model=False):
    """VGG-style CNN with BatchNorm, batch 64 of 3x32x32, SGD with momentum."""
    torch.manual_seed(0)
    model = VGG()
    data = _batches(4, lambda: (torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))))
    return _classifier(model, data, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                       compile_model)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP (GPT-style)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    """4-layer GELU transformer LM: vocab 1000, 128-dim, 4 heads, context 64."""

    def __init__(self, vocab=1000, d=128, heads=4, layers=4, context=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def build_transformer(compile_model=False):
    """4-layer GELU transformer LM, 16 sequences x 64 tokens, next-token loss, AdamW."""
    torch.manual_seed(0)
    model = TinyLM()
    run = torch.compile(model) if compile_model else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loss_fn = nn.CrossEntropyLoss()
    data = _batches(4, lambda: torch.randint(0, 1000, (16, 65)))

    def step(i):
        seq = data[i % len(data)]
        logits = run(seq[:, :-1])
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), seq[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def build_tiny(compile_model=False):
    """Tiny ReLU MLP 32-64-64-10, batch 32: Python per-call cost dominates."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    data = _batches(16, lambda: (torch.randn(32, 32), torch.randint(0, 10, (32,))))
    return _classifier(model, data, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                       compile_model)


def _classifier(model, data, opt, compile_model):
    run = torch.compile(model) if compile_model else model
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        x, y = data[i % len(data)]
        loss = loss_fn(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


# name -> (build, description, timed steps per round (full, quick), warm-up steps,
#          steps of the memory child (full, quick))
WORKLOADS = {
    "mlp": (build_mlp, "ReLU MLP 784-1024-1024-512-10, batch 256", (40, 10), 3, (200, 40)),
    "cnn": (build_cnn, "VGG-style CNN 6 conv+BN+ReLU, batch 64x3x32x32", (15, 4), 2, (60, 12)),
    "transformer": (build_transformer, "GELU transformer LM 4x128d, 16x64 tokens", (40, 10), 3, (200, 40)),
    "tiny": (build_tiny, "tiny ReLU MLP 32-64-64-10, batch 32", (2000, 500), 20, (2000, 500)),
}
SECTIONS = ("timing", "memory", "long", "compile")


# ---- machine -----------------------------------------------------------------------------

def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    mem, info = None, {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break                                   # the first CPU is enough
                key, _, value = line.partition(":")
                info[key.strip()] = value.strip()
        cpu = info.get("model name", cpu)
        if "cpu family" in info and "model" in info:
            cpu += f" (family {info['cpu family']} model {info['model']})"
        if "hypervisor" in info.get("flags", "").split():
            cpu += ", virtual machine"
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    mem = round(int(line.split()[1]) / 2**20, 1)
                    break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {"cpu": cpu, "cores": cores, "mem_gib": mem, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "os": platform.platform(), "loadavg_start": _loadavg()}


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def vmrss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    """Peak RSS of this process: VmHWM of /proc/self/status. Not ru_maxrss: Linux carries
    ru_maxrss over fork and execve, so a child started by a big parent (this benchmark, after
    its timing section) reports the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # KiB on Linux


# ---- timing (in process) -----------------------------------------------------------------

def _session(trace):
    from neuraldbg_cli.observe.session import Session
    from neuraldbg_cli.thresholds import load_thresholds

    # What `neuraldbg run` does around the script (cli._observe), quiet, model=None.
    return Session(trace, load_thresholds(None), script=HERE, argv=[HERE], quiet=True)


def timed_round(name, monitored, steps, warmup, trace) -> tuple:
    """(seconds of `steps` training steps after `warmup` untimed ones, per-step seconds);
    a fresh model each round, built under the session when monitored (as under
    `neuraldbg run`, where the script builds it after the hooks are installed)."""
    build = WORKLOADS[name][0]
    gc.collect()
    session = _session(trace) if monitored else None
    if session is not None:
        session.start()
    try:
        step = build()
        for i in range(warmup):
            step(i)
        clock = time.perf_counter
        per_step = []
        t0 = prev = clock()
        for i in range(warmup, warmup + steps):
            step(i)
            now = clock()
            per_step.append(now - prev)
            prev = now
        elapsed = prev - t0
    finally:
        if session is not None:
            session.finish("completed", 0)
    return elapsed, per_step


def run_timing(name, rounds, steps, warmup, tmp) -> dict:
    trace = os.path.join(tmp, f"timing-{name}.jsonl")
    for monitored in (False, True):     # discarded: first-touch, allocator, lazy imports
        timed_round(name, monitored, max(1, steps // 4), warmup, trace)
    plain, mon, step_ratios = [], [], []
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)     # ABBA: cancels drift
        times = {m: timed_round(name, m, steps, warmup, trace) for m in order}
        plain.append(times[False][0])
        mon.append(times[True][0])
        step_ratios.append(statistics.median(times[True][1]) / statistics.median(times[False][1]))
    ratios = [m / p for m, p in zip(mon, plain)]
    return {"rounds": rounds, "steps": steps, "warmup": warmup,
            "plain_s": plain, "monitored_s": mon, "ratios": ratios,
            # Diagnostic for a loaded machine: a preempted step inflates a loop's sum, hardly
            # its median step.
            "step_median_ratios": step_ratios, "step_median_ratio": statistics.median(step_ratios),
            "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
            "max_ratio": max(ratios),
            "plain_ms_per_step": 1e3 * statistics.median(plain) / steps,
            "monitored_ms_per_step": 1e3 * statistics.median(mon) / steps,
            "added_ms_per_step": 1e3 * (statistics.median(mon) - statistics.median(plain)) / steps}


# ---- children (fresh processes; monitored ones under the real CLI) -----------------------

def child_main(args) -> None:
    """Runs inside a fresh process (plain python, or under `neuraldbg run`)."""
    out = {"workload": args.workload, "steps": args.steps, "rss_mb_at": {}}
    rss_at = {int(s) for s in args.rss_at.split(",")} if args.rss_at else set()
    if args.child == "train":
        out["rss_mb_before_build"] = vmrss_mb()
        step = WORKLOADS[args.workload][0]()
        t0 = time.perf_counter()
        for i in range(args.steps):
            step(i)
            if i + 1 in rss_at:
                out["rss_mb_at"][i + 1] = vmrss_mb()
        out["loop_s"] = time.perf_counter() - t0
    else:   # compile
        from torch._dynamo.utils import counters

        recompiles = []

        class Count(logging.Handler):
            def emit(self, record):
                recompiles.append(record.getMessage().splitlines()[0][:200])
        torch._logging.set_logs(recompiles=True)
        logging.getLogger("torch._dynamo.guards.__recompiles").addHandler(Count())
        counters.clear()
        step = WORKLOADS[args.workload][0](compile_model=True)
        t0 = time.perf_counter()
        step(0)
        out["first_step_s"] = time.perf_counter() - t0
        for i in range(1, args.warmup):
            step(i)
        out["after_warmup_s"] = time.perf_counter() - t0
        per_step = []
        t0 = prev = time.perf_counter()
        for i in range(args.warmup, args.warmup + args.steps):
            step(i)
            now = time.perf_counter()
            per_step.append(now - prev)
            prev = now
        out["loop_s"] = prev - t0
        out["ms_per_step"] = 1e3 * out["loop_s"] / args.steps
        out["median_ms_per_step"] = 1e3 * statistics.median(per_step)
        gb = counters.get("graph_break", {})
        out["graph_breaks"] = sum(gb.values())
        out["graph_break_reasons"] = [f"{n}x {k[:160]}" for k, n in
                                      sorted(gb.items(), key=lambda kv: -kv[1])[:5]]
        out["unique_graphs"] = counters["stats"].get("unique_graphs", 0)
        out["frames_compiled"] = counters["frames"].get("ok", 0)
        out["recompiles"] = len(recompiles)
        out["recompile_reasons"] = recompiles[:5]
    out["peak_rss_mb"] = peak_rss_mb()
    out["rss_mb_end"] = vmrss_mb()
    print(MARK + json.dumps(out), flush=True)


def spawn(child, name, steps, monitored, tmp, tag, rss_at="", warmup=0, env_extra=None) -> dict:
    cmd = [HERE, "--child", child, "--workload", name, "--steps", str(steps),
           "--warmup", str(warmup)]
    if rss_at:
        cmd += ["--rss-at", rss_at]
    trace = os.path.join(tmp, f"{tag}-{name}.jsonl")
    if monitored:
        cmd = [sys.executable, "-m", "neuraldbg_cli", "run", "-q", "--trace", trace, *cmd]
    else:
        cmd = [sys.executable, *cmd]
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
    events, kinds, end = 0, {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            e = json.loads(line)
            events += 1
            kinds[e.get("event")] = kinds.get(e.get("event"), 0) + 1
            if e.get("event") == "run_end":
                end = e
    failures = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if '"transition"' in line:
                e = json.loads(line)
                if e["to"] not in ("normal", "healthy"):
                    failures.append(f"{e['layer']} {e['signal']} {e['to']}@{e['step']}")
    return {"bytes": os.path.getsize(path), "events": events, "by_event": kinds,
            "steps": end.get("steps") if end else None, "status": end.get("status") if end else None,
            "failure_transitions": failures[:10]}


def run_memory(name, steps, reps, tmp) -> dict:
    """`reps` fresh processes each, plain and under `neuraldbg run`, in ABBA order; the peak
    RSS of each kind is the median over its processes (the allocator makes it vary)."""
    runs = {False: [], True: []}
    for r in range(reps):
        for monitored in ((False, True) if r % 2 == 0 else (True, False)):
            runs[monitored].append(spawn("train", name, steps, monitored, tmp, f"mem{r}"))
    plain = statistics.median(x["peak_rss_mb"] for x in runs[False])
    mon = statistics.median(x["peak_rss_mb"] for x in runs[True])
    trace = runs[True][0]["trace"]
    return {"steps": steps, "reps": reps, "plain": runs[False], "monitored": runs[True],
            "peak_rss_plain_mb": plain, "peak_rss_monitored_mb": mon,
            "peak_rss_overhead": mon / plain - 1,
            "trace_bytes": trace["bytes"], "trace_events": trace["events"],
            "trace_steps": trace["steps"], "trace_failures": trace["failure_transitions"]}


def run_long(steps, tmp) -> dict:
    early = steps // 10
    at = f"{early},{steps}"
    res = {"steps": steps, "early_step": early}
    for label, monitored in (("plain", False), ("monitored", True)):
        r = spawn("train", "tiny", steps, monitored, tmp, "long", rss_at=at)
        a, b = r["rss_mb_at"][str(early)], r["rss_mb_at"][str(steps)]
        res[label] = {"rss_mb_early": a, "rss_mb_end": b, "growth": b / a - 1,
                      "peak_rss_mb": r["peak_rss_mb"], "loop_s": r["loop_s"],
                      **({"trace_bytes": r["trace"]["bytes"], "trace_events": r["trace"]["events"]}
                         if monitored else {})}
    return res


def run_compile(name, steps, warmup, reps, tmp) -> dict:
    """`reps` processes each plain and monitored, in ABBA order, each with a cold inductor
    cache; figures are medians over the processes of each kind."""
    res = {"workload": name, "steps": steps, "warmup": warmup, "reps": reps,
           "runs": {"plain": [], "monitored": []}}
    order = [m for r in range(reps) for m in ((False, True) if r % 2 == 0 else (True, False))]
    for k, monitored in enumerate(order):
        label = "monitored" if monitored else "plain"
        cache = tempfile.mkdtemp(prefix=f"inductor-{k}-", dir=tmp)
        res["runs"][label].append(spawn(
            "compile", name, steps, monitored, tmp, f"compile{k}", warmup=warmup,
            env_extra={"TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                       "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}))
    for label, runs in res["runs"].items():
        summary = {key: statistics.median(r[key] for r in runs)
                   for key in ("first_step_s", "ms_per_step", "median_ms_per_step", "peak_rss_mb")}
        for key in ("unique_graphs", "graph_breaks", "recompiles"):
            summary[key] = max(r[key] for r in runs)
        summary["graph_break_reasons"] = runs[0]["graph_break_reasons"]
        summary["recompile_reasons"] = runs[0]["recompile_reasons"]
        if "trace" in runs[0]:
            summary["trace"] = runs[0]["trace"]
        res[label] = summary
    res["step_ratio"] = res["monitored"]["ms_per_step"] / res["plain"]["ms_per_step"]
    res["median_step_ratio"] = res["monitored"]["median_ms_per_step"] / res["plain"]["median_ms_per_step"]
    res["compile_ratio"] = res["monitored"]["first_step_s"] / res["plain"]["first_step_s"]
    return res


# ---- profile -----------------------------------------------------------------------------

def run_profile(name, steps, warmup, top) -> None:
    build = WORKLOADS[name][0]
    with tempfile.TemporaryDirectory() as tmp:
        session = _session(os.path.join(tmp, "profile.jsonl"))
        session.start()
        try:
            step = build()
            for i in range(warmup):
                step(i)
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            for i in range(warmup, warmup + steps):
                step(i)
            prof.disable()
            wall = time.perf_counter() - t0
        finally:
            session.finish("completed", 0)
    st = pstats.Stats(prof)
    total = st.total_tt
    print(f"profile of {name} under monitoring: {steps} steps, {wall:.2f} s wall "
          f"(profiled), {total:.2f} s in profile")
    ours = {k: v for k, v in st.stats.items() if "neuraldbg_cli" in k[0]}

    def label(k):
        return f"{os.path.basename(k[0])}:{k[1]}({k[2]})"
    # Entry points: neuraldbg functions that torch calls (hooks), not neuraldbg itself.
    entries = sorted((k for k, v in ours.items() if not k[2].startswith("<")
                      and not any("neuraldbg_cli" in c[0] for c in v[4])),
                     key=lambda k: -ours[k][3])
    print("\nmonitor entry points, called by torch (cumulative time, share of the profiled loop):")
    for k in entries:
        _, nc, tt, ct, _ = ours[k]
        if ct >= 0.001 * total:
            print(f"  {100 * ct / total:5.1f}%  cum {ct:7.3f}s  self {tt:7.3f}s  {nc:8d} calls  {label(k)}")
    print(f"  {100 * sum(ours[k][3] for k in entries) / total:5.1f}%  all entry points together")
    st.calc_callees()
    for k in entries[:3]:
        print(f"  {label(k)} calls:")
        for ct, nc, where in sorted(((v[3], v[1], label(c)) for c, v in st.all_callees[k].items()),
                                    reverse=True)[:6]:
            print(f"      {100 * ct / total:5.1f}%  {nc:8d} calls  {where}")
    print("\nneuraldbg functions by cumulative time:")
    for k in sorted(ours, key=lambda k: -ours[k][3])[:top]:
        _, nc, tt, ct, _ = ours[k]
        print(f"  {100 * ct / total:5.1f}%  cum {ct:7.3f}s  self {tt:7.3f}s  {nc:8d} calls  {label(k)}")
    own = sum(tt for (file, _, _), (_, _, tt, _, _) in st.stats.items() if "neuraldbg_cli" in file)
    print(f"\nself time in neuraldbg_cli Python code: {100 * own / total:.1f}%")
    print(f"\ntop {top} functions by self time:")
    rows = sorted(((tt, ct, nc, f"{os.path.basename(file)}:{line}({func})")
                   for (file, line, func), (_, nc, tt, ct, _) in st.stats.items()), reverse=True)
    for tt, ct, nc, where in rows[:top]:
        print(f"  {100 * tt / total:5.1f}%  self {tt:7.3f}s  cum {ct:7.3f}s  {nc:8d} calls  {where}")


# ---- report ------------------------------------------------------------------------------

TARGETS = {"ratio": {"mlp": 1.10, "cnn": 1.10, "transformer": 1.10, "tiny": 1.5},
           "peak_rss_overhead": 0.10, "long_rss_growth": 0.05}


def _ok(flag):
    return "ok" if flag else "OVER"


def report(res) -> None:
    m = res["machine"]
    print(f"\nmachine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, torch {m['torch']} "
          f"({m['torch_threads']} threads), python {m['python']}")
    print(f"load average: start {m['loadavg_start']}, end {m.get('loadavg_end')}"
          f"{'  (quick run)' if res['quick'] else ''}")
    timing = res.get("timing", {})
    if timing:
        print("\ntraining-loop time, monitored / plain (every step monitored)")
        print(f"{'workload':12} {'rounds':>6} {'steps':>6} {'plain ms/step':>14} {'mon ms/step':>12} "
              f"{'+ms/step':>9} {'median':>7} {'min':>6} {'max':>6} {'target':>7}      {'step-med':>8}")
        for name, t in timing.items():
            target = TARGETS["ratio"][name]
            print(f"{name:12} {t['rounds']:6d} {t['steps']:6d} {t['plain_ms_per_step']:14.3f} "
                  f"{t['monitored_ms_per_step']:12.3f} {t['added_ms_per_step']:9.3f} "
                  f"{t['median_ratio']:7.3f} {t['min_ratio']:6.3f} {t['max_ratio']:6.3f} "
                  f"{'<=' + format(target, '.2f'):>7} {_ok(t['median_ratio'] <= target):4} "
                  f"{t['step_median_ratio']:8.3f}")
        print("(median/min/max: of the per-round ratios of loop time; step-med: median over rounds "
              "of the ratio of median step times, a noise check)")
    memory = res.get("memory", {})
    if memory:
        reps = next(iter(memory.values()))["reps"]
        print(f"\npeak RSS (VmHWM of a fresh process: python vs `neuraldbg run`; median of {reps} each) "
              "and the monitored run's trace")
        print(f"{'workload':12} {'steps':>6} {'plain MB':>9} {'mon MB':>9} {'+MB':>6} {'overhead':>9} "
              f"{'target':>7}      {'trace B':>9} {'events':>7} {'failures in trace'}")
        for name, r in memory.items():
            fails = r["trace_failures"]
            print(f"{name:12} {r['steps']:6d} {r['peak_rss_plain_mb']:9.1f} {r['peak_rss_monitored_mb']:9.1f} "
                  f"{r['peak_rss_monitored_mb'] - r['peak_rss_plain_mb']:6.1f} "
                  f"{100 * r['peak_rss_overhead']:8.1f}% {'<=10%':>7} {_ok(r['peak_rss_overhead'] <= 0.10):4} "
                  f"{r['trace_bytes']:9d} {r['trace_events']:7d} {', '.join(fails) or '-'}")
    long = res.get("long")
    if long:
        e, n = long["early_step"], long["steps"]
        print(f"\ntiny model, VmRSS at step {e} and {n} (target: monitored growth <= 5%)")
        for label in ("plain", "monitored"):
            r = long[label]
            extra = f"   trace {r['trace_bytes']} B, {r['trace_events']} events" if "trace_bytes" in r else ""
            print(f"  {label:10} {r['rss_mb_early']:8.1f} MB -> {r['rss_mb_end']:8.1f} MB  "
                  f"{100 * r['growth']:+6.2f}%  ({r['loop_s']:.1f} s){extra}"
                  f"{'  ' + _ok(r['growth'] <= 0.05) if label == 'monitored' else ''}")
    comp = res.get("compile")
    if comp:
        print(f"\ntorch.compile ({comp['workload']}, inductor, cold cache): {comp['steps']} timed steps "
              f"after {comp['warmup']}; median of {comp['reps']} process(es) each")
        print(f"  {'':10} {'first step s':>12} {'ms/step':>9} {'median ms':>9} {'graphs':>7} {'breaks':>7} "
              f"{'recompiles':>10} {'peak MB':>8}")
        for label in ("plain", "monitored"):
            r = comp[label]
            print(f"  {label:10} {r['first_step_s']:12.2f} {r['ms_per_step']:9.3f} {r['median_ms_per_step']:9.3f} "
                  f"{r['unique_graphs']:7d} {r['graph_breaks']:7d} {r['recompiles']:10d} {r['peak_rss_mb']:8.1f}")
        print(f"  monitored/plain: first step (compile) {comp['compile_ratio']:.3f}, loop time "
              f"{comp['step_ratio']:.3f}, median step {comp['median_step_ratio']:.3f}")
        for label in ("plain", "monitored"):
            for reason in comp[label]["graph_break_reasons"]:
                print(f"  {label} graph break: {reason}")
            for reason in comp[label]["recompile_reasons"]:
                print(f"  {label} recompile: {reason}")
        t = comp["monitored"].get("trace")
        if t:
            print(f"  monitored trace: {t['bytes']} B, {t['events']} events {t['by_event']}, steps {t['steps']}")


# ---- main --------------------------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few rounds, fewer steps: a smoke check")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of " + ",".join(WORKLOADS))
    p.add_argument("--sections", default=",".join(SECTIONS), help="comma list of " + ",".join(SECTIONS))
    p.add_argument("--rounds", type=int, default=None, help="timing rounds (default 7, quick 3)")
    p.add_argument("--long-steps", type=int, default=None, help="tiny long run (default 10000, quick 3000)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads here and in the children (default: torch's own)")
    p.add_argument("--json", metavar="PATH", help="save all results as JSON")
    p.add_argument("--profile", metavar="WORKLOAD", help="cProfile one monitored workload and exit")
    p.add_argument("--profile-steps", type=int, default=None)
    p.add_argument("--top", type=int, default=25)
    # internal: the child processes
    p.add_argument("--child", choices=("train", "compile"), help=argparse.SUPPRESS)
    p.add_argument("--workload", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    p.add_argument("--warmup", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--rss-at", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["BENCH_THREADS"] = str(args.threads)      # the children read it
    elif os.environ.get("BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["BENCH_THREADS"]))

    if args.child:
        child_main(args)
        return 0
    if args.profile:
        name = args.profile
        steps = args.profile_steps or (WORKLOADS[name][2][1] * 2)
        run_profile(name, steps, WORKLOADS[name][3], args.top)
        return 0

    names = [w for w in args.workloads.split(",") if w]
    sections = [s for s in args.sections.split(",") if s]
    for bad in [w for w in names if w not in WORKLOADS] + [s for s in sections if s not in SECTIONS]:
        p.error(f"unknown workload or section: {bad}")
    q = 1 if args.quick else 0
    rounds = args.rounds or (3 if args.quick else 7)
    long_steps = args.long_steps or (3000 if args.quick else 10000)
    res = {"machine": machine(), "quick": args.quick, "targets": TARGETS}
    print(f"machine: {res['machine']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="neuraldbg-bench-") as tmp:
        if "timing" in sections:
            res["timing"] = {}
            for name in names:
                _, desc, steps, warmup, _ = WORKLOADS[name]
                print(f"timing {name} ({desc}): {rounds} rounds x {steps[q]} steps ...", flush=True)
                res["timing"][name] = t = run_timing(name, rounds, steps[q], warmup, tmp)
                print(f"  median ratio {t['median_ratio']:.3f}  ratios "
                      f"{' '.join(f'{r:.3f}' for r in t['ratios'])}", flush=True)
        if "memory" in sections:
            res["memory"] = {}
            for name in names:
                steps = WORKLOADS[name][4][q]
                reps = 1 if args.quick else 3
                print(f"memory {name}: {reps} x 2 processes x {steps} steps ...", flush=True)
                res["memory"][name] = r = run_memory(name, steps, reps, tmp)
                print(f"  peak RSS {r['peak_rss_plain_mb']:.1f} -> {r['peak_rss_monitored_mb']:.1f} MB, "
                      f"trace {r['trace_bytes']} B", flush=True)
        if "long" in sections:
            print(f"long: tiny model {long_steps} steps, plain and monitored ...", flush=True)
            res["long"] = run_long(long_steps, tmp)
        if "compile" in sections:
            steps, warmup, reps = (20, 3, 1) if args.quick else (60, 5, 2)
            print(f"compile: mlp under torch.compile, {reps} process(es) each plain and monitored ...",
                  flush=True)
            res["compile"] = run_compile("mlp", steps, warmup, reps, tmp)
    res["machine"]["loadavg_end"] = _loadavg()
    report(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        print(f"\nresults saved to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
