"""The `floor` section: what watching every layer costs at the least, timed beside neuraldbg.

A bare observer does only what any monitor that judges the full batch must do, and nothing
else: it reads every leaf module's output once (its norm, which a NaN or an Inf reaches; small
outputs held and normed together at the step's end, as neuraldbg does) and every gradient
once (their norms, after the optimizer step), and brings the numbers to the host once a
step. It judges nothing and writes nothing. Its ratio to plain training is the least that a
monitor reading every output and gradient in full costs on that machine; what neuraldbg adds
above it is what a faster monitor could still remove.

Each round runs plain, bare and monitored in turn (the order reversed every other round,
as the timing section's ABBA), after one discarded round of each.
"""
from __future__ import annotations

import contextlib
import os
import statistics

import torch
from loop import ALL, Monitoring, timed_round
from torch.nn.modules import module as nn_module
from torch.optim.optimizer import register_optimizer_step_post_hook
from workloads import Workload

HOLD_MAX = 1 << 14      # elements: outputs this small are normed together at the step end


class BareObserver:
    """A context manager: the bare observer's two global hooks, installed while it is open."""

    def __init__(self):
        self.held, self.norms = [], []
        self.read: list = []            # the last step's numbers, on the host
        self._leaf: dict = {}           # id(module) -> has no children
        self._handles = []

    def _output(self, module, args, y) -> None:
        leaf = self._leaf.get(id(module))
        if leaf is None:
            leaf = self._leaf[id(module)] = next(module.children(), None) is None
        if leaf and type(y) is torch.Tensor and y.is_floating_point() and torch.is_grad_enabled():
            y = y.detach()
            if y.numel() <= HOLD_MAX:
                self.held.append(y)
            else:
                self.norms.append(torch.linalg.vector_norm(y))

    def _stepped(self, opt, args, kwargs) -> None:
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        pending = self.held + grads
        values = self.norms + list(torch._foreach_norm(pending)) if pending else self.norms
        self.held, self.norms = [], []
        self.read = [v.item() for v in values]

    def __enter__(self):
        self._handles = [nn_module.register_module_forward_hook(self._output),
                         register_optimizer_step_post_hook(self._stepped)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        return False


def run_floor(workload: Workload, rounds: int, steps: int, tmp: str,
              monitoring: Monitoring = ALL) -> dict:
    """Per-round loop times of plain, bare and monitored training, and their ratios."""
    trace = os.path.join(tmp, f"floor-{workload.name}.jsonl")
    kinds = ("plain", "bare", "monitored")

    def one(kind, n):
        return timed_round(workload, n, trace if kind == "monitored" else None, monitoring,
                           around=BareObserver if kind == "bare" else contextlib.nullcontext)[0]
    for kind in kinds:      # discarded: first-touch, allocator, lazy imports
        one(kind, max(1, steps // 4))
    times = {k: [] for k in kinds}
    for r in range(rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            times[kind].append(one(kind, steps))
    plain = times["plain"]
    out = {"rounds": rounds, "steps": steps,
           "plain_ms_per_step": 1e3 * statistics.median(plain) / steps}
    for kind in ("bare", "monitored"):
        ratios = [t / p for t, p in zip(times[kind], plain)]
        out[f"{kind}_ratios"] = ratios
        out[f"{kind}_ratio"] = statistics.median(ratios)
        out[f"{kind}_added_ms_per_step"] = 1e3 * (statistics.median(times[kind])
                                                   - statistics.median(plain)) / steps
    return out
