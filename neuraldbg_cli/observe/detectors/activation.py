"""Activation regimes: dead, saturated, anomalous or non-finite outputs of a layer."""
from __future__ import annotations

import math

from ... import states
from ...thresholds import AnomalyThresholds, Thresholds
from ..control import ControlChart, Limits
from ..kinds import ECHOING, FUSED, PARAM, RELU, SMOOTH, SQUASH_KINDS, UNIT_KINDS
from . import register
from .base import INPUT_ACTIVITY, NOTHING, OUTPUT_NORM, UNIT_ACTIVITY, UNIT_SATURATION, Detector, Observation

_TINY = 1e-30
_SQUASHING = (SMOOTH, *SQUASH_KINDS)      # each kind is also its Thresholds attribute name


def chart_limits(an: AnomalyThresholds) -> tuple[Limits, Limits]:
    """The numbers of the two charts, log rms and sparsity. Their floors are the least sigma
    at which a perfectly steady layer (after BatchNorm or LayerNorm, a constant batch) alarms
    only when its rms moves `magnitude_factor` times, or its inactive share `sparsity_jump`."""
    def limits(least_shift: float) -> Limits:
        return Limits(an.smoothing, an.scale_smoothing, an.enter, an.exit, an.clip,
                      least_shift / an.enter, an.warmup)
    return limits(math.log(an.magnitude_factor)), limits(an.sparsity_jump)    # (rms: in log space)


class ActivationHistory:
    """A layer's control charts of its log rms and its sparsity: a few numbers each, whatever
    the length of the run."""

    __slots__ = ("log_rms", "sparsity")

    def __init__(self, limits: tuple[Limits, Limits] | None = None):
        rms, sparsity = limits or chart_limits(AnomalyThresholds())
        self.log_rms = ControlChart(rms)
        self.sparsity = ControlChart(sparsity)

    def add_activation(self, rms: float, sparsity: float | None) -> None:
        if math.isfinite(rms):
            self.log_rms.add(math.log(rms + _TINY))
            if sparsity is not None:
                self.sparsity.add(sparsity)


class ActivationDetector(Detector):
    """Every leaf layer's output, and the input of the outermost module."""

    signal = states.ACTIVATION

    def __init__(self, thresholds: Thresholds):
        super().__init__(thresholds)
        self._limits = chart_limits(thresholds.anomaly)     # shared by every layer's charts

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        if (not leaf and not isinstance(module, FUSED)) or isinstance(module, ECHOING):
            return NOTHING          # (containers and echoes repeat other layers' outputs)
        extra = (UNIT_ACTIVITY if kind in UNIT_KINDS else UNIT_SATURATION if kind in SQUASH_KINDS
                 else INPUT_ACTIVITY if kind == PARAM else None)
        return frozenset((OUTPUT_NORM, extra) if extra else (OUTPUT_NORM,))

    def history(self) -> ActivationHistory:
        return ActivationHistory(self._limits)

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
        # ANOMALOUS: a sudden shift of magnitude or sparsity, out of control on the layer's own
        # charts. Relative to the layer itself, so layers of any scale, BatchNorm outputs and
        # Dropout's zeros (a steady share) do not trigger it; only a jump between steps does.
        # (chart.out_of_control(v), inlined: this runs for every layer at every step)
        chart = history.log_rms
        v = math.log(rms + _TINY)
        if abs(v - chart.centre) > chart.reach:
            return "anomalous", {"rms_expected": math.exp(chart.centre), "rms_ratio":
                                 math.exp(v - chart.centre), "rms_sigmas": chart.sigmas(v)}
        chart = history.sparsity
        if inactive is not None and abs(inactive - chart.centre) > chart.reach:
            return "anomalous", {"sparsity_expected": chart.centre, "sparsity_shift":
                                 inactive - chart.centre, "sparsity_sigmas": chart.sigmas(inactive)}
        return "normal", {}

    def remember(self, x: Observation, history: ActivationHistory) -> None:
        rms, inactive = x[1], x[2]
        if math.isfinite(rms):      # add_activation, inlined: this runs per layer and step
            history.log_rms.add(math.log(rms + _TINY))
            if inactive is not None:
                history.sparsity.add(inactive)

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
