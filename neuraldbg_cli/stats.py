"""Tensor -> a few numbers, on the device, without a host read.

`observe` runs in the forward hook, once per layer call: one norm (magnitude and non-finite
values, since NaN/Inf propagate through it) and, where the activation kind needs it, one
per-unit reduction. `gather` runs once per step: it turns every layer's accumulators into one
flat tensor with a handful of batched ops, so a step costs one host read, not one per layer.
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
_CHANNEL_FIRST = (nn.modules.conv._ConvNd, nn.modules.batchnorm._BatchNorm,
                  nn.modules.instancenorm._InstanceNorm, nn.modules.pooling._MaxPoolNd,
                  nn.modules.pooling._AvgPoolNd)
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


def unit_dims(t: torch.Tensor, channel_first: bool) -> tuple | None:
    """The dimensions reduced to get one number per unit: features of (B, F) and (B, T, F),
    channels of conv maps (B, C, H, W)."""
    nd = t.dim()
    if nd < 2:
        return None
    if nd == 2:
        return (0,)
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


class Accumulator:
    """One layer's numbers for the current step; several calls (gradient accumulation,
    weight tying) combine: unit maxima by max, sums by addition."""

    __slots__ = ("norms", "numel", "units", "usum", "usq", "per_unit", "inputs")

    def __init__(self):
        self.reset()

    def reset(self):
        self.norms = []
        self.numel = 0
        self.units = None      # per-unit max (ReLU/smooth kinds)
        self.usum = None       # per-unit sum (sigmoid/tanh)
        self.usq = None        # per-unit sum of squares (sigmoid/tanh)
        self.per_unit = 0      # values per unit behind usum/usq
        self.inputs = None     # per-unit max |input| (Linear/conv)

    def add_output(self, y: torch.Tensor, kind: str, channel_first: bool) -> None:
        y = y.detach()
        dims = unit_dims(y, channel_first) if kind != OTHER and kind != PARAM else None
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
            self.norms.append(norm32(y))
        self.numel += y.numel()

    def add_input(self, x: torch.Tensor, channel_first: bool) -> None:
        dims = unit_dims(x, channel_first)
        if dims is not None:
            self.inputs = _combine_max(self.inputs, norm32(x.detach(), float("inf"), dims))

    def add_norm_only(self, x: torch.Tensor) -> None:
        self.norms.append(norm32(x.detach()))
        self.numel += x.numel()


def _combine_max(prev, new):
    if prev is None or prev.shape != new.shape:
        return new
    return torch.maximum(prev, new)


def gather(layers: list, kinds: list, smooth_tail: float, min_grads: dict, extra: dict):
    """Reduce the accumulators of `layers` (with their kinds) plus `extra` named tensors to
    one flat float32 tensor, read once. Returns a dict with, per layer index i:
    ("norm", i) -> list of per-call norms, ("units", i) -> count of inactive units,
    ("inputs", i) -> count of all-zero input units, ("sat", i) -> count of saturated units,
    and each extra name -> list of values."""
    parts, slices, offset = [], {}, 0

    def put(key, tensor):
        nonlocal offset
        if tensor.dim() != 1:
            tensor = tensor.reshape(-1)
        if tensor.dtype != _F32:
            tensor = tensor.float()
        if parts and tensor.device != parts[0].device:
            tensor = tensor.to(parts[0].device)
        parts.append(tensor)
        slices[key] = slice(offset, offset + tensor.numel())
        offset += tensor.numel()

    norms = [(i, n) for i, acc in enumerate(layers) for n in acc.norms]
    if norms:
        put("norms", torch.stack([n for _, n in norms]))
    # Inactive units (ReLU/smooth outputs, zero inputs): all layers in one comparison and
    # one segmented sum over the concatenated per-unit vectors.
    vecs = []
    for i, acc in enumerate(layers):
        if acc.units is not None:
            vecs.append((("units", i), acc.units, smooth_tail if kinds[i] == SMOOTH else 0.0))
        if acc.inputs is not None:
            vecs.append((("inputs", i), acc.inputs, 0.0))
    if vecs:
        flat = torch.cat([v if v.dtype == _F32 else v.float() for _, v, _ in vecs])
        tails = {t for _, _, t in vecs}
        if len(tails) == 1:
            inactive = flat <= tails.pop()
        else:
            limit = torch.cat([torch.full((v.numel(),), t, dtype=_F32, device=flat.device)
                               for _, v, t in vecs])
            inactive = flat <= limit
        lengths = _lengths(tuple(v.numel() for _, v, _ in vecs), flat.device)
        put("counts", torch.segment_reduce(inactive.to(_F32), "sum", lengths=lengths))
        slices["counts_index"] = [key for key, _, _ in vecs]
    sat = []
    for i, acc in enumerate(layers):
        if acc.usum is not None:
            mean, meansq = acc.usum / acc.per_unit, acc.usq / acc.per_unit
            deriv = (mean - meansq) / 0.25 if kinds[i] == SIGMOID else 1.0 - meansq
            sat.append((i, (deriv < min_grads[kinds[i]]).sum()))
    if sat:
        put("sat", torch.stack([c for _, c in sat]))
        slices["sat_index"] = [i for i, _ in sat]
    for name, tensor in extra.items():
        put(name, tensor)
    if not parts:
        return {}
    values = torch.cat(parts).tolist()      # the step's one host read
    return _unpack(values, slices, norms)


_LENGTHS: dict = {}


def _lengths(sizes: tuple, device) -> torch.Tensor:
    """The segment lengths of a step, cached: the same layers give the same tensor each step."""
    key = (sizes, device)
    t = _LENGTHS.get(key)
    if t is None:
        if len(_LENGTHS) > 64:
            _LENGTHS.clear()
        t = _LENGTHS[key] = torch.tensor(sizes, device=device)
    return t


def _unpack(values, slices, norms) -> dict:
    out: dict = {}
    if "norms" in slices:
        for (i, _), v in zip(norms, values[slices["norms"]]):
            out.setdefault(("norm", i), []).append(v)
    if "counts" in slices:
        out.update(zip(slices["counts_index"], values[slices["counts"]]))
    if "sat" in slices:
        out.update((("sat", i), v) for i, v in zip(slices["sat_index"], values[slices["sat"]]))
    for key, sl in slices.items():
        if isinstance(key, str) and key.startswith("extra:"):
            out[key] = values[sl]
    return out
