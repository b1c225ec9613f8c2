"""Loss health: the scalar passed to backward() spiking, diverging, stalled or non-finite.

Judged against two references: the starting level (the median of the first steps: what the
untrained model scores) and the recent median. A loss that ends low and flat has converged;
only one still near its starting level after `stall_after` steps has stalled. Levels mean
nothing for a loss that goes negative (a log-likelihood) or sums several objectives (a GAN's
two optimizers): there only non-finite values are judged.
"""
from __future__ import annotations

import math
from statistics import median

from ... import states
from ..kinds import LOSS_KIND
from ..rolling import RollingMedian
from . import register
from .base import LOSS, NOTHING, Detector, Observation

_NEEDS = frozenset((LOSS,))


class LossHistory:
    __slots__ = ("first", "start", "recent", "lowest", "steps", "levels", "moves")

    def __init__(self, window: int):
        self.first: list = []               # the first losses, until the start is known
        self.start: float | None = None     # the starting level
        self.recent = RollingMedian(window)
        self.lowest = math.inf              # the lowest recent median seen
        self.steps = 0
        self.levels = True                  # levels can be judged (never negative, one objective)
        self.moves = RollingMedian(window)  # the steps' median update ratio over the layers


class LossDetector(Detector):
    """The pseudo-layer (loss). facts: "several": more than one optimizer stepped."""

    signal = states.LOSS

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        return _NEEDS if module is None and kind == LOSS_KIND else NOTHING

    def history(self) -> LossHistory:
        return LossHistory(self.th.loss.window)

    def judge(self, x: Observation, h: LossHistory) -> tuple:
        loss, th = x.loss, self.th.loss
        if loss is None:
            return "normal", {}
        if not math.isfinite(loss):
            return "nonfinite", {}
        start = h.start
        if start is None or start <= 0 or not h.levels or loss < 0 \
                or (x.facts and x.facts.get("several")) or h.recent.size < th.start_steps:
            return "normal", {}
        recent = h.recent.median()
        if recent > th.diverging_factor * start and h.recent.size >= th.window // 2:
            return "diverging", {"loss_median": recent, "loss_start": start}
        if loss > th.spike_factor * recent and loss > start:
            return "spiking", {"urgent": True, "loss_median": recent, "loss_start": start}
        if h.steps >= th.stall_after and min(h.lowest, recent) >= th.stall_fraction * start:
            said = {"loss_median": recent, "loss_start": start}
            if h.moves.size:
                # why: steps too small to move the weights, or weights that move while the
                # loss does not follow (targets with no signal: stated, never counted)
                moved = h.moves.median()
                said["update_median"] = moved
                if moved >= th.moving_update:
                    said["no_signal"] = True
            return "stalled", said
        return "normal", {}

    def remember(self, x: Observation, h: LossHistory) -> None:
        loss = x.loss
        if loss is None or not math.isfinite(loss):
            return
        h.steps += 1
        facts = x.facts
        if facts:
            if facts.get("several"):
                h.levels = False
            elif "moved" in facts:
                h.moves.append(facts["moved"])
        if loss < 0:
            h.levels = False
        h.recent.append(loss)
        if h.start is None:
            h.first.append(loss)
            if len(h.first) == self.th.loss.start_steps:
                h.start, h.first = median(h.first), []
        elif h.recent.size >= self.th.loss.start_steps and h.steps % 5 == 0:
            h.lowest = min(h.lowest, h.recent.median())   # (every few steps: a trend, not a blip)

    def evidence(self, x: Observation, extra: dict) -> dict:
        return {"loss": x.loss, **extra}


register(LossDetector)
