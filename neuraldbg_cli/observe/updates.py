"""How much each optimizer step changed each layer's weights: ||dW|| / ||W||, estimated.

Copying every weight before each step would double the optimizer's memory traffic. Instead
each parameter is watched through one fixed strided view of its elements (about `sample` of
them, every s-th element with s coprime to the row length, so that every row and every column
is represented). Before the step the views are copied into buffers kept with them (one
batched call for all parameters); after it, the copies minus the views are minus the sampled
update, normed with the views. A layer's ratio adds its parameters' sums of squares, each
scaled by numel / sampled, so a small bias does not weigh like a large weight. All of it
stays on the device and is read with the step's other numbers.

Where the views share a dtype and a device (the usual case), the buffers are the rows of
one zero-padded (2, parameters, longest view) tensor, before and after: the subtraction and
all the norms are then one call each, not one per parameter (on the CPU each call on a small
tensor costs about as much as its set-up, whatever its size). The two rows take turns: the
weights copied after one step are the copy before the next, so a run of observed steps
copies once a step, not twice. (What changes the weights between two steps, a clamp after
the step say, is then part of the next update: the update is measured from the weights as
the last step left them.)

A sharded parameter (FSDP2's DTensor) is watched through its shard on this rank: its update
ratio is that of the shard, with no collective; a rank whose shard is empty samples nothing.
"""
from __future__ import annotations

import math
import weakref
from typing import NamedTuple

import torch

from .optimizers import local_shard

# Only the rows of the batch's tokens change at a step: a sample may miss all of them, so an
# unchanged sample of these says nothing.
_SPARSE_ROWS = ("Embedding", "EmbeddingBag")
_data_ptr = torch.Tensor.data_ptr
# A NamedTuple's own __new__ is a Python function; tuple.__new__ builds the same record in C.
_new = tuple.__new__


class UpdateBatch(NamedTuple):
    """One optimizer's sampled update at one step, for the step end's one read."""
    tensors: list       # 0-d norms of the sampled updates, then of the sampled weights after it
    #                     (with `vector`, the same norms in one 1-D tensor)
    groups: list        # [(layer record, [(position among the updates, scale)])]
    normed: bool = True  # (as GradBatch: its tensors are norms already)
    vector: bool = False  # (on the CPU: read with one tolist() at the step end)
    swapped: bool = False  # the weights' norms come first, then the updates' (the rows take turns)
    # The weight decay added to the gradient before the step (SGD, Adam, RMSprop with
    # weight_decay; 0.0: none): the step may then move the weights whatever the loss's
    # gradient is.
    decayed: float = 0.0
    # Every learning rate of the optimizer 0 at this step: its weights are meant to stay.
    rate_zero: bool = False


class _Watched(NamedTuple):
    key: tuple          # the optimizer's parameter lists and the parameters' storages
    views: list         # one strided view per sampled parameter
    groups: list        # as UpdateBatch.groups
    buffers: tuple      # one buffer per view in row 0 (the copy before a step), and in row 1
    sharded: bool       # some parameters are DTensors: their storages are their shards'
    rows: torch.Tensor | None   # (2 x views, longest): the halves below, one view per row
    halves: tuple       # (row 0, row 1) of the copies, made once
    latest: list        # [the row that holds the weights as the last step left them, or None]
    decayed: float = 0.0    # coupled_decay(), as the layout was made


