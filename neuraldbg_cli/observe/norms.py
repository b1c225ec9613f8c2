"""Normalisation layers' numbers, read without a pass over any activation.

BatchNorm in training mode updates its running mean with the batch mean:
    running_new = (1 - m) * running_old + m * batch_mean     (m: momentum; None: 1 / calls)
so |batch_mean - running_old| = |running_new - running_old| / m. Copying the C running
means and variances before the call (one `stack`, on the device) and comparing after it gives
how far the batch's statistics lie from those BatchNorm will use at evaluation; keeping the
batch mean (C values) gives how far it lies from the batch before: a handful of ops on C
values per call, reduced to two 0-d tensors read with the step's other numbers.

The two tell unfair batches from a running average that lags. Batches that are not fair
samples (one class each, or too few values) differ from one another about as much as from
the running mean (about 1.4x as much, for independent batches). Batches that are fair while
the weights move fast (lr 0.1 on a fresh ResNet: 2% a step) agree with one another and lie
together ahead of a running mean that follows them ~1/m steps late: measured on ResNet18 at
batch 64, up to 0.98 running std from the running mean, at most 0.27 from the batch before.

The same numbers give a large BatchNorm output's norm with no pass over it, on the CPU, where
that pass is what monitoring a conv net costs most (a BatchNorm's hook on a 16x64x56x56 map:
0.75 ms a call reading it, 0.31 without). In training, each channel's output is g * x_hat + b with x_hat of
mean 0 and (biased) variance var / (var + eps), so its sum of squares over the channel's M
values is M * (g^2 var / (var + eps) + b^2), var being the batch's unbiased variance
(running_var_new - (1 - m) running_var_old) / m times (M - 1) / M. It agrees with the read
norm to ~1e-4 (float32 sums over millions of values), and a NaN or Inf in the batch makes it
NaN, as it does the output. It stands for the read only where it is the same thing: the stock
forward of a BatchNorm in training mode (not SyncBatchNorm, normalised by every rank's
statistics, nor a subclass that adds an activation), a momentum of at least MIN_MOMENTUM (the
subtraction loses ~1/m of float32's precision), and running statistics that were finite at
the last step judged. Running statistics once poisoned by a NaN batch stay NaN while the
output, normalised by each new batch, is finite again: the formula would then say NaN, so
the output is read until the statistics are finite again. Where the step's numbers are read
later (a CUDA device), the output is read: a reduction there costs less than these ops.

LayerNorm/GroupNorm/RMSNorm gains are parameters: their norms are taken at the step end, for
every such layer called in the step, in one batched call.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.parameter import is_lazy

_BATCHNORM = nn.modules.batchnorm._BatchNorm
_STOCK_FORWARD = _BATCHNORM.forward
KNOWN_MIN = 1 << 18     # values: a BatchNorm output this large has its norm from statistics
MIN_MOMENTUM = 0.01
_WIDE = (torch.float32, torch.float64)
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


def reading_for(module, reads_output: bool = False):
    """reads_output: the layer's output is read (its norm may then come from statistics)."""
    if is_batchnorm(module):
        return BatchNormReading(reads_output)
    if gain_of(module) is not None:
        return GainReading()
    return None


