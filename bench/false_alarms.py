#!/usr/bin/env python
"""False alarms of the activation anomaly detector on healthy training (a benchmark, not a test).

    python bench/false_alarms.py                  # tiny 10k steps, BN/Dropout MLP, GELU transformer
    python bench/false_alarms.py --quick          # a tenth of the steps
    PYTHONPATH=/path/to/other/checkout python bench/false_alarms.py    # another version

Each model trains under `with NeuralDbg(...)` (the engine of `neuraldbg run`, default
thresholds), entered before the model is built, as the CLI is. Healthy runs should report
nothing but their first `normal`: every `anomalous` transition is a false alarm. Printed per
model: the activation layer-steps judged, the steps judged anomalous before the debounce
(raw), the largest deviation judged, in chart sigmas (max z; out of control beyond `enter`,
5), the anomalous transitions and their rate per layer-step, the other failure transitions
(any signal), and the most state changes of any layer, of the activation signal (act) and of
any signal (conftest.MAX_CHANGES bounds it at 8 in the tests).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

import torch
from torch import nn
from workloads import TinyLM, build_tiny

import neuraldbg_cli
from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.observe.detectors.activation import ActivationDetector


def build_bn_mlp():
    """An MLP with BatchNorm and Dropout, batch 64, SGD with momentum, on a fixed pool of data."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.3),
                          nn.Linear(128, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.3),
                          nn.Linear(128, 10))
    x, w = torch.randn(4096, 32), torch.randn(32, 10)
    y = (x @ w).argmax(1)                   # a learnable task: the loss falls, layers move
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        idx = torch.randint(0, len(x), (64,))
        loss = loss_fn(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def build_small_lm():
    """A 2-block GELU transformer LM (bench's TinyLM, 32-dim), 16 x 16 tokens, AdamW."""
    torch.manual_seed(0)
    model = TinyLM(vocab=64, d=32, heads=4, layers=2, context=16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    # sequences with structure (each token mostly follows from the one before) to learn
    start = torch.randint(0, 64, (1024, 1))
    data = (start + torch.arange(17) * 3 + torch.randint(0, 2, (1024, 17))) % 64

    def step(i):
        seq = data[torch.randint(0, len(data), (16,))]
        logits = model(seq[:, :-1])
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), seq[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


MODELS = {"tiny": (build_tiny, 10_000), "bn_mlp": (build_bn_mlp, 4_000),
          "gelu_lm": (build_small_lm, 2_000)}


class RawVerdicts:
    """Counts the detector's `anomalous` verdicts before the debounce (single steps out of
    control), a finer measure of the margin than the transitions, and where the layers have
    control charts, the largest deviation judged, in chart sigmas: ActivationDetector.judge
    wrapped while the block runs."""

    def __init__(self):
        self.count = 0
        self.sigmas = None          # None: a version without control charts

    def __enter__(self):
        plain = self.plain = ActivationDetector.judge

        def judge(detector, x, history):
            verdict = plain(detector, x, history)
            self.count += verdict[0] == "anomalous"
            chart = getattr(history, "log_rms", None)
            if hasattr(chart, "sigmas") and chart.n >= chart.limits.warmup and x[1] > 0:
                z = [abs(chart.sigmas(math.log(x[1])))]
                if x[2] is not None:
                    z.append(abs(history.sparsity.sigmas(x[2])))
                self.sigmas = max(self.sigmas or 0.0, *z)
            return verdict
        ActivationDetector.judge = judge
        return self

    def __exit__(self, *exc):
        ActivationDetector.judge = self.plain


def measure(name: str, steps: int, folder: str) -> dict:
    """Train `name` for `steps` steps under the monitor; the figures of its transitions."""
    build = MODELS[name][0]
    t0 = time.perf_counter()
    with RawVerdicts() as raw, NeuralDbg(trace=os.path.join(folder, f"{name}.jsonl")) as dbg:
        step = build()
        for i in range(steps):
            step(i)
    seconds = time.perf_counter() - t0
    ts = dbg.transitions
    changes: dict = {}
    for t in ts:
        key = (t["layer"], t["signal"])
        changes[key] = changes.get(key, 0) + 1
    layers = sum(signal == "activation" for _, signal in changes)
    healthy = ("normal", "healthy")
    return {"steps": dbg.steps, "layers": layers, "layer_steps": layers * dbg.steps,
            "raw": raw.count, "sigmas": raw.sigmas, "anomalous": sum(t["to"] == "anomalous" for t in ts),
            "other": sum(t["to"] not in (*healthy, "anomalous") for t in ts),
            "act": max((n for (_, signal), n in changes.items() if signal == "activation"),
                       default=0),
            "most": max(((n, k) for k, n in changes.items()), default=(0, None)),
            "seconds": seconds,
            "alarms": [(t["step"], t["layer"], t["to"], t["stats"]) for t in ts
                       if t["to"] not in healthy][:10]}


_HEAD = ("model", "steps", "layers", "layer-steps", "raw", "max z", "anomalous", "rate", "other",
         "act", "most changes (any signal)", "seconds")
_ROW = "{:8} {:>6} {:>6} {:>11} {:>5} {:>5} {:>9} {:>9} {:>5} {:>3} {:>30} {:>7}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the steps")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"neuraldbg_cli from {os.path.dirname(neuraldbg_cli.__file__)}")
    print(_ROW.format(*_HEAD))
    total = {"layer_steps": 0, "anomalous": 0, "raw": 0, "most": 0}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            r = measure(name, MODELS[name][1] // (10 if args.quick else 1), folder)
            rate = r["anomalous"] / max(r["layer_steps"], 1)
            most, who = r["most"]
            z = "-" if r["sigmas"] is None else f"{r['sigmas']:.1f}"
            print(_ROW.format(name, r["steps"], r["layers"], r["layer_steps"], r["raw"], z,
                              r["anomalous"], f"{rate:.2e}", r["other"], r["act"],
                              f"{most} {who}", f"{r['seconds']:.0f}"))
            for alarm in r["alarms"]:
                print("   ", *alarm)
            for key in ("layer_steps", "anomalous", "raw"):
                total[key] += r[key]
            total["most"] = max(total["most"], most)
    n, a = total["layer_steps"], total["anomalous"]
    print(f"all: {a} anomalous transitions in {n} layer-steps ({a / max(n, 1):.2e} per "
          f"layer-step); {total['raw']} single layer-steps judged anomalous before the debounce; "
          f"most state changes of any layer and signal: {total['most']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
