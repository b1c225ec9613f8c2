"""Tensor -> a few numbers, on the device, without a host read.

`Accumulator.add_output` runs in the forward hook, once per layer call. In eager mode a
small float32 output is only held (detached) for the step end; anything else is reduced at
once: one norm (magnitude and non-finite values, since NaN/Inf propagate through it) and,
where the activation kind needs it, one per-unit reduction. `gather` runs once per step: it
reduces what was held, takes every norm still to take in one batched call and the
inactive-unit counts in another, and reads the result at once: one host read a step, not one
per layer.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .regimes import OTHER, PARAM, RELU, SIGMOID, SMOOTH, TANH

_KINDS = (
    ((nn.ReLU, nn.ReLU6), RELU),
    ((nn.GELU, nn.SiLU, nn.Mish), SMOOTH),
    ((nn.Sigmoid,), SIGMOID),
    ((nn.Tanh,), TANH),
    ((nn.Linear, nn.modules.conv._ConvNd), PARAM),
)
# Modules whose 3-D tensors are (batch, channels, length) rather than (batch, time, features).
CHANNEL_FIRST = (nn.modules.conv._ConvNd, nn.modules.batchnorm._BatchNorm,
                 nn.modules.instancenorm._InstanceNorm, nn.modules.pooling._MaxPoolNd,
                 nn.modules.pooling._AvgPoolNd)
# Modules whose output keeps the zeros of their input: what follows them must look for
# dead units itself.
TRANSPARENT = (nn.modules.dropout._DropoutNd, nn.Identity, nn.Flatten, nn.Unflatten,
               nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd,
               nn.modules.pooling._AdaptiveMaxPoolNd, nn.modules.pooling._AdaptiveAvgPoolNd)
_F32 = torch.float32
_Tensor = torch.Tensor
_LOW = (torch.float16, torch.bfloat16)


def norm32(t: torch.Tensor, ord=2, dim=None) -> torch.Tensor:
    """vector_norm accumulated in (at least) float32, returned as float32: half-precision
    sums of squares overflow, and float64 cannot be reduced *into* float32."""
    if t.dtype in _LOW:
        return torch.linalg.vector_norm(t, ord, dim, dtype=_F32)
    n = torch.linalg.vector_norm(t, ord, dim)
    return n if n.dtype == _F32 else n.to(_F32)


def kind_of(module: nn.Module) -> str:
    for types, kind in _KINDS:
        if isinstance(module, types):
            return kind
    return OTHER


def unit_dims(t: torch.Tensor, channel_first: bool) -> int | tuple | None:
    """The dimensions reduced to get one number per unit: features of (B, F) and (B, T, F),
    channels of conv maps (B, C, H, W)."""
    nd = t.dim()
    if nd < 2:
        return None
    if nd == 2:
        return 0            # an int: reductions over one dimension take the shorter path
    if nd >= 4 or channel_first:
        return (0, *range(2, nd))
    return tuple(range(nd - 1))


def first_tensor(value):
    """The first floating-point tensor in a module output (tensor, tuple, list, dict or a
    dataclass-like object with tensor attributes), or None."""
    if isinstance(value, torch.Tensor):
        return value if value.is_floating_point() and value.numel() > 0 else None
    if isinstance(value, dict):
        items = value.values()
    elif isinstance(value, (tuple, list)):
        items = value
    elif hasattr(value, "__dataclass_fields__"):
        items = (getattr(value, k, None) for k in value.__dataclass_fields__)
    else:
        return None
    for item in items:
        if isinstance(item, torch.Tensor) and item.is_floating_point() and item.numel() > 0:
            return item
    return None


DEFER_MAX = 1 << 14     # elements: outputs this small are reduced at the step end, together
_UNITS = (RELU, SMOOTH)     # kinds whose per-unit maxima tell inactive units
_SQUASH = (SIGMOID, TANH)   # kinds whose per-unit mean derivative tells saturated units
_PER_UNIT = _UNITS + _SQUASH


class Accumulator:
    """One layer's numbers for the current step; several calls (gradient accumulation,
    weight tying) combine: unit maxima by max, sums by addition.

    In eager mode, small float32 outputs are *held* (with their version counter) rather than
    reduced: the step end reduces them all together, one `_foreach_norm` for every layer,
    which for a model of small layers costs less than one op per layer call. Should a held
    output be changed in place before the step ends (an in-place ReLU after its layer), its
    version counter tells, and that layer is reduced at once from then on. Anything else
    (large, half precision, compiled, sigmoid/tanh) is reduced at once into 0-d norms and
    per-unit vectors, so no large tensor is kept."""

    __slots__ = ("kind", "channel_first", "defer_ok", "held", "norms", "numel", "units", "usum",
                 "usq", "per_unit", "inputs")

    def __init__(self, kind: str = OTHER, channel_first: bool = False):
        self.kind = kind
        self.channel_first = channel_first
        self.defer_ok = kind not in _SQUASH     # outputs may be held (sigmoid/tanh: never)
        self.held = []         # (output, its version when seen): reduced at the step end
        self.norms = []        # 0-d norms of outputs reduced at once
        self.numel = 0
        self.units = None      # per-unit max (ReLU/smooth kinds)
        self.usum = None       # per-unit sum (sigmoid/tanh)
        self.usq = None        # per-unit sum of squares (sigmoid/tanh)
        self.per_unit = 0      # values per unit behind usum/usq (restarts with usum)
        self.inputs = None     # per-unit max |input| (Linear/conv)

    def reset(self):
        """For the next step; touches only what a step can have set (this runs for every
        layer at every step)."""
        self.held = []
        self.norms = []
        self.numel = 0
        if self.units is not None or self.usum is not None or self.inputs is not None:
            self.units = self.usum = self.usq = self.inputs = None

    def add_output(self, y: torch.Tensor, defer: bool = False) -> bool:
        """Account for one output; False (and nothing kept) when it is empty or not
        floating-point. defer: the caller runs eagerly, so `y` may be held until the step end."""
        dtype = y.dtype
        if dtype is not _F32 and not dtype.is_floating_point:
            return False
        n = y.numel()
        if not n:
            return False
        self.numel += n
        if defer and self.defer_ok and dtype is _F32 and n <= DEFER_MAX and type(y) is _Tensor:
            # (a subclass is reduced at once, by its own rules); detached: a held output must
            # not keep its autograd graph (and the activations saved in it) alive until the end
            self.held.append((y.detach(), y._version))
            return True
        kind = self.kind
        y = y.detach()      # reductions must not grow the autograd graph
        dims = unit_dims(y, self.channel_first) if kind in _PER_UNIT else None
        if dims is None:
            self.norms.append(norm32(y))
        elif kind in _SQUASH:
            s = y.sum(dims, dtype=_F32)
            q = norm32(y, 2, dims).square()
            same = self.usum is not None and self.usum.shape == s.shape
            self.usum = self.usum + s if same else s
            self.usq = self.usq + q if same else q
            self.per_unit = (self.per_unit if same else 0) + n // s.numel()
            self.norms.append(q.sum().sqrt())
        else:
            self.units = _combine_max(self.units, y.amax(dims))
            self.norms.append(norm32(y))
        return True

    def add_input(self, x: torch.Tensor) -> None:
        dims = unit_dims(x, self.channel_first)
        if dims is not None:
            self.inputs = _combine_max(self.inputs, norm32(x.detach(), float("inf"), dims))


def _combine_max(prev, new):
    if prev is None or prev.shape != new.shape:
        return new
    return torch.maximum(prev, new)


def gather(layers: list, smooth_tail: float, min_grads: dict, grads: list = (),
           grad_norms: list = ()) -> tuple:
    """Reduce the accumulators `layers`, and take the norms of the tensors `grads`, all at
    once. Returns ([per layer: (norm, inactive, input_dead, saturated)], [norms of `grads`],
    [values of the 0-d `grad_norms`]): a layer's norm is that of all its calls together; the
    others are shares of its units, None where not measured.

    A step costs two `_foreach_norm` calls and one read, whatever the number of layers: the
    L2 norms of the held outputs and of `grads`, and the L0 "norms" (nonzero counts) of every
    per-unit vector whose zeros are its inactive units."""
    ready, pending, vecs, sat, where = [], [], [], [], []
    for acc in layers:
        kind, units, first = acc.kind, acc.units, len(pending)
        for y, version in acc.held:
            if y._version != version:
                acc.defer_ok = False        # changed in place since: reduced at once from now
            pending.append(y)
            if kind in _UNITS:
                dims = unit_dims(y, acc.channel_first)
                if dims is not None:
                    units = _combine_max(units, y.amax(dims))
        u = i = s = None                    # positions in `vecs` and `sat`
        if units is not None:
            acc.units = units
            # a unit is inactive when its maximum is <= 0 (ReLU) or <= the tail (smooth
            # kinds); counted in float32, as a half-precision count is not exact beyond 2048
            v = units if units.dtype == _F32 else units.float()
            if kind == SMOOTH:
                v = torch.relu(v - smooth_tail if smooth_tail else v)
            u = len(vecs)
            vecs.append(v)
        if acc.inputs is not None:
            i = len(vecs)
            vecs.append(acc.inputs)         # max |input| per unit: 0 if never active
        if acc.usum is not None:
            mean, meansq = acc.usum / acc.per_unit, acc.usq / acc.per_unit
            deriv = (mean - meansq) / 0.25 if kind == SIGMOID else 1.0 - meansq
            s = len(sat)
            sat.append(((deriv < min_grads[kind]).sum(), deriv.numel()))
        norms = acc.norms
        where.append((len(ready), len(norms), first, len(pending) - first, u, i, s))
        if norms:
            ready += norms
    n_ready, n_held = len(ready), len(pending)
    pending += grads
    tensors = ready + grad_norms if grad_norms else ready
    if pending:
        tensors += torch._foreach_norm(pending)
    if vecs:
        tensors += torch._foreach_norm(vecs, 0)
    if sat:
        tensors += [n for n, _ in sat]
    if not tensors:
        return [], [], []
    values = _read(tensors)
    done = n_ready + len(grad_norms)
    at = done + len(pending)
    # shares of units: the inactive ones are those not counted as nonzero
    shares = [(k - n) / k for k, n in zip([v.numel() for v in vecs], values[at:])] if vecs else ()
    at += len(vecs)
    sats = [n / k for (_, k), n in zip(sat, values[at:])]
    out = []
    for r, k, p, m, u, i, s in where:
        if k + m == 1:                          # one call, the common case
            norm = values[r] if k else values[done + p]
        else:                                   # of all calls together
            norm = math.hypot(*values[r:r + k], *values[done + p:done + p + m])
        out.append((norm, None if u is None else shares[u], None if i is None else shares[i],
                    None if s is None else sats[s]))
    return out, values[done + n_held:done + len(pending)], values[n_ready:done]


def _read(tensors: list) -> list:
    """0-d tensors -> floats. On the CPU each is read directly (no copy, nothing to wait
    for); on an accelerator they are stacked and copied in one transfer, one sync a step.
    (A model split between the CPU and a GPU, with a CPU tensor first, reads item by item:
    correct, only slower.)"""
    if tensors[0].is_cpu:
        return [t.item() for t in tensors]
    home = tensors[0].device
    return torch.stack([t if t.device == home else t.to(home) for t in tensors]).tolist()
