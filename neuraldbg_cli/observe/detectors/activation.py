"""Activation regimes: dead, saturated, anomalous or non-finite outputs of a layer."""
from __future__ import annotations

import math

from ... import states
from ...thresholds import Thresholds
from ..kinds import ECHOING, FUSED, PARAM, RELU, SMOOTH, SQUASH_KINDS, UNIT_KINDS
from ..rolling import RollingMedian
from . import register
from .base import INPUT_ACTIVITY, NOTHING, OUTPUT_NORM, UNIT_ACTIVITY, UNIT_SATURATION, Detector, Observation

_TINY = 1e-30
_SQUASHING = (SMOOTH, *SQUASH_KINDS)      # each kind is also its Thresholds attribute name


class ActivationHistory:
    """A layer's recent magnitudes and sparsities, bounded whatever the length of the run."""

    __slots__ = ("log_rms", "sparsity")

    def __init__(self, window: int):
        self.log_rms = RollingMedian(window)
        self.sparsity = RollingMedian(window)

    def add_activation(self, rms: float, sparsity: float | None) -> None:
        if math.isfinite(rms):
            self.log_rms.append(math.log(rms + _TINY))
            if sparsity is not None:
                self.sparsity.append(sparsity)


class ActivationDetector(Detector):
    """Every leaf layer's output, and the input of the outermost module."""

    signal = states.ACTIVATION

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        if (not leaf and not isinstance(module, FUSED)) or isinstance(module, ECHOING):
            return NOTHING          # (containers and echoes repeat other layers' outputs)
        extra = (UNIT_ACTIVITY if kind in UNIT_KINDS else UNIT_SATURATION if kind in SQUASH_KINDS
                 else INPUT_ACTIVITY if kind == PARAM else None)
        return frozenset((OUTPUT_NORM, extra) if extra else (OUTPUT_NORM,))

    def history(self) -> ActivationHistory:
        return ActivationHistory(self.th.anomaly.window)

    def judge(self, x: Observation, history: ActivationHistory) -> tuple:
        """rms: root mean square of the output (NaN or infinite: non-finite values); where
        measured, inactive: share of units inactive for the whole step (ReLU: zero; smooth
        kinds: in the flat tail), also the layer's sparsity; saturated: share of sigmoid/tanh
        units saturated; input_dead: share of input units zero for the whole step."""
        # one unpacking, not a property lookup per field: this runs per layer and step
        kind, rms, inactive, input_dead, saturated, _, is_output = x[:7]
        th = self.th
        if not math.isfinite(rms):
            return "nonfinite", {}
        if inactive is not None:
            if kind == RELU and inactive >= th.relu.dead_ratio:
                return "dead", {}
            if kind == SMOOTH and inactive >= th.smooth.saturated_ratio:
                return "saturated", {}
        if input_dead is not None and input_dead >= th.input.dead_ratio:
            return "dead", {"observed": "input"}
        # a saturating output sigmoid is a confident prediction: not judged as saturated
        if saturated is not None and not is_output and kind in _SQUASHING \
                and saturated >= getattr(th, kind).saturated_ratio:
            return "saturated", {}
        # ANOMALOUS: a sudden shift of magnitude or sparsity against the layer's own recent
        # median. Relative to the layer itself, so layers of any scale, BatchNorm outputs and
        # Dropout's zeros (a steady share) do not trigger it; only a jump between steps does.
        an, recent = th.anomaly, history.log_rms
        if recent.size >= an.warmup:
            v, limit = math.log(rms + _TINY), an.log_magnitude
            if not recent.near(v, limit):
                med = recent.median()
                if abs(v - med) > limit:
                    return "anomalous", {"rms_median": math.exp(med), "rms_ratio": math.exp(v - med)}
            sp, jump = history.sparsity, an.sparsity_jump
            if inactive is not None and sp.size >= an.warmup and not sp.near(inactive, jump):
                med = sp.median()
                if abs(inactive - med) > jump:
                    return "anomalous", {"sparsity_median": med, "sparsity_shift": inactive - med}
        return "normal", {}

    def remember(self, x: Observation, history: ActivationHistory) -> None:
        rms, inactive = x[1], x[2]
        if math.isfinite(rms):      # add_activation, inlined: this runs per layer and step
            history.log_rms.append(math.log(rms + _TINY))
            if inactive is not None:
                history.sparsity.append(inactive)

    def evidence(self, x: Observation, extra: dict) -> dict:
        stats = {"rms": x.rms}
        if x.inactive is not None:
            stats["dead_ratio" if x.kind == RELU else "saturated_ratio"] = x.inactive
        if x.saturated is not None:
            stats["saturated_ratio"] = x.saturated
        if x.input_dead is not None:
            stats["input_dead_ratio"] = x.input_dead
        if x.units is not None:
            stats["units"] = x.units
        return {**stats, **extra}


def activation_state(kind: str, rms: float, hist: ActivationHistory, th: Thresholds,
                     inactive: float | None = None, saturated: float | None = None,
                     input_dead: float | None = None) -> tuple[str, dict]:
    """ActivationDetector's (state, extra evidence) for hand-made numbers."""
    x = Observation(kind, rms, inactive, input_dead, saturated)
    return ActivationDetector(th).judge(x, hist)


register(ActivationDetector)
