"""The step end's numbers: every layer's reductions batched into one host read.

`collect` runs once per step: it reduces what the accumulators held, takes every norm still
to take in one batched call and the inactive-unit counts in another, and lists the 0-d
results; `unpack` turns the values read back into one record per layer. A step costs two
`_foreach_norm` calls and one read, whatever the number of layers.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .accumulator import UNITS, combine_max, unit_dims
from .kinds import SIGMOID, SMOOTH

_F32 = torch.float32
_item = torch.Tensor.item
# A NamedTuple's own __new__ is a Python function; tuple.__new__ builds the same record in C
# (this runs for every layer at every step).
_new = tuple.__new__


class LayerNumbers(NamedTuple):
    """One layer's numbers for one step; None where not measured."""
    norm: float                 # L2 norm of all its outputs of the step together
    numel: int                  # values behind that norm
    inactive: float | None      # share of units inactive for the whole step
    input_dead: float | None    # share of input units zero for the whole step
    saturated: float | None     # share of sigmoid/tanh units saturated
    units: int | None           # units behind `inactive` or `saturated`


class _Slots(NamedTuple):
    """Where one layer's numbers lie among the values read."""
    ready: int                  # its first norm taken at once, and how many
    n_ready: int
    held: int                   # its first held output, and how many
    n_held: int
    units: int | None           # its unit-count vector, input vector, saturation count
    inputs: int | None
    sat: int | None
    count: int | None
    numel: int


class Plan(NamedTuple):
    """How to read one step's values back (sizes only: no tensor, no accumulator)."""
    slots: list
    vec_sizes: list             # units per unit-count vector
    sat_sizes: list             # units per saturation count
    n_ready: int                # norms of layers taken at once
    n_done: int                 # ... and the gradient norms given already taken
    n_held: int                 # held outputs normed now
    n_pending: int              # ... and the gradients normed now


def collect(layers: list, smooth_tail: float, min_grads: dict, grads: list = (),
            grad_norms: list = (), reset: bool = False) -> tuple:
    """(0-d tensors to read, Plan) for the accumulators `layers`, the tensors `grads` to
    norm, and the 0-d `grad_norms`. Leaves the accumulators as they are (but for combining
    their unit maxima), or, with `reset`, empties them for the next step as it goes."""
    ready, pending, vecs, vec_sizes, sat, sat_sizes, slots = [], [], [], [], [], [], []
    for acc in layers:
        units, first = acc.units, len(pending)
        for y, version in acc.held:
            if y._version != version:
                acc.defer_ok = False        # changed in place since: reduced at once from now
            pending.append(y)
            if acc.mode is UNITS:
                units = _unit_max(units, y, acc.channel_first)
        u = i = s = count = None            # positions in `vecs` and `sat`
        if units is not None:
            v = _activity(units, acc.kind, smooth_tail)
            u, count = len(vecs), v.numel()
            vecs.append(v)
            vec_sizes.append(count)
        inputs = acc.inputs
        if inputs is not None:
            i = len(vecs)
            vecs.append(inputs)             # |input| per unit (max, or norm): 0 if never active
            vec_sizes.append(inputs.numel())
        if acc.usum is not None:
            deriv = _mean_derivative(acc)
            s = len(sat)
            sat.append((deriv < min_grads[acc.kind]).sum())
            sat_sizes.append(deriv.numel())
            if count is None:
                count = acc.usum.numel()
        norms = acc.norms
        slots.append(_new(_Slots, (len(ready), len(norms), first, len(pending) - first, u, i, s,
                                   count, acc.numel)))
        if norms:
            ready += norms
        if reset:       # Accumulator.reset, inlined: this runs for every layer at every step
            acc.held, acc.norms, acc.numel = [], [], 0
            if units is not None or acc.usum is not None or inputs is not None:
                acc.units = acc.usum = acc.usq = acc.inputs = None
        elif units is not None:
            acc.units = units
    n_ready, n_held = len(ready), len(pending)
    pending += grads
    tensors = ready + grad_norms if grad_norms else ready
    if pending:
        tensors += torch._foreach_norm(pending)
    if vecs:
        tensors += torch._foreach_norm(vecs, 0)
    if sat:
        tensors += sat
    plan = _new(Plan, (slots, vec_sizes, sat_sizes, n_ready, n_ready + len(grad_norms), n_held,
                       len(pending)))
    return tensors, plan


