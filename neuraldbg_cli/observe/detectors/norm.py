"""Normalisation health: BatchNorm's batch statistics drifting from its running statistics
(the train/eval mismatch of batches that are not fair samples of the data), and a
LayerNorm/GroupNorm/RMSNorm gain collapsing toward zero.

facts (from the step end, observe/norms.py): BatchNorm: "drift" (the batch mean's distance
from the running mean, in running standard deviations, averaged over channels and over the
step's calls), "jump" (its distance from the batch mean of the same call of the step before, likewise),
"per_channel" (values behind each channel's batch statistics), "batch", "momentum", "calls",
"moved" (the step's median update ratio, where known); a BatchNorm at momentum 0 whose
running statistics are still their initial 0 and 1: "stale" (STALE: they never follow the
batches, and evaluation normalises with them); gains: "gain_rms".

A drift is batches that are not fair samples: far from the running mean *and* from one
another. Batches close to one another but all far from the running mean are a running
average lagging weights that move fast (lr 0.1 on a fresh ResNet): it catches up as the
learning slows, and is not a drift. Nor are batches apart from one another while the weights
before the BatchNorm move a hundredth of their norm or more a step (d2l's LeNet with
BatchNorm at lr 1.0): each step's weights make a new distribution, whatever the batch."""
from __future__ import annotations

import math
from collections import deque

from ... import states
from ..norms import reading_for
from . import register
from .base import NORM_STATS, NOTHING, Detector, Observation

_NEEDS = frozenset((NORM_STATS,))
_REFERENCE_MOMENTUM = 0.1       # the warm-up in thresholds.yaml is given for this momentum


class NormHistory:
    __slots__ = ("steps", "drifts", "jumps", "moves", "gain_start")

    def __init__(self, window: int):
        self.steps = 0                      # steps judged
        self.drifts = deque(maxlen=window)  # the last drifts (window - 1 of them are used)
        self.jumps = deque(maxlen=window)   # ... and jumps
        self.moves = deque(maxlen=window)   # ... and the steps' median update ratios
        self.gain_start = None              # the gain's rms at first sight


class NormDetector(Detector):
    """Every BatchNorm that tracks running statistics, every LayerNorm/GroupNorm/RMSNorm with
    a gain; only eager calls with gradients in training mode are read."""

    signal = states.NORM

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        return _NEEDS if module is not None and reading_for(module) is not None else NOTHING

    def history(self) -> NormHistory:
        return NormHistory(self.th.norm.window)

    def judge(self, x: Observation, h: NormHistory) -> tuple:
        th, f = self.th.norm, x.facts
        gain = f.get("gain_rms")
        if gain is not None:
            start = h.gain_start
            if start is not None and start > 0 and math.isfinite(gain) \
                    and gain < th.collapse_ratio * start:
                return "collapsed", {"gain_rms_start": start, "gain_ratio": gain / start}
            return "normal", {}
        if f.get("stale"):
            return "stale", {}
        drift = f["drift"]
        m = f.get("momentum")
        # Running statistics start at 0 and 1: judged once they have followed the batches
        # for ~2 / momentum steps (a cumulative average, momentum None, follows at once).
        warmup = th.warmup if m is None else math.ceil(th.warmup * _REFERENCE_MOMENTUM / m)
        if not math.isfinite(drift) or h.steps < warmup:
            return "normal", {}
        # the median of the last `window` steps: one odd batch, or one jump of the weights
        # that the running statistics follow a few steps later, is not a drift
        typical = _median(h.drifts, drift, th.window)
        if typical < th.drift or f.get("batch") == 1:
            # (one sample a batch: each image normalised by its own channel statistics, as
            # pix2pix and a U-Net at batch 1 train by design; no batch is a sample of others)
            return "normal", {}
        jump = f.get("jump")
        if jump is not None and math.isfinite(jump):
            # batches that agree with one another: the running average lags, they are fair
            apart = _median(h.jumps, jump, th.window)
            if apart < th.drift:
                return "normal", {}
            moved = f.get("moved")
            if moved is not None and _median(h.moves, moved, th.window) >= th.moving_update:
                return "normal", {}
            return "drift", {"drift_median": typical, "jump_median": apart}
        return "drift", {"drift_median": typical}

    def remember(self, x: Observation, h: NormHistory) -> None:
        f = x.facts
        h.steps += 1
        gain = f.get("gain_rms")
        if gain is not None:
            if h.gain_start is None and math.isfinite(gain):
                h.gain_start = gain
        elif "drift" in f and math.isfinite(f["drift"]):
            h.drifts.append(f["drift"])
            jump = f.get("jump")
            if jump is not None and math.isfinite(jump):
                h.jumps.append(jump)
            moved = f.get("moved")
            if moved is not None:
                h.moves.append(moved)

    def evidence(self, x: Observation, extra: dict) -> dict:
        f = x.facts
        keep = ("gain_rms",) if "gain_rms" in f else \
            ("momentum", "running_mean", "running_var") if f.get("stale") else \
            ("drift", "jump", "per_channel", "batch", "momentum")
        return {**{k: f[k] for k in keep if f.get(k) is not None}, **extra}


def _median(past, value: float, window: int) -> float:
    """The median of `value` and the last `window` - 1 values of `past`."""
    recent = sorted([*list(past)[-(window - 1):], value]) if window > 1 else [value]
    return recent[len(recent) // 2]


register(NormDetector)
