"""The optimizer side of a run: which optimizer paces the steps, its learning rates, and
each layer's gradient norm at the step (read with the rest of the step's numbers)."""
from __future__ import annotations

import weakref

import torch

_LR_CHANGE = 0.10         # relative learning-rate change that is written as an hparams event


class OptimizerWatch:
    """State kept per optimizer; bounded by the number of optimizers, not of steps."""

    def __init__(self, emit):
        self.emit = emit
        self.primary = None               # weakref to the optimizer whose step ends a step
        self._stepped: dict = {}          # id(optimizer) -> steps in the current window
        self._names: dict = {}            # id(optimizer) -> (class name, index)
        self._lrs: dict = {}              # id(optimizer) -> learning rates last written
        self._cache: dict = {}            # id(optimizer) -> parameter layout (see grad_norms)

    def paces(self, opt) -> bool:
        """Count a step of `opt`; True when it is the optimizer whose steps end steps: the
        first one to step, or a new one once the old is gone or has stopped stepping
        (training in phases). With a GAN's two optimizers, the first sets the pace."""
        key = id(opt)
        self._stepped[key] = self._stepped.get(key, 0) + 1
        primary = self.primary() if self.primary is not None else None
        if primary is None or (primary is not opt and self._stepped[key] > 1):
            self.primary, primary = weakref.ref(opt), opt
        return primary is opt

    def new_window(self) -> None:
        self._stepped = {}

    def record_hparams(self, opt, step: int) -> None:
        """An hparams event the first time, and when a learning rate moves by over 10%
        from the value last written (schedules stay a handful of events, not one a step)."""
        key = id(opt)
        if key not in self._names:
            self._names[key] = (type(opt).__name__, len(self._names))
        lrs = [float(g["lr"]) for g in opt.param_groups if "lr" in g]
        prev = self._lrs.get(key)
        if lrs == prev:
            return
        if prev is not None and len(prev) == len(lrs) and all(
                abs(a - b) <= _LR_CHANGE * max(abs(b), 1e-30) for a, b in zip(lrs, prev)):
            return
        self._lrs[key] = lrs
        name, index = self._names[key]
        event = {"event": "hparams", "step": step, "optimizer": name,
                 "optimizer_index": index, "lr": lrs, "previous_lr": prev}
        if prev is None:
            g0 = opt.param_groups[0]
            for k in ("momentum", "betas", "weight_decay", "eps"):
                if k in g0:
                    v = g0[k]
                    event[k] = list(v) if isinstance(v, tuple) else v
        self.emit(event)

    def grad_norms(self, opt, owners: dict, raw: bool = False):
        """([gradient norms as 0-d device tensors], [the layer record of each]) for the
        parameters of `opt` that have a gradient and belong to an observed layer; the norms
        of a layer's parameters are combined on the host, after the step's one read.
        raw: dense float32 gradients are returned as they are, for the caller to norm (now)."""
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        key = tuple(map(id, params))
        cached = self._cache.get(id(opt))
        if cached is None or cached[0] != key:
            cached = self._cache[id(opt)] = (key, *_layout(params, owners))
        _, keep, recs, device, mixed = cached
        if not keep:
            return None
        grads = [params[i].grad for i in keep]
        grads = [g.coalesce()._values() if g.is_sparse else g for g in grads]
        if raw and all(g.dtype == torch.float32 for g in grads):
            return grads, recs
        if any(g.dtype == torch.float64 for g in grads):
            norms = [n.float() for n in torch._foreach_norm(grads, 2)]
        else:   # half-precision sums of squares would overflow
            norms = torch._foreach_norm(grads, 2, dtype=torch.float32)
        if mixed:
            norms = [n.to(device) for n in norms]
        return list(norms), recs


def _layout(params: list, owners: dict):
    """Which parameters to read and the layer of each: computed again only when the set of
    parameters with gradients changes."""
    keep = [i for i, p in enumerate(params) if id(p) in owners]
    if not keep:
        return keep, [], None, False
    recs = [owners[id(params[i])] for i in keep]
    device = params[keep[0]].device
    mixed = any(params[i].device != device for i in keep)
    return keep, recs, device, mixed