def _unit_max(units, y: torch.Tensor, channel_first: bool):
    """The per-unit maxima `units` (or None) combined with those of a held output `y`."""
    dims = unit_dims(y, channel_first)
    return units if dims is None else combine_max(units, y.amax(dims))


def _activity(units: torch.Tensor, kind: str, smooth_tail: float) -> torch.Tensor:
    """The vector whose zeros are the inactive units: those whose maximum is <= 0 (ReLU) or
    <= the tail (smooth kinds); counted in float32, as a half-precision count is not exact
    beyond 2048."""
    v = units if units.dtype == _F32 else units.float()
    if kind == SMOOTH:
        v = torch.relu(v - smooth_tail if smooth_tail else v)
    return v


def _mean_derivative(acc) -> torch.Tensor:
    """Per unit of a sigmoid/tanh layer, its mean derivative over the step relative to the
    largest (0.25 for sigmoid, 1 for tanh), from the per-unit sums and sums of squares."""
    mean, meansq = acc.usum / acc.per_unit, acc.usq / acc.per_unit
    return (mean - meansq) / 0.25 if acc.kind == SIGMOID else 1.0 - meansq


def unpack(values: list, plan: Plan) -> tuple:
    """([LayerNumbers per layer], [norms of `grads`], [values of `grad_norms`]) from the
    values read for `plan`: a layer's norm is that of all its calls together."""
    done = plan.n_done
    shares, sats = unit_shares(values, plan)
    out = [_new(LayerNumbers, (layer_norm(values, slot, done), slot.numel,
                               None if slot.units is None else shares[slot.units],
                               None if slot.inputs is None else shares[slot.inputs],
                               None if slot.sat is None else sats[slot.sat], slot.count))
           for slot in plan.slots]
    return (out, *grad_values(values, plan))


def unit_shares(values: list, plan: Plan) -> tuple:
    """(the share of units inactive, per unit-count vector; the share saturated, per
    saturation count) from the values read for `plan`."""
    at = plan.n_done + plan.n_pending
    vec_sizes, sat_sizes = plan.vec_sizes, plan.sat_sizes
    # the inactive units are those not counted as nonzero
    shares = [(k - n) / k for k, n in zip(vec_sizes, values[at:])] if vec_sizes else ()
    sats = [n / k for k, n in zip(sat_sizes, values[at + len(vec_sizes):])] if sat_sizes else ()
    return shares, sats


def layer_norm(values: list, slot: _Slots, done: int) -> float:
    """A layer's norm, that of all its calls together, from the values read (`done`: the
    plan's n_done)."""
    r, k, p, m = slot[:4]
    if k + m == 1:                              # one call, the common case
        return values[r] if k else values[done + p]
    return math.hypot(*values[r:r + k], *values[done + p:done + p + m])


def grad_values(values: list, plan: Plan) -> tuple:
    """([norms of `grads`], [values of `grad_norms`]) from the values read for `plan`."""
    done = plan.n_done
    return values[done + plan.n_held:done + plan.n_pending], values[plan.n_ready:done]


def gather(layers: list, smooth_tail: float, min_grads: dict, grads: list = (),
           grad_norms: list = ()) -> tuple:
    """collect, read at once, unpack: ([LayerNumbers], [norms of `grads`], [values of
    `grad_norms`])."""
    tensors, plan = collect(layers, smooth_tail, min_grads, grads, grad_norms)
    if not tensors:
        return [], [], []
    return unpack(read_now(tensors), plan)


def read_now(tensors: list) -> list:
    """0-d tensors -> floats, waiting for them. On the CPU each is read directly (no copy,
    nothing to wait for); elsewhere they are stacked and copied in one transfer, one sync a
    step. (A model split between the CPU and a GPU, with a CPU tensor first, reads item by
    item: correct, only slower.)"""
    if tensors[0].is_cpu:
        return list(map(_item, tensors))        # (no Python frame per value)
    home = tensors[0].device
    return torch.stack([t if t.device == home else t.to(home) for t in tensors]).tolist()
