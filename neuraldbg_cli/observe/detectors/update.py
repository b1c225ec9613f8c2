"""Update health: steps too large for a layer's weights, a layer that never changes although
it gets gradients, a layer that gets no gradient although the layers after it do, a layer
whose units are copies of one another."""
from __future__ import annotations

import math

from ... import states
from ..parametrized import own_parameters
from . import register
from .base import GRAD_NORM, NOTHING, PARAM_UPDATE, Detector, Observation

_NEEDS = frozenset((GRAD_NORM, PARAM_UPDATE))


# Units read as copies stay so until they are this many times further apart than it takes
# to be read as copies: rounding drifts copies apart slowly, and the units stay alike long after
# the first difference shows.
_COPIES_EXIT = 100.0


class UpdateHistory:
    """Steps judged so far, how many in a row left the weights unchanged, whether any moved
    them, and, where the last reading of its units (symmetry.py) found them copies of one
    another, how far apart they were (else None)."""

    __slots__ = ("steps", "still", "moved", "spread")

    def __init__(self):
        self.steps = 0
        self.still = 0
        self.moved = False
        self.spread = None


class UpdateDetector(Detector):
    """Every layer with trainable parameters of its own, at each optimizer step.

    facts (from the step end): "no_grad": none of its parameters has a gradient while a
    layer after it in the optimizer's order has one (a cut graph); "in_no_optimizer": its
    parameters get gradients but no optimizer holds them; "rate_zero": every learning rate
    of its optimizer is 0; "spread" (at the steps that read it, rarely): how far its units'
    weights are from one another, over their largest magnitude (None: all zero)."""

    signal = states.UPDATE

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        # (frozen now or not: a backbone unfrozen later, a GAN's generator whose loop turns
        # requires_grad off before its first call, is watched once an optimizer steps it)
        if module is None or next(own_parameters(module), None) is None:
            return NOTHING
        return _NEEDS

    def history(self) -> UpdateHistory:
        return UpdateHistory()

    def judge(self, x: Observation, history: UpdateHistory) -> tuple:
        th, facts = self.th.update, x.facts
        if facts:
            if facts.get("no_grad"):
                return "detached", {}
            if facts.get("in_no_optimizer") and history.still + 1 >= th.frozen_steps:
                # (shared_optimizers: two optimizers step some same parameters, see judge.py)
                return "frozen", {"in_no_optimizer": True, **(
                    {"shared_optimizers": True} if facts.get("shared_optimizers") else {})}
        ratio, grad = x.update_ratio, x.grad_norm
        # (a reading of the units at this step, rarely; else the last one's verdict)
        spread = self._copies(facts["spread"], x, history) if facts and "spread" in facts \
            else history.spread
        if spread is not None:
            return "symmetric", {"spread": spread}
        if ratio is None or not math.isfinite(ratio):
            return "normal", {}
        if ratio == 0.0 and grad is not None and grad > 0 and history.still + 1 >= th.frozen_steps:
            # (at a learning rate of 0: a warm-up from 0 that counts only if it never rises)
            return "frozen", {"rate_zero": True} if facts and facts.get("rate_zero") else {}
        # (a PReLU's one slope, a policy's log-std: a few scalars near 0 make any step look
        # large beside them, and a learning rate too high shows in the layers of many)
        if ratio > th.too_large and history.steps >= th.warmup \
                and (x.units is None or x.units >= th.min_values):
            return "too_large", {}
        return "normal", {}

    def remember(self, x: Observation, history: UpdateHistory) -> None:
        facts = x.facts
        if facts and "spread" in facts:
            history.spread = self._copies(facts["spread"], x, history)
        history.steps += 1
        frozen = x.update_ratio == 0.0 or bool(facts and facts.get("in_no_optimizer"))
        history.still = history.still + 1 if frozen else 0
        if x.update_ratio:
            history.moved = True

    def _copies(self, spread: float | None, x: Observation, history: UpdateHistory):
        """`spread` (a reading of how far the layer's units are from one another) where it
        reads them as copies, else None. Copies stay so until _COPIES_EXIT times further
        apart; equal weights not moved yet (a warm-up from 0) are no copies yet."""
        if spread is None or not (history.moved or x.update_ratio):
            return None
        limit = self.th.update.symmetric_spread
        if history.spread is not None:
            limit *= _COPIES_EXIT
        return spread if spread <= limit else None

    def evidence(self, x: Observation, extra: dict) -> dict:
        stats = {"update_ratio": x.update_ratio, "grad_norm": x.grad_norm}
        return {k: v for k, v in {**stats, **extra}.items() if v is not None}


register(UpdateDetector)
