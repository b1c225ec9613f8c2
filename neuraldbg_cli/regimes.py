"""Classify one layer's numbers for one step into an activation regime and a gradient health.

Pure functions of plain numbers (no torch): the monitor reduces tensors to these numbers on the
device, and these functions decide, so every rule here is testable on hand-made values.
"""
from __future__ import annotations

import math
from bisect import bisect_left, insort
from statistics import median

from .thresholds import GradientThresholds, Thresholds

# Activation kinds: how a layer's output is judged.
RELU = "relu"          # ReLU, ReLU6: dies (units output exactly zero)
SMOOTH = "smooth"      # GELU, SiLU, Mish: stuck in the flat negative tail
SIGMOID = "sigmoid"    # saturates near 0 and near 1
TANH = "tanh"          # saturates near -1 and +1
PARAM = "param"        # Linear / conv: their input is checked for dead units (F.relu upstream)
OTHER = "other"        # everything else: non-finite values and sudden shifts only
INPUT = "input"        # the outermost module's input

_TINY = 1e-30
_SQUASHING = (SMOOTH, SIGMOID, TANH)      # each kind is also its Thresholds attribute name


class RollingMedian:
    """The last `window` values and their median, kept sorted as they come: a step costs a
    bisect, not a sort of the window (this runs for every layer at every step). `size` and
    `median` are plain attributes, kept up to date by `append`, for the same reason."""

    __slots__ = ("_ring", "_sorted", "_window", "_next", "size", "median")

    def __init__(self, window: int):
        self._ring: list = []          # the values in arrival order, overwritten in a circle
        self._sorted: list = []
        self._window = window
        self._next = 0                 # where the next value goes once the ring is full
        self.size = 0
        self.median = math.nan

    def append(self, value: float) -> None:
        s, ring = self._sorted, self._ring
        n = self.size
        if n == self._window:
            i = self._next
            del s[bisect_left(s, ring[i])]
            ring[i] = value
            self._next = i + 1 if i + 1 < n else 0
        else:
            ring.append(value)
            n = self.size = n + 1
        insort(s, value)
        h = n >> 1
        self.median = s[h] if n & 1 else (s[h - 1] + s[h]) * 0.5


class History:
    """A layer's recent numbers, bounded: memory does not grow with the number of steps."""

    __slots__ = ("log_rms", "sparsity", "grad", "grad_early", "_early", "_early_median")

    def __init__(self, window: int):
        self.log_rms = RollingMedian(window)
        self.sparsity = RollingMedian(window)
        self.grad = RollingMedian(window)
        self.grad_early: list = []         # the first norms, kept: a floor for "recent"
        self._early = window
        self._early_median = None

    def add_activation(self, rms: float, sparsity: float | None) -> None:
        if math.isfinite(rms):
            self.log_rms.append(math.log(rms + _TINY))
            if sparsity is not None:
                self.sparsity.append(sparsity)

    def add_gradient(self, norm: float) -> None:
        if math.isfinite(norm) and norm > 0:
            self.grad.append(norm)
            if len(self.grad_early) < self._early:
                self.grad_early.append(norm)

    def grad_baseline(self) -> float:
        """The layer's usual gradient norm: its recent median, but never below the median of
        its first steps (a model that has fit its data has tiny gradients; new data brings
        back ordinary ones, which are not an explosion)."""
        early = self._early_median
        if early is None:
            early = median(self.grad_early)
            if len(self.grad_early) == self._early:
                self._early_median = early      # complete: it will not change again
        return max(self.grad.median, early)


def activation_state(kind: str, rms: float, hist: History, th: Thresholds, inactive: float | None = None,
                     saturated: float | None = None, input_dead: float | None = None) -> tuple[str, dict]:
    """(state, extra evidence) for one layer's activation numbers at one step.

    rms: root mean square of the output (NaN or infinite: non-finite values); where measured,
    inactive: share of units inactive for the whole step (ReLU: zero; smooth kinds: in the
    flat tail), also the layer's sparsity; saturated: share of sigmoid/tanh units saturated;
    input_dead: share of input units zero for the whole step (Linear/conv)."""
    if not math.isfinite(rms):
        return "nonfinite", {}
    if inactive is not None:
        if kind == RELU and inactive >= th.relu.dead_ratio:
            return "dead", {}
        if kind == SMOOTH and inactive >= th.smooth.saturated_ratio:
            return "saturated", {}
    if input_dead is not None and input_dead >= th.input.dead_ratio:
        return "dead", {"observed": "input"}
    if saturated is not None and kind in _SQUASHING and saturated >= getattr(th, kind).saturated_ratio:
        return "saturated", {}
    # ANOMALOUS: a sudden shift of magnitude or sparsity against the layer's own recent
    # median. Relative to the layer itself, so layers of any scale, BatchNorm outputs and
    # Dropout's zeros (a steady share) do not trigger it; only a jump between steps does.
    an, recent = th.anomaly, hist.log_rms
    if recent.size >= an.warmup:
        shift = math.log(rms + _TINY) - recent.median
        if abs(shift) > an.log_magnitude:
            return "anomalous", {"rms_median": math.exp(recent.median), "rms_ratio": math.exp(shift)}
        sp = hist.sparsity
        if inactive is not None and sp.size >= an.warmup and abs(inactive - sp.median) > an.sparsity_jump:
            return "anomalous", {"sparsity_median": sp.median, "sparsity_shift": inactive - sp.median}
    return "normal", {}


def gradient_state(norm: float, model_max: float, hist: History, th: Thresholds) -> tuple[str, dict]:
    """(state, extra evidence) for one layer's parameter-gradient norm at one optimizer step.

    `model_max` is the largest finite layer norm of the model at that step: vanishing is
    judged relative to it (depth attenuation), exploding against an absolute ceiling and
    against the layer's own recent median."""
    g: GradientThresholds = th.gradient
    if not math.isfinite(norm):
        return "nonfinite", {}
    if norm > g.exploding_norm:
        return "exploding", {"urgent": True}
    if hist.grad.size >= th.anomaly.warmup:
        base = hist.grad_baseline()
        if norm > g.exploding_factor * base:
            return "exploding", {"grad_norm_median": base}
    if norm <= g.vanishing_norm:
        return "vanishing", {}
    if model_max > 0 and norm / model_max < g.vanishing_ratio:
        return "vanishing", {"ratio_to_largest": norm / model_max}
    return "healthy", {}
