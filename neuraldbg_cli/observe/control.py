"""A control chart on one number of one layer (its log rms, or its share of inactive units):
is this step's value out of control, given the layer's own past?

Why an EWMA chart, and why this one. A training run's numbers are not stationary: a layer's
rms drifts as it learns, so a chart against a fixed target (Shewhart's, or CUSUM, which adds up
small deviations from a target precisely to catch slow persistent ones) would alarm on
learning itself. What `anomalous` means is an abrupt shift between steps. So the chart's
centre follows the layer (an exponentially weighted moving average: the moving-centreline
EWMA of SPC for non-stationary processes), and each value is judged by its distance from the
centre, in units of the layer's own usual step-to-step scatter (an EWMA of the absolute
deviation). A steady trend is followed: it lags the centre by a constant amount, which the
scale learns, so it never alarms; a jump is judged at the step it happens. The update is a
handful of float operations and four numbers per chart, cheaper than a rolling median.
"""
from __future__ import annotations

import math

# For a Gaussian, E|x - mean| = sigma * sqrt(2 / pi): the scale, an EWMA of absolute
# deviations (robust, no square root per step), is read in standard deviations.
_TO_SIGMA = math.sqrt(math.pi / 2)


class Limits:
    """One signal's chart numbers, shared by that signal's chart of every layer."""

    __slots__ = ("smoothing", "scale_smoothing", "enter", "exit", "clip", "floor", "warmup")

    def __init__(self, smoothing: float, scale_smoothing: float, enter: float, exit: float,
                 clip: float, floor: float, warmup: int):
        self.smoothing = smoothing  # weight of a new value in the centre
        # ... and of its deviation in the scale: slower, as a noisy estimate of sigma fattens
        # the tails of the deviations judged (Gaussian values beyond 5 sigmas, simulated: 7.6e-5
        # of the steps at 0.1, 1.3e-5 at 0.05, against 5.7e-7 for a sigma known exactly)
        self.scale_smoothing = scale_smoothing
        self.enter = enter          # |deviation| in sigmas beyond which a value is out of control
        self.exit = exit            # ... and within which it is back in (exit < enter: hysteresis)
        self.clip = clip            # a deviation feeds the centre and the scale clipped at this
        self.floor = floor          # least sigma: a perfectly steady layer still needs a large jump
        self.warmup = warmup        # values seen before any is judged


class ControlChart:
    """centre: EWMA of the values; spread: EWMA of |value - centre|; sigma: the spread in
    standard deviations, never below the floor; out: the chart's state; reach: how far from
    the centre the next value may lie and be in control (infinite during the warm-up).

    `out_of_control(v)` is pure (what the detector's judge asks); `add(v)` moves the chart
    (its remember) and sets `out` with the same test, so both agree: to go out of control
    a value must be beyond `enter` sigmas, to come back one must be within `exit`. The
    reach is kept ready, so that judging a value is one subtraction and one comparison.

    Robustness: each deviation is clipped at `clip` sigmas before it moves the centre or the
    scale. An outlier moves the centre by at most smoothing x clip sigmas and inflates the
    scale by a bounded share (so one bad batch neither drags the chart nor blinds it for
    long), while a lasting new level is still learnt: the clipped steps walk the centre to it
    and widen the scale, and the chart comes back in control within a few dozen steps."""

    __slots__ = ("limits", "centre", "spread", "sigma", "reach", "n", "out")

    def __init__(self, limits: Limits):
        self.limits = limits
        self.centre = 0.0
        self.spread = 0.0
        self.sigma = limits.floor
        self.reach = math.inf
        self.n = 0                  # values added, counted to the end of the warm-up
        self.out = False

    def out_of_control(self, value: float) -> bool:
        """Whether `value` is (or keeps the chart) out of control; False during the warm-up."""
        return abs(value - self.centre) > self.reach

    def sigmas(self, value: float) -> float:
        """value's signed distance from the centre, in sigmas."""
        return (value - self.centre) / self.sigma

    def add(self, value: float) -> None:
        lim = self.limits
        if self.n < lim.warmup:
            self._warm_up(value)
            return
        d, r = value - self.centre, self.reach
        out = self.out = d > r or d < -r            # the test out_of_control makes
        c = lim.clip * self.sigma
        if d > c:
            d = c
        elif d < -c:
            d = -c
        self.centre += lim.smoothing * d
        spread = self.spread = self.spread + lim.scale_smoothing * ((d if d > 0 else -d) - self.spread)
        sigma = spread * _TO_SIGMA
        sigma = self.sigma = sigma if sigma > lim.floor else lim.floor
        self.reach = (lim.exit if out else lim.enter) * sigma

    def _warm_up(self, value: float) -> None:
        """The first values, not judged: the plain mean of the values and of the deviations so
        far (not an average that starts biased to the first ones), then the reach."""
        lim, n = self.limits, self.n + 1
        self.n = n
        if n == 1:
            self.centre = value
        else:
            d = value - self.centre
            self.centre += max(lim.smoothing, 1 / n) * d
            self.spread += max(lim.scale_smoothing, 1 / (n - 1)) * (abs(d) - self.spread)
            self.sigma = max(self.spread * _TO_SIGMA, lim.floor)
        if n == lim.warmup:
            self.reach = lim.enter * self.sigma
