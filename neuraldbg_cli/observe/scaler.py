"""torch.amp.GradScaler at each step: the loss scale the step's backward used, whether the
scaler skipped the optimizer step (its gradients held inf/NaN), and on a skipped step the
layer whose gradients overflowed first.

`GradScaler.step` is wrapped while a run is observed (the `torch.cuda.amp.GradScaler` alias
is a subclass, wrapped with it). A skipped step is still a step: the scaler did not call the
optimizer, so the hooks are told (`Hooks.optimizer_skipped`), and its gradients, which hold
the overflow, are neither judged nor applied. The scale is read with the step's other
numbers (no read of its own); which layer overflowed, on a skipped step only.
"""
from __future__ import annotations

import functools

import torch

from .optimizers import local_shard


def _scaler_class():
    """torch.amp.GradScaler (torch 2.3 and later); before it, torch.cuda.amp's."""
    return getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler


class ScalerWatch:
    def __init__(self, hooks, registry, fault):
        self.hooks, self.registry, self.fault = hooks, registry, fault
        self.facts: dict | None = None      # this step's {"scale", "skipped", "overflow"}
        self._original = self._cls = None

    def install(self) -> None:
        cls = self._cls = _scaler_class()
        original, watch = cls.step, self

        @functools.wraps(original)
        def step(scaler, optimizer, *args, **kwargs):
            if not watch.hooks.active or not getattr(scaler, "_enabled", False):
                return original(scaler, optimizer, *args, **kwargs)
            before = watch._before(scaler)
            out = original(scaler, optimizer, *args, **kwargs)
            if before is not None and watch.hooks.optimizer_steps == before:
                watch._skipped(optimizer)
            return out

        cls.step, self._original = step, original

    def remove(self) -> None:
        if self._original is not None:
            self._cls.step, self._original = self._original, None

    def take(self, pacer=None) -> dict | None:
        """The step's facts, handed over to the step end. With an optimizer that applies the
        scale itself (fused Adam: `_step_supports_amp_scaling`), the scaler calls its step
        every time and hands it the inf check (`found_inf`), read with the step's numbers; its
        kernel unscales the gradients in place, unless it skips the step (then neither they
        nor the update are judged, as on any skipped step)."""
        facts, self.facts = self.facts, None
        found = getattr(pacer, "found_inf", None)
        if facts is not None and not facts["skipped"] and isinstance(found, torch.Tensor):
            facts["skipped"] = found.detach().clone().float()
        return facts

    def _before(self, scaler) -> int | None:
        """Before the scaler's step: the scale in use (the first of the step's optimizers),
        and the optimizer steps so far (None: a fault, nothing watched)."""
        try:
            if self.facts is None:
                scale = scaler._scale
                if scale is None:
                    return None
                # (a copy, read with the step's numbers: update() changes the scale in place)
                self.facts = {"scale": scale.detach().clone(), "skipped": False}
            return self.hooks.optimizer_steps
        except Exception as e:  # noqa: BLE001 - a monitor fault must not end the run
            self.fault("GradScaler observation failed", e)
            return None

    def _skipped(self, optimizer) -> None:
        """The scaler skipped `optimizer`'s step: say where its gradients overflowed first,
        then end the step as the optimizer's own step would have."""
        try:
            facts = self.facts
            if facts is not None and not facts["skipped"]:
                facts["skipped"] = True
                first = self._first_overflow(optimizer)
                if first is not None:
                    facts["overflow"] = first
        except Exception as e:  # noqa: BLE001
            self.fault("GradScaler observation failed", e)
        self.hooks.optimizer_skipped(optimizer)

    def _first_overflow(self, optimizer) -> str | None:
        """The layer, of those called this step, with non-finite gradients nearest the loss
        (the backward pass reaches it first; the layers before it inherit its inf/NaN). One
        read of the gradients' norms, on a skipped step only."""
        owners = self.registry.owners
        grads, recs = [], []
        for group in optimizer.param_groups:
            for p in group["params"]:
                rec = owners.get(id(p))
                if p.grad is not None and rec is not None:
                    grads.append(local_shard(p.grad))
                    recs.append(rec)
        if not grads:
            return None
        norms = torch._foreach_norm(grads)
        device = norms[0].device
        finite = torch.stack([n.float().to(device) for n in norms]).isfinite().tolist()
        bad = {rec for rec, ok in zip(recs, finite) if not ok}
        order = {rec: i for i, rec in enumerate(self.hooks.touched)}
        first = max(bad, key=lambda r: order.get(r, -1), default=None)
        return self.registry.name_of(first) if first is not None else None
