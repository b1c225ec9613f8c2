"""The optimizer step's signals at the step end: each layer's update ratio, then its
gradient, judged knowing how far the step moved it (an adaptive optimizer turns a tiny
gradient into a full step: no vanishing gradient where the layer learns)."""
from __future__ import annotations

import math

from .detectors.base import Observation
from .kinds import CONTAINER
from .updates import UpdateBatch, ratios
from .verdicts import Verdicts

# A NamedTuple's own __new__ is a Python function; tuple.__new__ builds the same record in C.
_new = tuple.__new__
_NO_GRAD = {"no_grad": True}
_RATE_ZERO = {"rate_zero": True}    # (its optimizer's every learning rate is 0)


class OptimizerJudge(Verdicts):
    """The part of the step end that judges gradients and updates (the base of
    `judge.StepJudge`)."""

    decay_share = 0.5       # (StepJudge sets gradient.decay_share)

    def _judge_optimizers(self, grads: list, raw: list, done: list, recs: list, step: int,
                          loss, keep, copies: dict | None = None) -> float | None:
        """The step's GradBatches and UpdateBatches `grads`, their values in `raw` (to norm)
        and `done` (normed), in order; `keep`: the step's Summary or None; `copies`: at a step
        that read them, layer record -> how far its units are from one another
        (symmetry.py). Returns the step's median update ratio (None: none moved)."""
        parts, moved, paces = [], [], {}    # (moved: the step's positive ratios)
        pushes = {}     # layer record -> (its ratio, weight decay x ||W||): decay coupled
        for batch in grads:     # (each batch's share of the read; a vector brings its own)
            update = type(batch) is UpdateBatch
            if update and batch.vector:
                own = batch.tensors.tolist()
            else:
                values, k = done if batch.normed else raw, len(batch.tensors)
                own = values[:k]
                del values[:k]
            if update:
                weights = {} if batch.decayed else None
                own = ratios(batch, own, weights)
                moved += [r for r in own.values() if r]
                if weights is None:
                    paces.update(own)
                else:
                    pushes.update((rec, (own[rec], batch.decayed * w)) for rec, w in weights.items())
            parts.append((batch, own))
        middle = middle_of(moved)
        pace = {"median_update": middle} if middle and (paces or pushes) else None
        norms = {}
        for batch, own in parts:
            if type(batch) is UpdateBatch:     # (own: its ratios)
                self._judge_updates(batch, own, norms, recs, step, copies)
                if keep is not None:
                    for rec, ratio in own.items():
                        if rec.on_update:
                            keep.add(rec, "update_ratio", ratio)
            else:
                norms = self._judge_gradients(batch.groups, own, step, loss, paces, pace,
                                              pushes)
                if keep is not None:
                    for rec, norm in norms.items():
                        if rec.on_grad:
                            keep.add(rec, "grad_norm", norm)
        return middle

    def _judge_gradients(self, groups: list, values: list, step: int, loss=None, paces=None,
                         pace=None, pushes=None) -> dict:
        """groups: [(layer record, positions of its parameters' norms in `values`: a slice,
        or a tuple where they are not side by side)]; `loss`: the step's, its scale;
        `paces`: layer record -> update ratio of the step, where the step follows the
        gradient (no weight decay added to it); `pace`: the step's median update ratio;
        `pushes`: layer record -> (update ratio, weight decay x ||W||) where decay is added
        to the gradient: the step follows the gradient where the decay is a small part of
        it (milesial's U-Net: RMSprop's weight_decay of 1e-8)."""
        # a layer's norm from its parameters' norms: the square root of their sum of squares
        norms = [math.hypot(*(values[at] if type(at) is slice else [values[i] for i in at]))
                 for _, at in groups]
        top = max(norms)            # the largest finite one: max passes over NaN unless first
        if not math.isfinite(top):
            top = max((n for n in norms if math.isfinite(n)), default=0.0)
        out = {}
        for (rec, _), norm in zip(groups, norms):
            out[rec] = norm
            if rec.on_grad:
                ratio = paces.get(rec) if paces else None
                if ratio is None and pushes and rec in pushes:
                    ratio, push = pushes[rec]
                    if not push <= self.decay_share * norm:    # (gradient.decay_share)
                        ratio = None
                x = _new(Observation, (rec.kind if rec.leaf else CONTAINER, None, None, None,
                                       None, None, False, norm, top, ratio, loss, pace))
                self._observe(rec, rec.on_grad, x, step)
        return out

    def _judge_updates(self, batch, found: dict, norms: dict, recs: list, step: int,
                       copies: dict | None = None) -> None:
        """Each layer's update ratio (`found`: layer record -> ratio); a layer with no
        gradient that ran this step, before the first one (in the optimizer's order) that
        has one, had its graph cut. (A layer with no gradient after one that has it is a
        dead end, not a cut: an output the loss does not use, as BYOL's encoder's last
        Linear, whose input is what its loss reads.)"""
        groups = batch.groups
        # the first layer with a gradient (none at all: nothing is cut, -1)
        first = next((i for i, (rec, _) in enumerate(groups) if rec in norms), -1)
        touched = set(recs)     # (a layer not called this step is not judged)
        for i, (rec, _) in enumerate(groups):
            # (a graph attention layer: parameters and modules of its own, no output record)
            if not rec.on_update or (rec not in touched and not norms.get(rec)):
                continue
            norm = norms.get(rec)
            facts = _NO_GRAD if norm is None and i < first else \
                _RATE_ZERO if batch.rate_zero else None
            if copies is not None:      # (a reading of its units, rarely: symmetry.py)
                facts = {**(facts or {}), "spread": copies.get(rec)}
            x = _new(Observation, (rec.kind, None, None, None, None, rec.values, False, norm,
                                   None, found.get(rec), None, facts))
            self._observe(rec, rec.on_update, x, step)


def middle_of(values: list) -> float | None:
    """The median of a step's few numbers (one per layer), or None."""
    if not values:
        return None
    values.sort()
    return values[len(values) // 2]
