"""Loss-scale health: torch.amp.GradScaler skipping most optimizer steps, or its scale fallen
to where even unscaled gradients overflow.

facts (from the step end, observe/scaler.py): "scale": the loss scale the step's backward
used; "skipped": the scaler skipped the step (its gradients held inf/NaN); "overflow": on a
skipped step, the layer whose gradients overflowed first (nearest the loss), when known.

A scaler calibrates: from its initial scale (65536) it halves at each skipped step until the
gradients fit, and it doubles the scale again after `growth_interval` clean steps, skipping
the step that overflows. Both are how it works: the skips before the first clean step are
never counted, and a skip now and then is not. `skipping` is most of the recent steps
skipped while the scale keeps falling; `collapsed` a scale fallen below `collapse_scale`
(1): a step overflowed float16 with the loss unscaled, which no scale fixes.
"""
from __future__ import annotations

from collections import deque

from ... import states
from ..kinds import SCALER_KIND
from . import register
from .base import NOTHING, SCALER, Detector, Observation

_NEEDS = frozenset((SCALER,))


class ScalerHistory:
    __slots__ = ("calibrated", "since", "recent", "top", "first", "steps", "skips", "overflow")

    def __init__(self, window: int):
        self.first = None                       # the scale of the first step
        self.steps = self.skips = 0             # steps seen, and skipped
        self.overflow = None                    # the layer named at the last skipped step
        self.calibrated = False                 # a step went through (calibration is over)
        self.since = 0                          # steps since then
        self.recent: deque = deque(maxlen=window)   # (scale, skipped) of the last steps
        self.top = 0.0                          # the largest scale seen since calibration


class ScalerDetector(Detector):
    signal = states.SCALER

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        return _NEEDS if module is None and kind == SCALER_KIND else NOTHING

    def history(self) -> ScalerHistory:
        return ScalerHistory(self.th.scaler.window)

    def judge(self, x: Observation, h: ScalerHistory) -> tuple:
        facts = x.facts or {}
        scale, skipped = facts.get("scale"), facts.get("skipped")
        if scale is None:
            return "normal", {}
        th = self.th.scaler
        if scale < th.collapse_scale:   # (only a step skipped at a scale <= 1 brings it here)
            return "collapsed", {"urgent": True, **_top(h)}
        if h.since < h.recent.maxlen or not skipped:     # (the calibration's wake too)
            return "normal", {}
        recent = [*h.recent, (scale, skipped)][-h.recent.maxlen:]     # (the last `window`)
        skips = sum(1 for _, s in recent if s)
        # most of the window skipped, and the scale no higher than where the window began
        if skips >= th.skip_share * len(recent) and scale <= recent[0][0]:
            return "skipping", {"skipped_steps": skips, "window": len(recent), **_top(h)}
        return "normal", {}

    def remember(self, x: Observation, h: ScalerHistory) -> None:
        facts = x.facts or {}
        scale = facts.get("scale")
        if scale is None:
            return
        h.recent.append((scale, bool(facts.get("skipped"))))
        h.first = scale if h.first is None else h.first
        h.steps += 1
        if facts.get("skipped"):
            h.skips += 1
            h.overflow = facts.get("overflow") or h.overflow
        if not facts.get("skipped"):
            h.calibrated = True
        if h.calibrated:
            h.top = max(h.top, scale)
            h.since += 1

    def evidence(self, x: Observation, extra: dict) -> dict:
        facts = x.facts or {}
        out = {"scale": facts.get("scale"), "skipped": bool(facts.get("skipped")), **extra}
        if facts.get("overflow"):
            out["overflow_layer"] = facts["overflow"]
        return out


def _top(h: ScalerHistory) -> dict:
    """Where the fall began (the largest scale since calibration, or the first), the steps
    skipped so far, the layer whose gradients overflowed at the last skipped step."""
    out = {"scale_top": h.top or h.first, "steps_skipped": h.skips, "steps_seen": h.steps}
    if h.overflow:
        out["overflow_layer"] = h.overflow
    return out


register(ScalerDetector)