class BatchNormReading:
    """One BatchNorm's drift over a step: the batch mean's distance from the running mean it
    had before each call, and from the batch mean of the same call of the step before (a GAN's
    discriminator normalises real, then generated images: each kind is compared with its
    own), in running standard deviations, averaged over channels (summed over the step's
    calls on the device; divided by `calls` on the host). And, where it may, each call's
    output norm (`known`)."""

    __slots__ = ("old", "total", "calls", "per_channel", "batch", "momentum", "lasts",
                 "reads_output", "known", "trusted_at", "at_init")
    batchnorm = True

    def __init__(self, reads_output: bool = False):
        self.old = None             # running mean and variance before the call, stacked
        self.total = None           # (drift, jump, new variance's finiteness) summed over calls
        self.lasts = []             # the batch mean of each call of the last step (C values)
        self.calls = 0
        self.per_channel = 0        # fewest values per channel in one call of the step
        self.batch = 0
        self.momentum = None
        self.reads_output = reads_output
        self.known = None           # the last call's output norm from statistics (0-d), or None
        self.trusted_at = -1        # the step whose calls may trust the running statistics
        # (momentum 0: whether the running statistics are still BatchNorm's initial 0 and 1,
        # read once: they can never leave them; None: not read)
        self.at_init = None

    def before(self, module) -> None:
        m = module.momentum
        # (a momentum of 0 never updates: no drift to read; a lazy BatchNorm's statistics
        # are made by its own pre-hook, which runs after this one, at its first call)
        if m == 0 or module.running_mean is None or is_lazy(module.running_mean) \
                or module.running_mean.dtype.is_complex:
            self.old = None
            if m == 0 and self.at_init is None and module.running_mean is not None \
                    and not is_lazy(module.running_mean):
                # (one host read in the run, of a BatchNorm that does not update)
                self.at_init = bool(module.running_mean.eq(0).all()
                                    and module.running_var.eq(1).all())
            return
        self.old = torch.stack((module.running_mean, module.running_var))

    def after(self, module, args, step: int = -1) -> bool:
        """Account for one call of step `step`; True on the step's first."""
        old, self.old = self.old, None
        self.known = None
        if old is None and self.at_init and module.momentum == 0:
            # running statistics that never follow the batches: evaluation normalises with
            # 0 and 1 whatever the data (told once a step, with no number to read)
            self.momentum, first = 0, not self.calls
            self.calls += 1
            return first
        if old is None or not args or not isinstance(args[0], torch.Tensor):
            return False
        x = args[0]
        m = module.momentum
        # the batch mean's offset from the running mean: (running_new - running_old) / m
        off = torch.sub(module.running_mean, old[0])
        off = off.mul_(1.0 / m) if m is not None else off.mul_(module.num_batches_tracked)
        mean = off + old[0]
        lasts, at = self.lasts, self.calls
        last = lasts[at] if at < len(lasts) else None
        if at < len(lasts):
            lasts[at] = mean
        else:
            lasts.append(mean)
        # (no batch before it: as far from one as from the running mean, judged on that alone)
        gap = off if last is None or last.shape != mean.shape else mean - last
        # both distances per channel in running standard deviations, averaged over channels;
        # and the new running variance likewise, finite where the statistics stay finite
        rows = torch.stack((off, gap, module.running_var))
        three = rows.abs_().div_(old[1].add(module.eps).sqrt_()).mean(1)
        first = self.calls == 0
        self.total = three if first else self.total.add_(three)
        n = x.numel() // max(1, x.shape[1] if x.dim() > 1 else x.shape[0])
        self.per_channel = n if first else min(self.per_channel, n)
        self.batch = x.shape[0] if x.dim() > 1 else 1
        self.momentum = m
        self.calls += 1
        if self.reads_output and step == self.trusted_at and x.numel() >= KNOWN_MIN \
                and m is not None and m >= MIN_MOMENTUM and module.training \
                and type(module).forward is _STOCK_FORWARD and type(x) is torch.Tensor \
                and x.device.type == "cpu" and x.dtype == module.running_var.dtype \
                and x.dtype in _WIDE:       # (half-precision sums of squares overflow)
            self.known = output_norm(module, old[1], m, n)
        return first

    def take(self) -> tuple:
        """((drift, jump, finiteness): the 0-d tensors to read, what to say with them);
        empties it for the next step."""
        if self.total is None and self.momentum == 0:      # (after: stats never updated)
            self.calls = 0
            return None, _STALE
        out = self.total, {"calls": self.calls, "per_channel": self.per_channel,
                           "batch": self.batch, "momentum": self.momentum}
        self.total, self.calls = None, 0
        return out

    def judged(self, step: int, finite: bool) -> None:
        """Step `step`'s numbers were read: the next step's calls may trust the running
        statistics if they were all finite (not if a step goes unread or unobserved)."""
        self.trusted_at = step + 1 if finite else -1


# What a BatchNorm at momentum 0 whose running statistics are still 0 and 1 is told
_STALE = {"stale": True, "momentum": 0, "running_mean": 0.0, "running_var": 1.0}


def output_norm(module, var_old: torch.Tensor, m: float, n: int) -> torch.Tensor:
    """The norm of a training BatchNorm's output (float32, 0-d), from its running variance
    before the call and after it (m: its momentum; n: values a channel)."""
    # m x the unbiased variance (below zero only by rounding: a constant channel)
    var = torch.sub(module.running_var, var_old, alpha=1 - m).clamp_(min=0)
    # each channel's x_hat variance, var_b / (var_b + eps) with var_b = var (n - 1) / (n m)
    share = var.div_(var.add(module.eps * n * m / max(1, n - 1)))
    g, b = module.weight, module.bias
    s = share.sum() if g is None else torch.dot(g.detach().square(), share)
    if b is not None:
        b = b.detach()
        s = s.add_(torch.dot(b, b))
    s = s.mul_(n).sqrt_()
    return s if s.dtype == torch.float32 else s.float()


class GainReading:
    """A LayerNorm/GroupNorm/RMSNorm called in the step: its gain is normed at the step end."""

    __slots__ = ("called",)
    batchnorm = False
    known = None            # (its output is read)

    def __init__(self):
        self.called = False

    def before(self, module) -> None:
        pass

    def after(self, module, args, step: int = -1) -> bool:
        first, self.called = not self.called, True
        return first


def norm_tensors(recs: list) -> tuple:
    """(0-d tensors to read, [(layer record, facts, numel or None)]) for the layers `recs`
    whose norm readings were touched this step: a BatchNorm's drift, jump and finiteness as
    they are (three values, numel None), the gains' norms in one `_foreach_norm` (one value each)."""
    tensors, jobs, gains, gained = [], [], [], []
    for rec in recs:
        reading = rec.norm
        if reading.batchnorm:
            total, facts = reading.take()
            if total is not None:
                tensors += total.unbind()
                jobs.append((rec, facts, None))
            elif facts is _STALE:
                jobs.append((rec, facts, 0))    # (nothing to read)
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


def norm_width(jobs: list) -> int:
    """How many of the values read are the norm jobs' (three a BatchNorm, one a gain, none
    a BatchNorm whose statistics never update)."""
    return sum(3 if numel is None else 1 if numel else 0 for _, _, numel in jobs)


def norm_facts(jobs: list, values: list, step: int = -1) -> list:
    """[(layer record, the facts handed to the norm detector)] from the values read for step
    `step` (which also tell each BatchNorm whether its statistics stayed finite)."""
    out, at = [], 0
    for rec, facts, numel in jobs:
        if numel == 0:
            out.append((rec, facts))
        elif numel is not None:
            out.append((rec, {"gain_rms": values[at] / math.sqrt(numel)}))
            at += 1
        else:
            calls = max(1, facts["calls"])
            out.append((rec, {**facts, "drift": values[at] / calls,
                              "jump": values[at + 1] / calls}))
            rec.norm.judged(step, all(math.isfinite(v) for v in values[at:at + 3]))
            at += 3
    return out
