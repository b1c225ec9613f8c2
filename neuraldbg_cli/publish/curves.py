"""Each layer's summary curves in a trace, bounded whatever the length of the run, and the
numbers as the report embeds them (JSON has no NaN). Torch-free."""
from __future__ import annotations

from ..inert import inert

MAX_POINTS = 1000       # per layer curve and run: more is not visible, and costs load time
MAX_STAT_KEYS = 12      # numbers kept per summary (a summary holds at most 6 today)
NONFINITE = ("nan", "inf", "-inf")      # how the trace writes them (JSON has no NaN)

class Curve:
    """One layer's summaries in one run, bounded: past MAX_POINTS every other point is dropped
    and only every 2nd (4th, ...) one after is kept, so the points stay evenly spread over the
    run whatever its length; the last summary is always kept (where a crashed run ended)."""

    __slots__ = ("steps", "rows", "stride", "seen", "last")

    def __init__(self):
        self.steps, self.rows = [], []
        self.stride, self.seen, self.last = 1, 0, None

    def add(self, step: int, stats: dict) -> None:
        if self.seen % self.stride == 0:
            self.steps.append(step)
            self.rows.append(stats)
            if len(self.steps) > MAX_POINTS:
                self.steps, self.rows = self.steps[::2], self.rows[::2]
                self.stride *= 2
        self.last = (step, stats)
        self.seen += 1

    def columns(self, most: int = MAX_POINTS) -> dict | None:
        """{"steps": [...], "stats": {name: [value or null, ...]}}, in step order, at most
        about `most` points (every k-th, and the last); None when no summary held a number.
        Values are cleaned here, for the points kept only."""
        every = -(-len(self.steps) // most)
        points = list(zip(self.steps[::every], self.rows[::every]))
        if self.last is not None and self.last[0] > points[-1][0]:
            points.append(self.last)
        points.sort(key=lambda p: p[0])     # a hand-made trace may not be in step order
        points = [(s, row) for s, row in ((s, clean(row)) for s, row in points) if row]
        if not points:
            return None
        keys = list(dict.fromkeys(k for _, row in points for k in row))[:MAX_STAT_KEYS]
        return {"steps": [s for s, _ in points],
                "stats": {inert(k): [row.get(k) for _, row in points] for k in keys}}


class Curves:
    """The summaries of one trace, per layer, taken from the events as they go by."""

    def __init__(self):
        self.layers: dict = {}
        self.skipped = 0
        self.last = 0           # the largest summary step: a crashed run's curves go past its end

    def tap(self, events):
        """The events, unchanged, keeping the summaries on the way. Summaries are not checked by
        the reader (trace_shapes): a malformed one is skipped here. (Hot: one turn per line of
        the trace, hence exact type checks and no call per event.)"""
        layers = self.layers
        for e in events:
            if e.get("event") == "summary":
                step, layer, stats = e.get("step"), e.get("layer"), e.get("stats")
                if type(step) is not int or step < 0 or type(layer) is not str or type(stats) is not dict:
                    self.skipped += 1
                else:
                    if len(stats) > MAX_STAT_KEYS:
                        stats = dict(list(stats.items())[:MAX_STAT_KEYS])
                    if step > self.last:
                        self.last = step
                    curve = layers.get(layer)
                    if curve is None:
                        curve = layers[layer] = Curve()
                    curve.add(step, stats)
            yield e

    def notes(self) -> list:
        return [f"{self.skipped} malformed summary events skipped"] if self.skipped else []


def clean(stats: dict) -> dict:
    return {k: n for k, v in stats.items() if (n := number(v)) is not None}


def number(v):
    """A summary value as embedded, or None (skipped): numbers as the trace has them (the
    monitor writes 4 significant digits; the count of points bounds the rest), NaN and
    infinities as the trace's strings. Called for every point kept: the common case first."""
    t = type(v)
    if t is float:
        if v - v == 0.0:        # finite (NaN - NaN and inf - inf are NaN)
            return v
        return "nan" if v != v else "inf" if v > 0 else "-inf"
    if t is int:
        if -_EXACT < v < _EXACT:
            return v
        try:
            return float(v)
        except OverflowError:   # past float range too
            return "inf" if v > 0 else "-inf"
    if t is str:
        return v if v in NONFINITE else None
    return None     # bool, null, lists, objects


_EXACT = 1 << 53    # ints past this are not exact in JavaScript: embedded as floats
