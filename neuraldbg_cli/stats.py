"""Tensor -> a few numbers, on the device, without a host read.

`Accumulator.add_output` runs in the forward hook, once per layer call: one norm (magnitude
and non-finite values, since NaN/Inf propagate through it; small outputs are normed later,
all together) and, where the activation kind needs it, one per-unit reduction. `gather`
runs once per step: it reduces every layer's accumulators with two batched calls and reads
the result at once, so a step costs one host read, not one per layer.
"""
from __future__ import annotations

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


DEFER_MAX = 1 << 14     # elements: outputs this small are normed at the step end, in one call


class Accumulator:
    """One layer's numbers for the current step; several calls (gradient accumulation,
    weight tying) combine: unit maxima by max, sums by addition.

    `norms` holds 0-d norms, or, for small float32 outputs seen in eager mode, the (detached)
    outputs themselves: the step end norms them all in one `_foreach_norm`, which for a model
    of small layers costs less than one op per layer call. Should such an output be changed
    in place before the step ends (an in-place ReLU after it), its version counter tells, and
    that layer is normed at once from then on."""

    __slots__ = ("norms", "numel", "units", "usum", "usq", "per_unit", "inputs", "watch", "defer_ok")

    def __init__(self):
        self.defer_ok = True
        self.reset()

    def reset(self):
        self.norms = []
        self.watch = []        # (deferred output, its version when seen)
        self.numel = 0
        self.units = None      # per-unit max (ReLU/smooth kinds)
        self.usum = None       # per-unit sum (sigmoid/tanh)
        self.usq = None        # per-unit sum of squares (sigmoid/tanh)
        self.per_unit = 0      # values per unit behind usum/usq
        self.inputs = None     # per-unit max |input| (Linear/conv)

    def _norm(self, y: torch.Tensor, defer: bool):
        if defer and self.defer_ok and y.dtype == _F32 and y.numel() <= DEFER_MAX:
            self.watch.append((y, y._version))
            return y
        return norm32(y)

    def add_output(self, y: torch.Tensor, kind: str, channel_first: bool, defer: bool = False) -> None:
        y = y.detach()      # reductions must not grow the autograd graph
        if kind == OTHER or kind == PARAM:
            self.norms.append(self._norm(y, defer))
            self.numel += y.numel()
            return
        dims = unit_dims(y, channel_first)
        if dims is not None and kind in (SIGMOID, TANH):
            s = y.sum(dims, dtype=_F32)
            q = norm32(y, 2, dims).square()
            same = self.usum is not None and self.usum.shape == s.shape
            self.usum = self.usum + s if same else s
            self.usq = self.usq + q if same else q
            self.per_unit = (self.per_unit if same else 0) + y.numel() // s.numel()
            self.norms.append(q.sum().sqrt())
        else:
            if dims is not None:
                self.units = _combine_max(self.units, y.amax(dims))
            self.norms.append(self._norm(y, defer))
        self.numel += y.numel()

    def add_input(self, x: torch.Tensor, channel_first: bool) -> None:
        dims = unit_dims(x, channel_first)
        if dims is not None:
            self.inputs = _combine_max(self.inputs, norm32(x.detach(), float("inf"), dims))

    def add_norm_only(self, x: torch.Tensor, defer: bool = False) -> None:
        self.norms.append(self._norm(x.detach(), defer))
        self.numel += x.numel()


def _combine_max(prev, new):
    if prev is None or prev.shape != new.shape:
        return new
    return torch.maximum(prev, new)


def gather(layers: list, kinds: list, smooth_tail: float, min_grads: dict, extra: list) -> tuple:
    """Reduce the accumulators of `layers` (with their kinds) plus `extra` (0-d norms, or
    float32 tensors to take the norm of) to plain numbers, read at once. Returns (per-layer
    numbers, extra values): per layer a tuple (list of per-call norms, inactive units,
    all-zero input units, saturated units), the counts None where not measured; the norms of
    `extra` as one list, in order.

    A step costs two `_foreach_norm` calls and one read, whatever the number of layers: the
    L2 norms still to take, and the L0 "norms" (nonzero counts) of every per-unit vector whose
    zeros are its inactive units."""
    scalars, vecs, sat, where = [], [], [], []
    for acc, kind in zip(layers, kinds):
        for t, version in acc.watch:
            if t._version != version:
                acc.defer_ok = False
        units = inputs = saturated = None           # positions in `vecs` and `sat`
        if acc.units is not None:
            # a unit is inactive when its maximum is <= 0 (ReLU) or <= the tail (smooth
            # kinds); counted in float32, as a half-precision count is not exact beyond 2048
            v = acc.units if acc.units.dtype == _F32 else acc.units.float()
            if kind == SMOOTH:
                v = torch.relu(v - smooth_tail if smooth_tail else v)
            units = len(vecs)
            vecs.append(v)
        if acc.inputs is not None:
            inputs = len(vecs)
            vecs.append(acc.inputs)                 # max |input| per unit: 0 if never active
        if acc.usum is not None:
            mean, meansq = acc.usum / acc.per_unit, acc.usq / acc.per_unit
            deriv = (mean - meansq) / 0.25 if kind == SIGMOID else 1.0 - meansq
            saturated = len(sat)
            sat.append((deriv < min_grads[kind]).sum())
        where.append((len(scalars), len(acc.norms), units, inputs, saturated))
        scalars += acc.norms
    n_norms = len(scalars)
    scalars += extra
    todo = [i for i, t in enumerate(scalars) if t.dim()]
    if todo:
        for i, n in zip(todo, torch._foreach_norm([scalars[i] for i in todo])):
            scalars[i] = n
    tensors = scalars + (list(torch._foreach_norm(vecs, 0)) if vecs else []) + sat
    if not tensors:
        return [], []
    values = _read(tensors)
    counts = [v.numel() - n for v, n in zip(vecs, values[len(scalars):])]   # nonzero -> inactive
    sats = values[len(scalars) + len(vecs):]
    out = [(values[start:start + k], None if u is None else counts[u],
            None if i is None else counts[i], None if s is None else sats[s])
           for start, k, u, i, s in where]
    return out, values[n_norms:len(scalars)]


def _read(tensors: list) -> list:
    """0-d tensors -> floats. On the CPU each is read directly (no copy, nothing to wait
    for); on an accelerator they are stacked and copied in one transfer, one sync a step.
    (A model split between the CPU and a GPU, with a CPU tensor first, reads item by item:
    correct, only slower.)"""
    if tensors[0].is_cpu:
        return [t.item() for t in tensors]
    home = tensors[0].device
    return torch.stack([t if t.device == home else t.to(home) for t in tensors]).tolist()