def sampled_view(p: torch.Tensor, sample: int) -> tuple | None:
    """(a 1-D strided view of about `sample` elements of `p`, numel / elements in it), or None
    where `p` cannot be viewed flat (sparse, or not contiguous). The stride is coprime with
    an output unit's row of weights (a Linear's inputs, a conv's inputs x kernel positions),
    so that the sample meets every input: a 1x1 conv's (128, 32) weight read every 16th
    element would only see inputs 8 and 24, and these dead, read as not moving at all."""
    if p.is_sparse or not p.is_contiguous() or p.numel() == 0:
        return None
    flat = p.detach().view(-1)
    n = flat.numel()
    stride = max(1, n // sample)
    row = n // p.shape[0] if p.dim() > 1 else 1
    while stride > 1 and math.gcd(stride, row) != 1:
        stride += 1
    view = flat[stride // 2::stride]
    return view, n / view.numel()


class UpdateSampler:
    """Per optimizer: the views of its parameters and the copy taken before its step."""

    def __init__(self, sample: int):
        self.sample = sample
        self._watched: dict = {}        # id(optimizer) -> (weakref, _Watched)
        self._before: dict = {}         # id(optimizer) -> the row of its copy before this step

    def before(self, opt, owners: dict) -> None:
        """Copy the sampled elements of `opt`'s parameters (its step is about to run), unless
        its last step, just before this one, left them in a row already."""
        watched = self._watch(opt, owners)
        if not watched.views:
            return
        latest = watched.latest[0]
        if latest is not None:
            self._before[id(opt)] = latest
            return
        # (into buffers kept with the views: no allocation)
        torch._foreach_copy_(watched.buffers[0], watched.views)
        self._before[id(opt)] = 0

    def after(self, opt, rate_zero: bool = False) -> UpdateBatch | None:
        """The sampled update of the step `opt` just took (None: no copy was taken);
        `rate_zero`: every learning rate of `opt` is 0 (UpdateBatch.rate_zero)."""
        row = self._before.pop(id(opt), None)
        entry = self._watched.get(id(opt))
        if row is None or entry is None or entry[0]() is not opt:
            return None
        watched = entry[1]
        views, rows = watched.views, watched.rows
        # In place, the copies become minus the update: its norm is the update's. Normed now,
        # the buffers are free for the next step (of this optimizer perhaps, in this step).
        if rows is None:
            copies = watched.buffers[0]
            torch._foreach_sub_(copies, views)
            return _new(UpdateBatch, (torch._foreach_norm([*copies, *views]), watched.groups,
                                      True, False, False, watched.decayed, rate_zero))
        other = 1 - row             # the weights after the step go in the other row, and stay
        torch._foreach_copy_(watched.buffers[other], views)
        before, after = watched.halves[row], watched.halves[other]
        before.sub_(after)              # (the padding is zero in both rows: its norm is 0)
        watched.latest[0] = other
        # the norms of both rows: the updates' in row `row`, the weights' in the other
        norms = torch.linalg.vector_norm(rows, dim=-1)
        swapped = row == 1
        decayed = watched.decayed
        if norms.is_cpu:    # (one tolist() costs less than a 0-d view and an item() per norm)
            return _new(UpdateBatch, (norms, watched.groups, True, True, swapped, decayed,
                                      rate_zero))
        return _new(UpdateBatch, (list(norms.unbind()), watched.groups, True, False, swapped,
                                  decayed, rate_zero))

    def skip(self, opt) -> None:
        """`opt` steps unobserved: the weights its last step left are no longer the ones
        before its next."""
        entry = self._watched.get(id(opt))
        if entry is not None:
            entry[1].latest[0] = None

    def forget(self) -> None:
        """Drop copies of a step that was not completed (a fault, the end of the run)."""
        self._before.clear()
        for _, watched in self._watched.values():
            watched.latest[0] = None

    def _watch(self, opt, owners: dict) -> _Watched:
        params = [p for g in opt.param_groups for p in g["params"]]
        entry = self._watched.get(id(opt))
        # (a shard is looked up at each step only where the last layout found DTensors)
        key = _key(owners, params, entry is not None and entry[1].sharded)
        if entry is None or entry[0]() is not opt or entry[1].key != key:
            self._watched = {k: e for k, e in self._watched.items() if e[0]() is not None}
            layout = self._layout(params, owners)._replace(decayed=coupled_decay(opt))
            entry = self._watched[id(opt)] = (weakref.ref(opt), layout)
        return entry[1]

    def _layout(self, params: list, owners: dict) -> _Watched:
        sharded = any(hasattr(p, "_local_tensor") for p in params)
        views, positions = [], {}
        for p in params:
            rec = owners.get(id(p))
            if rec is None or not p.requires_grad:
                continue
            # Held by an optimizer, sampled or not (a shard empty on this rank, a sparse or
            # strided weight): not a layer that gets gradients outside every optimizer.
            rec.in_optimizer = True
            if not rec.on_update:       # (no detector watches its updates: nothing to copy)
                continue
            found = sampled_view(local_shard(p) if sharded else p, self.sample)
            if found is None:
                continue
            positions.setdefault(rec, []).append((len(views), found[1]))
            views.append(found[0])
        rows, afters, halves = None, [], ()
        if views and len({(v.dtype, v.device) for v in views}) == 1:
            v = views[0]
            rows = torch.zeros((2, len(views), max(map(len, views))), dtype=v.dtype,
                               device=v.device)
            copies = [r[:len(w)] for r, w in zip(rows[0], views)]
            afters = [r[:len(w)] for r, w in zip(rows[1], views)]
            halves = (rows[0], rows[1])
            rows = rows.view(-1, rows.shape[-1])    # (so the norms come out as one vector)
        else:
            copies = [torch.empty(v.shape, dtype=v.dtype, device=v.device) for v in views]
        return _Watched(_key(owners, params, sharded), views, list(positions.items()),
                        (copies, afters), sharded, rows, halves, [None])


def _key(owners: dict, params: list, sharded: bool) -> tuple:
    """The parameters and their storages: a change lays them out again. A DTensor's own
    data_ptr is 0; its shard's is where the views point (FSDP2 may put a new one in)."""
    storages = map(local_shard, params) if sharded else params
    return (len(owners), *map(id, params), *map(_data_ptr, storages))


def coupled_decay(opt) -> float:
    """The largest weight decay `opt` adds to the gradients it steps by (0.0: none): a
    group's weight_decay, unless the optimizer decays the weights apart from the gradient
    (AdamW, or Adam's `decoupled_weight_decay`). An optimizer this cannot tell counts as
    coupled. Read when the optimizer's parameters are laid out (a decay scheduled from 0
    later is seen once they are laid out again)."""
    decoupled = isinstance(opt, torch.optim.AdamW)
    largest = 0.0
    for group in opt.param_groups:
        wd = group.get("weight_decay")
        if wd and not (decoupled or group.get("decoupled_weight_decay")):
            largest = max(largest, float(wd))
    return largest


def ratios(batch: UpdateBatch, norms: list, weights: dict | None = None) -> dict:
    """{layer record: ||dW|| / ||W|| (None where its weights are all zero)} from the norms of
    `batch.tensors`, in order; and into `weights`, where given, each layer's ||W||."""
    half = len(norms) // 2
    at_du, at_w = (half, 0) if batch.swapped else (0, half)
    out = {}
    for rec, parts in batch.groups:
        # (one loop, no comprehension: this runs for every layer at every step; sum() of the
        # terms, as Python sums them, in their order)
        du, w = [], []
        for i, s in parts:
            du.append(norms[at_du + i] ** 2 * s)
            w.append(norms[at_w + i] ** 2 * s)
        du, w = sum(du), sum(w)
        if weights is not None:
            weights[rec] = math.sqrt(w)
        if w <= 0 or du == 0 and rec.module_type in _SPARSE_ROWS:
            out[rec] = None
        else:
            out[rec] = math.sqrt(du / w)
    return out
