"""The current step's inputs, kept by reference for a capture: the outermost module's
arguments, the loss call's targets, the batch's dataset indices.

References only, never copies and never history: what the step's own forward holds anyway,
dropped as soon as the next step's first forward comes. Copies are made at a capture only.
"""
from __future__ import annotations

import weakref
from typing import NamedTuple

import torch

MAX_FORWARDS = 16       # forwards of one step kept (gradient accumulation); more are dropped


class Forward(NamedTuple):
    module: weakref.ref
    args: tuple
    kwargs: dict
    indices: object         # the batch's dataset indices (samples.py), or None


class Evidence:
    """Fed by the hooks: each outermost forward with gradients, each loss call's target."""

    def __init__(self, clock, samples=None):
        self.clock = clock
        self.samples = samples          # SampleIndices, or None
        self.step = -1
        self.forwards: list = []
        self.targets = None
        self.paused = False             # (a capture's own re-run)

    def _this_step(self) -> None:
        step = self.clock.step
        if step != self.step:
            self.step, self.forwards, self.targets = step, [], None

    def saw_forward(self, module, args, kwargs) -> None:
        if self.paused or not torch.is_grad_enabled():
            return
        self._this_step()
        if len(self.forwards) < MAX_FORWARDS:
            indices = self.samples.last if self.samples is not None else None
            self.forwards.append(Forward(weakref.ref(module), args, kwargs or {}, indices))

    def saw_loss(self, args: tuple, kwargs: dict) -> None:
        """A functional loss called as loss(input, target): keeps the target."""
        if self.paused or not torch.is_grad_enabled():
            return
        target = args[1] if len(args) > 1 else kwargs.get("target")
        if isinstance(target, torch.Tensor):
            self._this_step()
            self.targets = target
