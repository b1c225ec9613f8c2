"""Loop health: mistakes of the training loop itself, seen at each optimizer step.

facts (from the step end): "reset": whether the gradients were reset since the last step
(optimizer.zero_grad(), model.zero_grad(), grads set to None or zeroed), None when it cannot
be told; "eval_roots": names of the models that ran only in eval() mode in a step that
updated their parameters; "no_backward": the optimizer stepped with no backward() in the
step and no gradient on its parameters; "no_gradient": it stepped after backward() with no
gradient on its parameters, nor on any layer's (a loss that does not reach the model);
"no_step": the run ended with an optimizer made, backward() called this many times and no
optimizer step at all (told once, at its end)."""
from __future__ import annotations

from ... import states
from ..kinds import LOOP_KIND
from . import register
from .base import LOOP, NOTHING, Detector, Observation

_NEEDS = frozenset((LOOP,))


class LoopHistory:
    __slots__ = ("no_reset", "idle", "cut")

    def __init__(self):
        self.no_reset = 0       # optimizer steps in a row without a gradient reset
        self.idle = 0           # optimizer steps in a row with no backward() and no gradient
        self.cut = 0            # ... with backward() and no gradient


class LoopDetector(Detector):
    signal = states.LOOP

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        return _NEEDS if module is None and kind == LOOP_KIND else NOTHING

    def history(self) -> LoopHistory:
        return LoopHistory()

    def judge(self, x: Observation, h: LoopHistory) -> tuple:
        facts = x.facts or {}
        if facts.get("no_step"):
            return "no_step", {"urgent": True, "backwards": facts["no_step"]}
        if facts.get("reset") is False and h.no_reset + 1 >= self.th.loop.no_zero_grad_steps:
            return "no_zero_grad", {"steps_without_reset": h.no_reset + 1}
        if facts.get("no_backward") and h.idle + 1 >= self.th.loop.no_zero_grad_steps:
            return "no_backward", {"steps_without_backward": h.idle + 1}
        if facts.get("no_gradient") and h.cut + 1 >= self.th.loop.no_zero_grad_steps:
            return "no_gradient", {"steps_without_gradient": h.cut + 1}
        if facts.get("eval_roots"):
            return "eval_mode", {"models": facts["eval_roots"]}
        return "normal", {}

    def remember(self, x: Observation, h: LoopHistory) -> None:
        reset = (x.facts or {}).get("reset")
        h.idle = h.idle + 1 if (x.facts or {}).get("no_backward") else 0
        h.cut = h.cut + 1 if (x.facts or {}).get("no_gradient") else 0
        if reset is not None:
            h.no_reset = 0 if reset else h.no_reset + 1

    def evidence(self, x: Observation, extra: dict) -> dict:
        return dict(extra)


register(LoopDetector)
