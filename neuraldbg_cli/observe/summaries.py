"""Curves for the report: at some steps, each layer's numbers as its detectors judged them.

Transitions say when a state changed; a picture of the run also needs how the numbers moved
before and after. A `summary` event per layer is written at one step in `every` for the first
`points` summaries, then half as often each time the run doubles in length: a 1k-step run gets
100 points per layer, a 100k-step run about 430, a 1M-step run about 600. The loss, one number
a step, follows the same plan from one step in `loss_every` (1: every step of the first 100)."""
from __future__ import annotations

import math

# The Observation fields a summary keeps, under the names the trace gives them.
OUTPUT_FIELDS = ("rms", "inactive", "input_dead", "saturated")


class SummaryClock:
    """Which steps get a summary: multiples of an interval that doubles as the run grows."""

    def __init__(self, every: int, points: int):
        self.interval = every
        self.points = points
        self.next = 0

    def due(self, step: int) -> bool:
        """Is `step` summarised? Asked once per observed step, in step order."""
        if step < self.next:
            return False
        while step >= self.interval * self.points:
            self.interval *= 2
        self.next = (step // self.interval + 1) * self.interval
        return True


class Summary:
    """One step's numbers, gathered per layer record as the step is judged."""

    __slots__ = ("step", "layers")

    def __init__(self, step: int):
        self.step = step
        self.layers: dict = {}          # layer record -> {name: number}

    def add(self, rec, key: str, value) -> None:
        if value is not None:
            self.layers.setdefault(rec, {})[key] = value

    def add_output(self, rec, x) -> None:
        stats = self.layers.setdefault(rec, {})
        for key in OUTPUT_FIELDS:
            value = getattr(x, key)
            if value is not None:
                stats[key] = value

    def events(self, name_of) -> list:
        """The summary events, one per layer that had numbers (`name_of`: record -> name)."""
        return [{"event": "summary", "step": self.step, "layer": name_of(rec),
                 "stats": {k: _short(v) for k, v in stats.items()}}
                for rec, stats in self.layers.items() if stats]


def _short(value):
    """4 significant digits: a curve, not a measurement to repeat (keeps the trace small)."""
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.4g}")
    return value
