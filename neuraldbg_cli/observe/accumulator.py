"""One layer's numbers for one step, reduced on the device as each output arrives.

`Accumulator.add_output` runs in the forward hook, once per layer call. In eager mode a
small float32 output is only held (detached) for the step end; anything else is reduced at
once: one norm (magnitude and non-finite values, since NaN/Inf propagate through it) and,
where a detector asks for it, one per-unit reduction. Nothing here reads the device.
"""
from __future__ import annotations

import torch

from .kinds import OTHER, RELU, SQUASH_KINDS, UNIT_KINDS

_F32 = torch.float32
_Tensor = torch.Tensor
_LOW = (torch.float16, torch.bfloat16)
UNITS = "units"         # per-unit maxima (inactive units)
SQUASH = "squash"       # per-unit sums and sums of squares (saturated units)


def norm32(t: torch.Tensor, ord=2, dim=None) -> torch.Tensor:
    """vector_norm accumulated in (at least) float32, returned as float32: half-precision
    sums of squares overflow, and float64 cannot be reduced *into* float32."""
    if t.dtype in _LOW:
        return torch.linalg.vector_norm(t, ord, dim, dtype=_F32)
    n = torch.linalg.vector_norm(t, ord, dim)
    return n if n.dtype == _F32 else n.to(_F32)


def abs_max(t: torch.Tensor, dim) -> torch.Tensor:
    """The largest |value| along `dim`, as float32: what vector_norm(t, inf, dim) gives (NaN
    included), from two max reductions, which run ~10x faster on the CPU than its kernel."""
    m = torch.maximum(t.amax(dim), t.amin(dim).neg())
    return m if m.dtype == _F32 else m.to(_F32)


def channel_norms(t: torch.Tensor, dims) -> torch.Tensor | None:
    """The L2 norm of each (sample, channel) row of a contiguous channel-first map (N, C,
    ...), as float32, or None where `t` is not one (`dims`: its unit_dims). One pass along
    the map's contiguous rows, where a reduction over (0, 2, 3) strides across it: ~2x
    faster on the CPU than a norm and a per-channel max. A channel is all zero exactly
    where its column of these is (NaN stays NaN; squares below ~1e-45 round to zero, so
    values under ~1e-22 count as zero)."""
    if type(dims) is not tuple or dims[0] != 0 or len(dims) != t.dim() - 1 or dims[-1] != t.dim() - 1 \
            or not t.is_contiguous():
        return None
    return norm32(t.view(t.shape[0], t.shape[1], -1), 2, -1)


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


def default_mode(kind: str):
    """The per-unit reduction that judges `kind`: UNITS, SQUASH, or None."""
    return UNITS if kind in UNIT_KINDS else SQUASH if kind in SQUASH_KINDS else None


DEFER_MAX = 1 << 14     # elements: outputs this small are reduced at the step end, together


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

    __slots__ = ("kind", "mode", "channel_first", "defer_ok", "held", "norms", "numel", "units",
                 "usum", "usq", "per_unit", "inputs")

    def __init__(self, kind: str = OTHER, channel_first: bool | None = False, mode=default_mode):
        """mode: the per-unit reduction the detectors asked for (UNITS, SQUASH or None); by
        default the one the kind is judged by. channel_first None: not known yet (read as
        False), an activation's until its first call."""
        self.kind = kind
        self.mode = default_mode(kind) if mode is default_mode else mode
        self.channel_first = channel_first
        self.defer_ok = self.mode is not SQUASH     # sigmoid/tanh outputs are never held
        self.held = []         # (output, its version when seen): reduced at the step end
        self.norms = []        # 0-d norms of outputs reduced at once
        self.numel = 0
        self.units = None      # per-unit max (ReLU/smooth kinds; a ReLU conv map: per-channel norm)
        self.usum = None       # per-unit sum (sigmoid/tanh)
        self.usq = None        # per-unit sum of squares (sigmoid/tanh)
        self.per_unit = 0      # values per unit behind usum/usq (restarts with usum)
        self.inputs = None     # per-unit max |input|, or per-channel norm (Linear/conv)

    def reset(self):
        """For the next step; touches only what a step can have set (this runs for every
        layer at every step)."""
        self.held = []
        self.norms = []
        self.numel = 0
        if self.units is not None or self.usum is not None or self.inputs is not None:
            self.units = self.usum = self.usq = self.inputs = None

    def add_output(self, y: torch.Tensor, defer: bool = False, known=None) -> bool:
        """Account for one output; False (and nothing kept) when it is empty or not
        floating-point. defer: the caller runs eagerly, so `y` may be held until the step end.
        known: y's norm (0-d, float32), known without a pass over it (a large BatchNorm
        output's, from its statistics: norms.py), or None."""
        dtype = y.dtype
        if dtype is not _F32 and not dtype.is_floating_point:
            return False
        n = y.numel()
        if not n:
            return False
        self.numel += n
        if known is not None:
            self.norms.append(known)
            return True
        if defer and self.defer_ok and dtype is _F32 and n <= DEFER_MAX and type(y) is _Tensor:
            # (a subclass is reduced at once, by its own rules); detached: a held output must
            # not keep its autograd graph (and the activations saved in it) alive until the end
            self.held.append((y.detach(), y._version))
            return True
        mode = self.mode
        y = y.detach()      # reductions must not grow the autograd graph
        dims = unit_dims(y, self.channel_first) if mode is not None else None
        if dims is None:
            self.norms.append(norm32(y))
        elif mode is SQUASH:
            s = y.sum(dims, dtype=_F32)
            q = norm32(y, 2, dims).square()
            same = self.usum is not None and self.usum.shape == s.shape
            self.usum = self.usum + s if same else s
            self.usq = self.usq + q if same else q
            self.per_unit = (self.per_unit if same else 0) + n // s.numel()
            self.norms.append(q.sum().sqrt())
        else:
            # A ReLU's output is never negative: its unit is inactive exactly where all its
            # values are zero, which a conv map's per-channel norms tell in the same pass as
            # the norm (a smooth kind's tail needs the maximum itself).
            rows = channel_norms(y, dims) if self.kind == RELU else None
            if rows is None:
                self.units = combine_max(self.units, y.amax(dims))
                self.norms.append(norm32(y))
            else:
                self.units = combine_max(self.units, norm32(rows, 2, 0))
                self.norms.append(norm32(rows))
        return True

    def add_input(self, x: torch.Tensor) -> None:
        """A layer's input: per unit, a magnitude that is zero exactly where the unit is
        (max |x|, or a conv map's per-channel norm)."""
        dims = unit_dims(x, self.channel_first)
        if dims is not None:
            x = x.detach()
            rows = channel_norms(x, dims)
            m = abs_max(x, dims) if rows is None else norm32(rows, 2, 0)
            self.inputs = combine_max(self.inputs, m)


def combine_max(prev, new):
    if prev is None or prev.shape != new.shape:
        return new
    return torch.maximum(prev, new)
