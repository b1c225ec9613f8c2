"""The optimizer side of a run: which optimizer paces the steps, its learning rates, and
each layer's gradient norm at the step (read with the rest of the step's numbers)."""
from __future__ import annotations

import operator
import weakref
from typing import NamedTuple

import torch

from .pairing import low_dtype

_F32 = torch.float32
# A NamedTuple's own __new__ is a Python function; tuple.__new__ builds the same record in C.
_new = tuple.__new__
_params = operator.itemgetter("params")
_LR_CHANGE = 0.10         # relative learning-rate change that is written as an hparams event


PHASE = 8   # steps of another optimizer within one of the pacer's: a new phase, once the
#             two are known to interleave


class GradBatch(NamedTuple):
    """One optimizer's gradients at one step, for the step end's one read."""
    tensors: list       # 0-d norms (normed) or the gradients themselves, to norm then
    groups: list        # [(layer record, positions of its tensors: a slice, or a tuple)]
    normed: bool
    # The parameters are sharded (FSDP2's DTensors): each norm is of this rank's shard, its
    # part of the layer's; the layer's is the square root of the ranks' sums of squares.
    sharded: bool = False


def local_shard(t):
    """A DTensor's shard on this rank (a plain tensor, read without a collective), anything
    else (None too) as it is. Known by the attribute that holds the shard: no import of
    torch.distributed, and a DTensor's own norm or view would need every rank's part."""
    return getattr(t, "_local_tensor", t)


def _low_dtype(group: dict) -> str | None:
    """"float16" or "bfloat16" where a parameter group's first parameter is held in it (a
    model made .half(), its optimizer's state and eps with it), else None."""
    p = next(iter(group.get("params") or ()), None)
    return low_dtype(p) if isinstance(p, torch.Tensor) else None


