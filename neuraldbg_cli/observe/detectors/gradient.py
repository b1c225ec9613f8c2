"""Gradient health: vanishing, exploding or non-finite gradients of a layer's parameters."""
from __future__ import annotations

import math
from statistics import median

from ... import states
from ...thresholds import GradientThresholds, Thresholds
from ..kinds import CONTAINER, OTHER
from ..parametrized import own_parameters
from ..rolling import RollingMedian
from . import register
from .base import GRAD_NORM, NOTHING, Detector, Observation

_NEEDS = frozenset((GRAD_NORM,))


class GradientHistory:
    """A layer's recent gradient norms, bounded, and its first ones (a floor for "recent")."""

    __slots__ = ("grad", "grad_early", "_early", "_early_median", "loss_start")

    def __init__(self, window: int):
        self.grad = RollingMedian(window)
        self.grad_early: list = []
        self._early = window
        self._early_median = None
        self.loss_start = None      # the step's loss when the layer was first judged

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


class GradientDetector(Detector):
    """Every layer with parameters of its own (frozen ones too: they may be unfrozen)."""

    signal = states.GRADIENT

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        if module is None or next(own_parameters(module), None) is None:
            return NOTHING
        return _NEEDS

    def history(self) -> GradientHistory:
        return GradientHistory(self.th.anomaly.window)

    def judge(self, x: Observation, history: GradientHistory) -> tuple:
        """`model_max_grad_norm` is the largest finite layer norm of the model at that step:
        vanishing is judged relative to it (depth attenuation), exploding against a ceiling
        in the loss's scale and against the layer's own recent median."""
        norm, th = x.grad_norm, self.th
        g: GradientThresholds = th.gradient
        if not math.isfinite(norm):
            return "nonfinite", {}
        # Gradients scale with the loss: a loss summed over a batch of pixels, or regression
        # targets in the thousands, give healthy norms in the thousands. The ceiling is
        # `exploding_norm` per unit of loss (a loss under 1 counts as 1).
        loss = x.loss
        scale = loss if loss is not None and 1.0 < loss < math.inf else 1.0
        if norm > g.exploding_norm * scale:
            return "exploding", {"urgent": True, **({"loss": loss} if scale > 1.0 else {})}
        if x.kind == CONTAINER:
            # A container's own parameters (a PDE coefficient, a temperature, a position
            # table) are no layer of a stack whose depth attenuates or multiplies their
            # gradient: a coefficient's gradient, 1e-8 of the largest while the net is still
            # flat, grows 100x as the net fits its data. Only the ceiling holds for them.
            return "healthy", {}
        model_max = x.model_max_grad_norm
        # (a layer far below the model's largest gradient moves nothing much, however it grew)
        if history.grad.size >= th.anomaly.warmup and norm >= g.exploding_share * model_max:
            # the baseline is never below the early median, nor the recent one's lower
            # bound: a norm within the factor of those needs no median
            if norm > g.exploding_factor * history.early_baseline():
                bounds = history.grad.bounds()
                if bounds is None or norm > g.exploding_factor * bounds[0]:
                    base = history.grad_baseline()
                    if norm > g.exploding_factor * base:
                        return "exploding", {"grad_norm_median": base}
        if model_max <= g.vanishing_norm:
            # Every layer's gradient is zero. With a loss of exactly 0 there was none to give;
            # with any other, the loss does not depend on the weights (a softmax over one
            # unit, a dead ReLU on the only output unit, a graph cut before the loss)
            if loss is not None and math.isfinite(loss) and loss != 0:
                return "vanishing", {"all_zero": True, "loss": loss}
            return "healthy", {}
        if norm <= g.vanishing_norm:
            return "vanishing", {}
        if model_max > 0 and norm / model_max < g.vanishing_ratio:
            start = history.loss_start
            if loss is not None and start and loss <= g.fitted * start:
                # the data is fit (ReZero's 64 blocks at a loss of 1e-6): every gradient
                # fades, and how small one is beside another says nothing
                return "healthy", {}
            # What a vanishing gradient harms is the layer's learning. An adaptive optimizer
            # (Adam, RMSprop) scales a small gradient up to a full step: a U-Net's bottleneck,
            # 1e-7 of the largest gradient, still moves at 2-10% of the model's pace. A step
            # that follows a weight decay added to the gradient is no such sign.
            ratio, pace = x.update_ratio, x.facts
            if ratio is not None and pace and ratio >= g.moving_share * pace["median_update"]:
                return "healthy", {}
            return "vanishing", {"ratio_to_largest": norm / model_max}
        return "healthy", {}

    def remember(self, x: Observation, history: GradientHistory) -> None:
        history.add_gradient(x.grad_norm)
        if history.loss_start is None and x.loss is not None and 0 < x.loss < math.inf:
            history.loss_start = x.loss

    def evidence(self, x: Observation, extra: dict) -> dict:
        return {"grad_norm": x.grad_norm, "model_max_grad_norm": x.model_max_grad_norm, **extra}


def gradient_state(norm: float, model_max: float, hist: GradientHistory,
                   th: Thresholds) -> tuple[str, dict]:
    """GradientDetector's (state, extra evidence) for hand-made numbers."""
    x = Observation(OTHER, grad_norm=norm, model_max_grad_norm=model_max)
    return GradientDetector(th).judge(x, hist)


register(GradientDetector)
