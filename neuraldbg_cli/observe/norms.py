"""Normalisation layers' numbers, read without a pass over any activation.

BatchNorm in training mode updates its running mean with the batch mean:
    running_new = (1 - m) * running_old + m * batch_mean     (m: momentum; None: 1 / calls)
so |batch_mean - running_old| = |running_new - running_old| / m. Copying the C running
means and variances before the call (one `stack`, on the device) and comparing after it gives
how far the batch's statistics lie from those BatchNorm will use at evaluation: a handful of
ops on C values per call, reduced to one 0-d tensor read with the step's other numbers.

LayerNorm/GroupNorm/RMSNorm gains are parameters: their norms are taken at the step end, for
every such layer called in the step, in one batched call.
"""
from __future__ import annotations

import math

import torch
from torch import nn

_BATCHNORM = nn.modules.batchnorm._BatchNorm
_GAINED = tuple(c for c in (nn.LayerNorm, nn.GroupNorm, getattr(nn, "RMSNorm", None)) if c)


def is_batchnorm(module) -> bool:
    """A BatchNorm whose running statistics can be compared (they exist, are tracked)."""
    return isinstance(module, _BATCHNORM) and module.track_running_stats \
        and getattr(module, "running_mean", None) is not None


def gain_of(module):
    """The affine gain of a LayerNorm/GroupNorm/RMSNorm, or None."""
    if not isinstance(module, _GAINED):
        return None
    w = getattr(module, "weight", None)
    return w if isinstance(w, torch.Tensor) else None


def reading_for(module):
    if is_batchnorm(module):
        return BatchNormReading()
    if gain_of(module) is not None:
        return GainReading()
    return None


class BatchNormReading:
    """One BatchNorm's drift over a step: the batch mean's distance from the running mean it
    had before each call, in running standard deviations, averaged over channels (summed over
    the step's calls on the device; divided by `calls` on the host)."""

    __slots__ = ("old", "total", "calls", "per_channel", "batch", "momentum")
    batchnorm = True

    def __init__(self):
        self.old = None             # running mean and variance before the call, stacked
        self.total = None
        self.calls = 0
        self.per_channel = 0        # fewest values per channel in one call of the step
        self.batch = 0
        self.momentum = None

    def before(self, module) -> None:
        m = module.momentum
        if m == 0 or module.running_mean is None or module.running_mean.dtype.is_complex:
            self.old = None         # (a momentum of 0 never updates: nothing to learn)
            return
        self.old = torch.stack((module.running_mean, module.running_var))

    def after(self, module, args) -> bool:
        """Account for one call; True on the step's first."""
        old, self.old = self.old, None
        if old is None or not args or not isinstance(args[0], torch.Tensor):
            return False
        x = args[0]
        m = module.momentum
        # |running_new - running_old| / m per channel, in running standard deviations
        z = torch.sub(module.running_mean, old[0]).abs_().div_(old[1].add(module.eps).sqrt_())
        drift = z.mean() * (1.0 / m) if m is not None else (z * module.num_batches_tracked).mean()
        first = self.calls == 0
        self.total = drift if first else self.total + drift
        n = x.numel() // max(1, x.shape[1] if x.dim() > 1 else x.shape[0])
        self.per_channel = n if first else min(self.per_channel, n)
        self.batch = x.shape[0] if x.dim() > 1 else 1
        self.momentum = m
        self.calls += 1
        return first

    def take(self) -> tuple:
        """(the 0-d tensor to read, what to say with it); empties it for the next step."""
        out = self.total, {"calls": self.calls, "per_channel": self.per_channel,
                           "batch": self.batch, "momentum": self.momentum}
        self.total, self.calls = None, 0
        return out


class GainReading:
    """A LayerNorm/GroupNorm/RMSNorm called in the step: its gain is normed at the step end."""

    __slots__ = ("called",)
    batchnorm = False

    def __init__(self):
        self.called = False

    def before(self, module) -> None:
        pass

    def after(self, module, args) -> bool:
        first, self.called = not self.called, True
        return first


def norm_tensors(recs: list) -> tuple:
    """(0-d tensors to read, [(layer record, facts, numel or None)]) for the layers `recs`
    whose norm readings were touched this step; BatchNorm drifts as they are, the gains' norms
    in one `_foreach_norm`."""
    tensors, jobs, gains, gained = [], [], [], []
    for rec in recs:
        reading = rec.norm
        if reading.batchnorm:
            total, facts = reading.take()
            if total is not None:
                tensors.append(total)
                jobs.append((rec, facts, None))
        else:
            reading.called = False
            module = rec.ref()
            w = gain_of(module) if module is not None else None
            if w is not None and w.numel() and w.dtype.is_floating_point:
                gains.append(w.detach())
                gained.append((rec, {}, w.numel()))
    if gains:
        if any(g.dtype == torch.float64 for g in gains):
            tensors += [n.float() for n in torch._foreach_norm(gains)]
        else:   # (half-precision sums of squares would overflow)
            tensors += torch._foreach_norm(gains, 2, dtype=torch.float32)
        jobs += gained
    return tensors, jobs


def norm_facts(job: tuple, value: float) -> dict:
    """The facts handed to the norm detector for one layer, from its value read."""
    rec, facts, numel = job
    if numel is not None:
        return {"gain_rms": value / math.sqrt(numel)}
    return {**facts, "drift": value / max(1, facts["calls"])}