class OptimizerWatch:
    """State kept per optimizer; bounded by the number of optimizers, not of steps."""

    def __init__(self, emit):
        self.emit = emit
        self.primary = None               # weakref to the optimizer whose step ends a step
        # steps end when the framework's step counter moves, not at an optimizer's step
        # (Monitor.framework_step: Lightning's manual optimisation counts each optimizer's)
        self.framework_paced = False
        self._stepped: dict = {}          # id(optimizer) -> steps in the current window
        self._names: dict = {}            # id(optimizer) -> (weakref, class name, index)
        self._seen = 0                    # optimizers seen so far (the next one's index)
        self._lrs: dict = {}              # id(optimizer) -> learning rates last written
        self._stamps: dict = {}           # id(optimizer) -> its learning rates as last seen
        self._cache: dict = {}            # id(optimizer) -> (weakref, parameter layout)
        self.merged = 0                   # a new pacer's steps merged into its last (counted)
        self._previous = None             # weakref to the pacer before the present one
        # Two pacers that handed over to each other and back step throughout (SAC's actor,
        # stepped twice every other critic step): not phases. A handover then needs PHASE
        # steps of the other within one of the pacer's.
        self.interleaved = False
        # The pacer's parameters (weakly held): a new pacer that holds none of them trains
        # another model (pretraining, then a new model fine-tuned; a sweep of runs)
        self._pacer_params = None
        self.new_model = False            # set at such a handover, for the caller to read
        self._sharing: dict = {}          # id(optimizer) -> weakrefs to those seen before it
        #                                   that hold some of its parameters (_sharing_with)

    def paces(self, opt) -> bool:
        """Count a step of `opt`; True when it is the optimizer whose steps end steps: the
        first one to step, or a new one once the old is gone or has stopped stepping
        (training in phases). With a GAN's two optimizers, the first sets the pace."""
        key = id(opt)
        n = self._stepped[key] = self._stepped.get(key, 0) + 1
        primary = self.primary() if self.primary is not None else None
        if primary is None or (primary is not opt and n > (PHASE if self.interleaved else 1)):
            if primary is not None:
                if self._previous is not None and self._previous() is opt:
                    self.interleaved = True     # (handed back: the two interleave)
                self._previous = weakref.ref(primary)
                # (taking over from one that stopped, the new one's earlier steps were taken
                # into this one: the caller counts them)
                self.merged = n - 1
            self.primary, primary = weakref.ref(opt), opt
            self._took_over(opt)
        return primary is opt

    def _took_over(self, opt) -> None:
        """`opt` paces the steps from now on (once per handover, not per step): whether it
        trains another model than the pacer before it, which may be gone (its parameters
        held weakly: one still alive can be in `opt`, a freed one cannot)."""
        try:    # (called outside the hooks' guard: it must not raise into the user's step)
            params = {id(p): weakref.ref(p) for g in opt.param_groups for p in g["params"]}
        except Exception:  # noqa: BLE001 - an optimizer of unusual groups: not told apart
            self._pacer_params, self.new_model = None, False
            return
        before = self._pacer_params
        self.new_model = bool(before) and not any(
            (old := before.get(key)) is not None and old() is ref() for key, ref in params.items())
        self._pacer_params = params

    def new_window(self) -> None:
        self._stepped = {}

    def several(self) -> bool:
        """More than one optimizer stepped in this step (a GAN's two, say)."""
        return len(self._stepped) > 1

    def doubled(self) -> bool:
        """Two optimizers that stepped in this step hold some same parameter, each in a
        param group of its own: one was built over another model's parameters (a GAN's
        generator given `Adam(D.parameters())`: the discriminator steps twice, the generator
        never). Not a wrapper stepping its base optimizer's groups (SAM, Lookahead)."""
        stepped = self._stepped
        return len(stepped) > 1 and any((other := ref()) is not None and id(other) in stepped
                                        for key in stepped for ref in self._sharing.get(key, ()))

    def _sharing_with(self, opt) -> tuple:
        """The optimizers seen before `opt` that hold one of its parameters in a group that is
        not `opt`'s own (once per optimizer, at its first step)."""
        try:
            mine = {id(p): g for g in opt.param_groups for p in g["params"]}
            # (weakly held: a freed one's id may be taken by an optimizer that shares nothing)
            return tuple(ref for ref, _, _ in self._names.values()
                         if (other := ref()) is not None and other is not opt
                         and any(mine.get(id(p), g) is not g
                                 for g in other.param_groups for p in g["params"]))
        except Exception:  # noqa: BLE001 - an optimizer of unusual groups: not told apart
            return ()

    def record_hparams(self, opt, step: int) -> None:
        """An hparams event the first time, and when a learning rate moves by over 10%
        from the value last written (schedules stay a handful of events, not one a step)."""
        key = id(opt)
        entry = self._names.get(key)
        if entry is None or entry[0]() is not opt:      # new (perhaps at a gone one's id)
            self._sharing[key] = self._sharing_with(opt)
            self._names[key] = (weakref.ref(opt), type(opt).__name__, self._seen)
            self._seen += 1
            self._lrs.pop(key, None)
            self._stamps.pop(key, None)
        # (Adafactor's relative step has lr None: its rate is its own, not told)
        raw = [g["lr"] for g in opt.param_groups if g.get("lr") is not None]
        # A tensor learning rate (capturable and fused optimizers) is read only when it has
        # changed: reading one on a GPU would wait for the device at every step.
        stamp = [(id(v), v._version) if isinstance(v, torch.Tensor) else v for v in raw]
        if stamp == self._stamps.get(key):
            return
        self._stamps[key] = stamp
        lrs = [float(v) for v in raw]
        prev = self._lrs.get(key)
        if lrs == prev:
            return
        if prev is not None and len(prev) == len(lrs) and all(
                abs(a - b) <= _LR_CHANGE * max(abs(b), 1e-30) for a, b in zip(lrs, prev)):
            return
        self._lrs[key] = lrs
        _, name, index = self._names[key]
        event = {"event": "hparams", "step": step, "optimizer": name,
                 "optimizer_index": index, "lr": lrs, "previous_lr": prev}
        if prev is None:
            g0 = opt.param_groups[0]
            for k in ("momentum", "betas", "weight_decay", "eps"):
                if k in g0:
                    v = g0[k]
                    event[k] = list(v) if isinstance(v, tuple) else v
            low = _low_dtype(g0)
            if low is not None:     # (the optimizer steps float16 weights: its eps in float16)
                event["param_dtype"] = low
        self.emit(event)

    def rate_zero(self, opt) -> bool:
        """Whether every learning rate of `opt` was 0 when last recorded (record_hparams
        writes any move from or to 0): a warm-up from 0, or a rate of 0 for good."""
        lrs = self._lrs.get(id(opt))
        return bool(lrs) and not any(lrs)

    def grad_norms(self, opt, owners: dict, raw: bool = False) -> GradBatch | None:
        """A GradBatch for the parameters of `opt` that have a gradient and belong to an
        observed layer: the tensors are their gradients' norms (0-d, on the device; normed
        True), or, with `raw` when all are dense float32, the gradients themselves, for the
        caller to norm now (normed False). A layer's norms are combined on the host, after
        the step's one read."""
        key = (len(owners), *_groups_key(opt))
        entry = self._cache.get(id(opt))
        if entry is None or entry[0]() is not opt or entry[1][0] != key:
            # (entries of optimizers that are gone go too: a layout holds their parameters)
            self._cache = {k: e for k, e in self._cache.items() if e[0]() is not None}
            entry = self._cache[id(opt)] = (weakref.ref(opt), (key, *_layout(opt, owners)))
        _, params, groups, device, mixed, sharded = entry[1]
        if not groups:
            return None
        grads = [local_shard(p.grad) for p in params] if sharded else [p.grad for p in params]
        plain = True                            # all present, dense and float32
        for g in grads:
            if g is None or g.is_sparse or g.dtype is not _F32:
                plain = False
                break
        if raw and plain:
            return _new(GradBatch, (grads, groups, False, sharded))
        if not plain and any(g is None for g in grads):     # some without a gradient this step
            present = [p for p, g in zip(params, grads) if g is not None]
            grads = [g for g in grads if g is not None]
            groups = _groups(present, owners)
            if not groups:
                return None
        grads = [g.coalesce()._values() if g.is_sparse else g for g in grads]
        if any(g.dtype == torch.float64 for g in grads):
            norms = [n.float() for n in torch._foreach_norm(grads, 2)]
        else:   # half-precision sums of squares would overflow
            norms = torch._foreach_norm(grads, 2, dtype=torch.float32)
        if mixed:
            norms = [n.to(device) for n in norms]
        return _new(GradBatch, (list(norms), groups, True, sharded))


