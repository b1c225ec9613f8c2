"""Loss health: the scalar passed to backward() spiking, diverging, stalled or non-finite.

Judged against two references: the starting level (the median of the first steps: what the
untrained model scores; its first step's alone where that median is _LEAP times it, a loss
that blew up at once) and the recent median. A loss that ends low and flat has converged;
only one still near its starting level after `stall_after` steps has stalled. Levels mean
nothing for a loss that goes negative (a log-likelihood), sums several objectives (a GAN's
two optimizers) or is measured against targets that move with training (a copy of the
model computes them: a DQN's target network, PPO's old policy; copies.py): there only
non-finite values are judged. A stall carries its why
(`_why_stalled`): the layers' median update ratio, and with healthy updates, targets far
beyond the output's scale, a smooth loss on a plateau, or a noisy flat one (no signal).

A loss of one sample a step (a time series fed one window at a time) is one sample's error:
its steps differ by orders of magnitude, and a quarter of them are 3x the median by chance.
Once the loss call read is taken over one row, its levels are judged on `long_window` steps
for the rest of the run (the start: the median of the first that many, the recent level: of
the last that many), and a spike is one sample's error, not judged. (A loss whose steps
merely differ widely is not taken for one: Adam at a rate too high makes one as well.)
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
_LEAP = 100     # the median of the first steps over the first: a loss that blew up at once


class LossHistory:
    __slots__ = ("first", "start", "recent", "lowest", "steps", "levels", "moves", "jitter",
                 "last", "scales", "noisy", "early", "slow")

    def __init__(self, window: int, long_window: int = 100):
        self.first: list = []               # the first losses, until the start is known
        self.start: float | None = None     # the starting level
        self.recent = RollingMedian(window)
        self.lowest = math.inf              # the lowest recent median seen
        self.steps = 0
        self.levels = True                  # levels can be judged (never negative, one objective)
        self.moves = RollingMedian(window)  # the steps' median update ratio over the layers
        self.jitter = RollingMedian(window) # |loss - the last| / the last: batch-to-batch noise
        self.last: float | None = None
        self.scales = None                  # (output, targets) of a regression, last read
        self.noisy = False                  # one sample's error a step: judged on the long
        self.early: list = []               # window: its first values (the start),
        self.slow = RollingMedian(long_window)  # and its last


class LossDetector(Detector):
    """The pseudo-layer (loss). facts: "several": more than one optimizer stepped;
    "moving_targets": a copy of a trained model ran without gradients; "uneven": the steps
    hold a number of forwards that changes on most steps (an episode's, uneven.py);
    "one_row": the loss call read was taken over one row (a batch of one sample)."""

    signal = states.LOSS

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        return _NEEDS if module is None and kind == LOSS_KIND else NOTHING

    def history(self) -> LossHistory:
        return LossHistory(self.th.loss.window, self.th.loss.long_window)

    def judge(self, x: Observation, h: LossHistory) -> tuple:
        loss, th = x.loss, self.th.loss
        if loss is None:
            return "normal", {}
        if not math.isfinite(loss):
            return "nonfinite", {}
        start = h.start
        if start is None or start <= 0 or not h.levels or loss < 0 or (x.facts and (
                x.facts.get("several") or x.facts.get("moving_targets") or x.facts.get("uneven"))) \
                or h.recent.size < th.start_steps:
            return "normal", {}
        if h.noisy:
            if len(h.early) < th.long_window:
                return "normal", {}
            start, recent = median(h.early), h.slow.median()
            if start <= 0:
                return "normal", {}
        else:
            recent = h.recent.median()
        if recent > th.diverging_factor * start and h.recent.size >= th.window // 2:
            return "diverging", _paced(h, {"loss_median": recent, "loss_start": start})
        if loss > th.spike_factor * recent and loss > start and not h.noisy:
            return "spiking", _paced(h, {"urgent": True, "loss_median": recent,
                                         "loss_start": start})
        if h.steps >= th.stall_after and min(h.lowest, recent) >= th.stall_fraction * start:
            said = {"loss_median": recent, "loss_start": start}
            return "stalled", {**said, **_why_stalled(h, th)}
        return "normal", {}

    def remember(self, x: Observation, h: LossHistory) -> None:
        loss = x.loss
        if loss is None or not math.isfinite(loss):
            return
        h.steps += 1
        facts = x.facts
        if facts:
            if facts.get("several") or facts.get("moving_targets") or facts.get("uneven"):
                h.levels = False
            if "moved" in facts:
                h.moves.append(facts["moved"])
            if facts.get("one_row"):
                h.noisy = True      # (a loss of one row: one sample's error)
            h.scales = facts.get("scales", h.scales)
        if h.last is not None and h.last > 0:
            h.jitter.append(abs(loss - h.last) / h.last)
        h.last = loss
        if loss < 0:
            h.levels = False
        h.recent.append(loss)
        h.slow.append(loss)
        if len(h.early) < self.th.loss.long_window:
            h.early.append(loss)
        if h.start is None:
            h.first.append(loss)
            if len(h.first) == self.th.loss.start_steps:
                first, level = h.first[0], median(h.first)
                # (a loss that leapt by orders of magnitude in its first steps, all-ones
                # weights under Adam, started where the untrained model scored: its first)
                h.start, h.first = (first if 0 < _LEAP * first < level else level), []
        elif h.recent.size >= self.th.loss.start_steps and h.steps % 5 == 0:
            h.lowest = min(h.lowest, h.recent.median())   # (every few steps: a trend, not a blip)

    def evidence(self, x: Observation, extra: dict) -> dict:
        return {"loss": x.loss, **extra}


def _paced(h: LossHistory, said: dict) -> dict:
    """With the pace of the weights (the layers' median update ratio) where it is known: a
    rate too high, or a bad batch."""
    if h.moves.size:
        said["update_median"] = h.moves.median()
    return said


def _why_stalled(h: LossHistory, th) -> dict:
    """The evidence of a stall: the layers' median update ratio; where the weights move at a
    healthy pace, whether a regression's targets lie far beyond the output's scale (unscaled
    targets), whether the loss is smooth (full batches crawling along a plateau: the rate is
    too low to leave it) or noisy while flat (targets with no signal: stated, never counted)."""
    if not h.moves.size:
        return {}
    moved = h.moves.median()
    said = {"update_median": moved}
    if moved < th.moving_update:
        return said
    o, t = h.scales if h.scales is not None else (None, None)
    if t is not None and t >= UNSCALED_TARGETS and t >= UNSCALED_TARGETS * max(o, 1e-12):
        return {**said, "output_scale": o, "target_scale": t}
    jitter = h.jitter.median() if h.jitter.size else 0.0
    said["loss_jitter"] = jitter
    if jitter < SMOOTH_LOSS:
        return {**said, "plateau": True}
    return {**said, "no_signal": True}


UNSCALED_TARGETS = 100.0    # targets this far beyond the output's scale (and this large)
SMOOTH_LOSS = 1e-3          # a loss moving less than this share a step: full batches


register(LossDetector)
