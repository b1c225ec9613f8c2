"""Per-layer, per-signal state machine: turns per-step states into debounced transitions."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Hysteresis(NamedTuple):
    """How much harder each recovery makes the next: `growth` times the healthy steps, for
    each recovery of the last `window` steps (0: of the whole run)."""
    growth: int = 1
    window: int = 0

    @classmethod
    def of(cls, thresholds, every: int = 1):
        """The recoveries remembered over the verdict's window for recurring failures."""
        return cls(thresholds.recovery_growth, thresholds.verdict.recurring_within * every)


@dataclass
class Transition:
    step: int
    previous: str | None
    state: str
    stats: dict = field(default_factory=dict)


class SignalTracker:
    """Confirms a new state once it has held for `debounce` consecutive observed steps.

    The transition is dated at the first step of that run (the onset), and carries the
    numbers of that step. Non-finite values are confirmed at once (one bad batch matters),
    and so is a healthy first observation. A layer flapping faster than `debounce` steps
    keeps its confirmed state, so the trace cannot be flooded. `urgent` confirms at once
    too (a gradient beyond the ceiling: one such update can wreck a model).

    Hysteresis: entering a state takes `debounce` steps; leaving a failure for good health
    takes `debounce` x `growth` ** (recoveries within the last `window` steps) steps. A
    layer that keeps falling back (a loss spiking again and again, a gradient at a threshold)
    needs ever longer healthy stretches to be called recovered, so its state changes a few
    times per window, not at every swing, and what it shows is the regime it is in. The
    window forgets: a loss with an outlier batch every few hundred steps recovers from each
    (blips), where counting every recovery of the run would hold it in its failure for good."""

    __slots__ = ("debounce", "ok", "growth", "window", "state", "steady", "_candidate",
                 "_since", "_count", "_stats", "_recoveries")

    def __init__(self, debounce: int, ok: str = "normal", growth: int = 1, window: int = 0):
        self.debounce = debounce
        self.ok = ok                # the signal's good-health state
        self.growth = growth
        self.window = window
        self._recoveries: list = []     # the steps of the last recoveries (bounded)
        self.state: str | None = None
        # the confirmed state while nothing is pending, else None: a step in that state
        # changes nothing (the caller need not assemble evidence, at every step of every layer)
        self.steady: str | None = None
        self._candidate: str | None = None
        self._since = 0
        self._count = 0
        self._stats: dict = {}

    def update(self, step: int, state: str, stats: dict, urgent: bool = False) -> Transition | None:
        if state == self.state:
            self._candidate = None
            self.steady = state
            return None
        self.steady = None
        if state != self._candidate:
            self._candidate, self._since, self._count, self._stats = state, step, 0, stats
        self._count += 1
        ok = state == self.ok
        immediate = urgent or state == "nonfinite" or (self.state is None and ok)
        if immediate or self._count >= (self._release(step) if ok else self.debounce):
            if ok and self.state is not None:
                self._recoveries = [*self._recoveries[-(_REMEMBERED - 1):], step]
            return self._confirm()
        return None

    def _release(self, step: int) -> int:
        """The healthy steps that confirm a recovery now."""
        if self.window:
            self._recoveries = [r for r in self._recoveries if r > step - self.window]
        return self.debounce * self.growth ** len(self._recoveries)

    def flush(self, completed: bool = False) -> Transition | None:
        """At the end of a run: a recovery the hysteresis still held back, once it has held
        `debounce` steps (no flapping is left to quiet); and at the end of a run that did not
        complete (a crash, an interrupt), a pending unhealthy state, marked unconfirmed, as
        the last thing seen."""
        if self._candidate == self.ok and self.state is not None:
            return self._confirm() if self._count >= self.debounce else None
        if self._candidate is None or completed:
            return None
        t = self._confirm()
        t.stats = {**t.stats, "unconfirmed": True}
        return t

    def _confirm(self) -> Transition:
        t = Transition(self._since, self.state, self._candidate, self._stats)
        self.state, self._candidate = self._candidate, None
        self.steady = self.state
        return t


_REMEMBERED = 8     # recoveries remembered: by then the release outlasts any run