def _groups_key(opt) -> tuple:
    """Identifies the optimizer's parameter lists: a new group, or a list changed in length,
    lays the parameters out again."""
    return tuple([(id(ps), len(ps)) for ps in map(_params, opt.param_groups)])


def _layout(opt, owners: dict):
    """The parameters of `opt` that belong to observed layers, each layer's positions among
    them, their device, whether some are sharded: computed again only when the parameters
    or the layers change (so the check for shards is not made at every step)."""
    params = [p for g in opt.param_groups for p in g["params"] if id(p) in owners]
    sharded = any(hasattr(p, "_local_tensor") for p in params)
    if sharded:
        # A shard left empty on this rank (uneven sharding: Linear(32, 1) on 2 ranks) has a
        # norm of 0, which would be judged a vanishing gradient: its layer is not judged here.
        params = [p for p in params if local_shard(p).numel()]
    device = params[0].device if params else None
    mixed = any(p.device != device for p in params)
    return params, _groups(params, owners), device, mixed, sharded


def _groups(params: list, owners: dict) -> list:
    """[(layer record, positions of its parameters in `params`)], in order of appearance; the
    positions as a slice where they are side by side (a layer's weight and bias, usually),
    else as a tuple."""
    positions: dict = {}
    for i, p in enumerate(params):
        positions.setdefault(owners[id(p)], []).append(i)
    return [(rec, slice(idx[0], idx[-1] + 1) if idx[-1] - idx[0] == len(idx) - 1 else tuple(idx))
            for rec, idx in positions.items()]
