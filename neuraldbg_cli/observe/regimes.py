"""Classify one layer's numbers for one step into an activation regime and a gradient health.

Pure functions of plain numbers (no torch): the monitor reduces tensors to these numbers on the
device, and these functions decide, so every rule here is testable on hand-made values.
"""
from __future__ import annotations

import math
from statistics import median

from ..thresholds import GradientThresholds, Thresholds

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
    """The last `window` values (a ring) and their median, known within bounds at little
    cost: this runs for every layer at every step.

    Sorting is kept for when it matters. `median()` sorts the window and keeps the sorted
    copy; once the window is full, each new value moves every rank of it by at most one, so
    after j more values the median lies between the copy's ranks h-j and h+j (`bounds`). A
    test that holds for every value between the bounds holds for the median; only when the
    bounds cannot decide is the window sorted again."""

    __slots__ = ("_ring", "_window", "_next", "_sorted", "_since", "size")

    def __init__(self, window: int):
        self._ring: list = []          # the values in arrival order, overwritten in a circle
        self._window = window
        self._next = 0                 # where the next value goes once the ring is full
        self._sorted = None            # the full window, sorted, `_since` values ago
        self._since = 0
        self.size = 0

    def append(self, value: float) -> None:
        ring = self._ring
        if self.size == self._window:
            i = self._next
            ring[i] = value
            self._next = (i + 1) % self._window
            self._since += 1
        else:                          # still filling: ranks move by more than one
            ring.append(value)
            self.size += 1
            self._sorted = None

    def median(self) -> float:
        s = self._sorted = sorted(self._ring)
        self._since = 0
        n = len(s)
        h = n >> 1
        return s[h] if n & 1 else (s[h - 1] + s[h]) * 0.5

    def bounds(self) -> tuple | None:
        """(low, high) between which the median surely lies, or None when unknown."""
        s, j, n = self._sorted, self._since, self.size
        if s is None or n != self._window:
            return None
        h = n >> 1
        low, high = h - j - 1 + (n & 1), h + j
        return (s[low], s[high]) if low >= 0 and high < n else None

    def near(self, value: float, distance: float) -> bool:
        """True when `value` is surely within `distance` of the median (a hair inside, for
        the rounding of these sums); False when telling takes the median itself."""
        b = self.bounds()
        if b is None:
            return False
        d = distance * _HAIR
        return b[1] - d <= value <= b[0] + d


_HAIR = 1 - 1e-9


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

    def early_baseline(self) -> float:
        """The median of the layer's first gradient norms."""
        early = self._early_median
        if early is None:
            early = median(self.grad_early)
            if len(self.grad_early) == self._early:
                self._early_median = early      # complete: it will not change again
        return early

    def grad_baseline(self) -> float:
        """The layer's usual gradient norm: its recent median, but never below the median of
        its first steps (a model that has fit its data has tiny gradients; new data brings
        back ordinary ones, which are not an explosion)."""
        return max(self.grad.median(), self.early_baseline())


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
        x, limit = math.log(rms + _TINY), an.log_magnitude
        if not recent.near(x, limit):
            med = recent.median()
            if abs(x - med) > limit:
                return "anomalous", {"rms_median": math.exp(med), "rms_ratio": math.exp(x - med)}
        sp, jump = hist.sparsity, an.sparsity_jump
        if inactive is not None and sp.size >= an.warmup and not sp.near(inactive, jump):
            med = sp.median()
            if abs(inactive - med) > jump:
                return "anomalous", {"sparsity_median": med, "sparsity_shift": inactive - med}
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
        # the baseline is never below the early median, nor the recent one's lower bound:
        # a norm within the factor of those needs no median
        if norm > g.exploding_factor * hist.early_baseline():
            bounds = hist.grad.bounds()
            if bounds is None or norm > g.exploding_factor * bounds[0]:
                base = hist.grad_baseline()
                if norm > g.exploding_factor * base:
                    return "exploding", {"grad_norm_median": base}
    if norm <= g.vanishing_norm:
        return "vanishing", {}
    if model_max > 0 and norm / model_max < g.vanishing_ratio:
        return "vanishing", {"ratio_to_largest": norm / model_max}
    return "healthy", {}
