#!/usr/bin/env python
"""On a CUDA machine: does monitoring make the host wait for the GPU, and what does it cost?
(a check, not a test: it prints what it finds; CPU-only machines have nothing to check).

    python bench/gpu_check.py [--steps 60] [--rounds 5] [--json out.json]

1. Host syncs. Each workload trains plain, then inside a neuraldbg session, under
   `torch.cuda.set_sync_debug_mode("warn")`: every operation that makes the host wait for
   the device warns. Reported: syncs per step, plain and monitored, and where in neuraldbg
   each extra one comes from. The deferred read is one non-blocking copy a step, so a
   monitored step should add none (a GradScaler syncs by itself, at its inf check, and on
   a step it skips, neuraldbg reads which layer overflowed first).
2. Time. Plain and monitored rounds alternate (ABBA); reported: the median over rounds of
   monitored / plain loop time, the device synchronised at each round's end.
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
import traceback
import warnings

import torch
from torch import nn


def mlp(device):
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = [(torch.randn(256, 256, device=device), torch.randint(0, 10, (256,), device=device))
            for _ in range(8)]
    return model, opt, data, None


def transformer(device):
    layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.1, activation="gelu",
                                       batch_first=True, norm_first=True)
    model = nn.Sequential(nn.Embedding(1000, 128), nn.TransformerEncoder(
        layer, 4, enable_nested_tensor=False), nn.Flatten(), nn.Linear(64 * 128, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = [(torch.randint(0, 1000, (32, 64), device=device),
             torch.randint(0, 10, (32,), device=device)) for _ in range(8)]
    return model, opt, data, None


def stack(device):
    """32 Linear-LayerNorm-GELU blocks, width 256: many modules of modest size."""
    layers = []
    for _ in range(32):
        layers += [nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(256, 10)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = [(torch.randn(64, 256, device=device), torch.randint(0, 10, (64,), device=device))
            for _ in range(8)]
    return model, opt, data, None


def mlp_fp16_scaler(device):
    model, opt, data, _ = mlp(device)
    return model, opt, data, torch.amp.GradScaler(device.type)


WORKLOADS = {"mlp": mlp, "transformer": transformer, "stack": stack,
             "mlp_fp16_scaler": mlp_fp16_scaler}


def make_step(model, opt, data, scaler):
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        x, y = data[i % len(data)]
        if scaler is None:
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return step


def session(trace):
    if trace is None:
        import contextlib
        return contextlib.nullcontext()
    from neuraldbg_cli import NeuralDbg
    return NeuralDbg(trace=trace)


def count_syncs(name, steps, monitored, trace):
    """(syncs per step over `steps` steps after 5 warm-up steps, Counter of where neuraldbg's
    frames asked for them)."""
    torch.manual_seed(0)
    where = collections.Counter()
    count = [0]
    shown = warnings.showwarning

    def seen(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message):
            return shown(message, category, filename, lineno, file, line)
        count[0] += 1
        ours = [f for f in traceback.extract_stack()[:-1] if "neuraldbg_cli" in f.filename]
        if ours:
            f = ours[-1]
            where[f"{f.filename.split('neuraldbg_cli')[-1]}:{f.lineno} {f.name}"] += 1
        return None

    with session(trace if monitored else None):
        step = make_step(*WORKLOADS[name](torch.device("cuda")))
        for i in range(5):
            step(i)
        torch.cuda.synchronize()
        warnings.showwarning = seen
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = seen
            torch.cuda.set_sync_debug_mode("warn")
            try:
                for i in range(5, 5 + steps):
                    step(i)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        warnings.showwarning = shown
        torch.cuda.synchronize()
    return count[0] / steps, where


def timing(name, steps, rounds, trace):
    ratios = []
    for r in range(rounds):
        times = {}
        for monitored in ((False, True) if r % 2 == 0 else (True, False)):
            torch.manual_seed(0)
            with session(trace if monitored else None):
                step = make_step(*WORKLOADS[name](torch.device("cuda")))
                for i in range(5):
                    step(i)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for i in range(5, 5 + steps):
                    step(i)
                torch.cuda.synchronize()
                times[monitored] = time.perf_counter() - t0
        ratios.append(times[True] / times[False])
    return statistics.median(ratios), ratios


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--trace", default="/tmp/gpu_check.jsonl")
    p.add_argument("--json")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    out = {}
    for name in WORKLOADS:
        plain, _ = count_syncs(name, args.steps, False, args.trace)
        mon, where = count_syncs(name, args.steps, True, args.trace)
        ratio, ratios = timing(name, args.steps, args.rounds, args.trace)
        out[name] = {"syncs_per_step_plain": plain, "syncs_per_step_monitored": mon,
                     "neuraldbg_sync_sites": dict(where), "time_ratio": ratio,
                     "time_ratios": ratios}
        print(f"{name:16s} syncs/step plain {plain:.2f} monitored {mon:.2f}   "
              f"time monitored/plain {ratio:.3f} (rounds {', '.join(f'{r:.3f}' for r in ratios)})")
        for site, n in where.most_common(8):
            print(f"    {n:5d}  {site}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
