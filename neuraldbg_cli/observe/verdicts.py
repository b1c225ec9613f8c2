"""Each detector's verdict on one layer's numbers, and the transitions it confirms, written.
A detector that raises is switched off, with a warning; the others go on."""
from __future__ import annotations

import math


class Verdicts:
    """The part of the step end that asks the detectors watching a layer and writes what
    changed (the base of `optimizer_judge.OptimizerJudge` and so of `judge.StepJudge`, whose
    `registry`, `emit` and `fault` it uses)."""

    def _observe(self, rec, watchers: list, x, step: int) -> None:
        for detector, history, tracker in watchers:
            try:
                state, extra = detector.judge(x, history)
                detector.remember(x, history)
                if state != tracker.steady:
                    self._changed(rec, detector, tracker, x, state, extra, step)
            except Exception as e:  # noqa: BLE001 - only this detector stops
                self._switch_off(detector, e)

    def _changed(self, rec, detector, tracker, x, state: str, extra: dict, step: int) -> None:
        """A layer's state differs from its steady one: update its tracker."""
        urgent = extra.pop("urgent", False) if extra else False
        t = tracker.update(step, state, detector.evidence(x, extra), urgent)
        if t is not None:
            self.write(rec, detector.signal.name, t)

    def _switch_off(self, detector, error: BaseException) -> None:
        """No layer is handed to `detector` again, those registered later included."""
        reg = self.registry
        if detector in reg.detectors:
            reg.detectors.remove(detector)
        for rec in reg.layers():
            rec.watching = [w for w in rec.watching if w.detector is not detector]
            rec.on_output = [w for w in rec.on_output if w.detector is not detector]
            rec.on_grad = [w for w in rec.on_grad if w.detector is not detector]
            rec.on_update = [w for w in rec.on_update if w.detector is not detector]
            rec.on_norm = [w for w in rec.on_norm if w.detector is not detector]
        self.fault(f"{detector.signal.name} detector switched off", error)

    def write(self, rec, signal: str, t) -> None:
        event = {"event": "transition", "step": t.step, "layer": self.registry.name_of(rec),
                 "module_type": rec.module_type, "kind": rec.kind, "signal": signal,
                 "from": t.previous, "to": t.state, "stats": _rounded(t.stats)}
        low = _LOW.get(str(getattr(rec, "dtype", None)))
        if low is not None and signal == "activation":
            event["dtype"] = low        # (the output's precision, when reduced: explain's rules)
        self.emit(event)


_LOW = {"torch.float16": "float16", "torch.bfloat16": "bfloat16"}


def _rounded(stats: dict) -> dict:
    return {k: (float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v)
            for k, v in stats.items()}
