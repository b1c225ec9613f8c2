"""The timeline: layers x steps, one letter per column, the worst state held in it."""
from __future__ import annotations

import math

from rich.text import Text

from .. import states
from ..inert import inert

MAX_ROWS = 30       # timeline rows; beyond that the report says how many were left out


class Timeline:
    """Layers x steps, one letter per column: which layer changed state when."""

    def __init__(self, analysis):
        self.analysis = analysis

    def __rich_console__(self, console, options):
        rows = self.rows()
        last = max(r.last_step for r in self.analysis.runs)
        label_w = min(max(len(label) for label, _, _, _ in rows), 28)
        room = max(10, options.max_width - label_w - 8)
        per = max(1, math.ceil((last + 1) / room))
        cols = math.ceil((last + 1) / per)
        scale = f"1 column = {per} steps" if per > 1 else "1 column = 1 step"
        yield Text(f"Timeline: steps 0-{last}, {scale}", style="title")
        yield Text(" " * (label_w + 1) + _axis(cols, per))
        worst = states.worst_first()
        picked = _pick(rows)
        for label, eps, first, mark in picked:
            line = Text(_fit(label, label_w).ljust(label_w) + " ")
            ok = _ok_style(eps[0].signal)
            for c in range(cols):
                state = _cell(eps, first, c * per, (c + 1) * per, worst)
                if state in (".", " "):
                    line.append(state, style=ok)
                else:
                    line.append(states.named(state).letter, style=f"state.{state}")
            yield line.append(mark, style="position")
        if len(rows) > MAX_ROWS:
            yield Text(f"... {len(rows) - MAX_ROWS} more rows (see --json)", style="muted")
        # (only the states the rows show: the vocabulary has grown past one line)
        shown = {ep.state for _, eps, _, _ in picked for ep in eps}
        yield Text("legend: " + ", ".join(f"{states.named(s).letter} {s}" for s in worst
                                          if s in shown)
                   + ", . healthy, blank not yet seen", style="muted")

    def rows(self) -> list:
        """(label, episodes, first observed step, origin mark) per layer and signal that failed."""
        a, multi = self.analysis, len(self.analysis.runs) > 1
        tracks: dict = {}
        for ep in a.episodes:
            tracks.setdefault((ep.run, ep.layer, ep.signal), []).append(ep)
        marks = {}
        for h in a.hypotheses:
            if h.origin is None:
                marks.setdefault((h.process_rank, h.layer, h.signal), f" <- #{h.position}")
        first = {(run, layer, signal): track.first for run, r in enumerate(a.runs)
                 for (layer, signal), track in r.tracks.items()}
        out = []
        for (run, layer, signal), eps in sorted(tracks.items(), key=lambda kv: _row_key(kv, a)):
            r = a.runs[run]
            label = (f"r{r.rank} " if multi else "") + f"{inert(layer)} {_short(signal)}"
            out.append((label, eps, first[run, layer, signal], marks.get((r.rank, layer, signal), "")))
        return out


def _pick(rows: list) -> list:
    """At most MAX_ROWS rows, in order: those of the origins first, then the earliest to fail."""
    if len(rows) <= MAX_ROWS:
        return rows
    order = sorted(range(len(rows)), key=lambda i: (not rows[i][3], min(e.onset for e in rows[i][1])))
    keep = set(order[:MAX_ROWS])
    return [row for i, row in enumerate(rows) if i in keep]


def _fit(label: str, width: int) -> str:
    """Long layer names keep their end, which tells layers apart."""
    return label if len(label) <= width else "…" + label[-(width - 1):]


def _short(signal: str) -> str:
    known = states.SIGNALS.get(signal)
    return known.label if known is not None else signal


def _ok_style(signal: str) -> str:
    """Healthy cells in the style of the signal's good-health state."""
    known = states.SIGNALS.get(signal)
    return f"state.{known.ok if known is not None else 'healthy'}"


def _row_key(item, analysis) -> tuple:
    """By run, forward position, then signal in registry order (activation, gradient, ...)."""
    (run, layer, signal), _ = item
    signals = list(states.SIGNALS)
    return (run, analysis.order.get(layer, 0),
            signals.index(signal) if signal in signals else len(signals))


def _cell(eps, first, lo, hi, worst_first: tuple) -> str:
    """The worst state held during steps [lo, hi); '.' healthy, ' ' before first seen."""
    held = {e.state for e in eps if e.onset < hi and (e.end is None or e.end > lo)}
    worst = next((s for s in worst_first if s in held), None)
    return worst or ("." if hi > first else " ")


def _axis(cols: int, per: int) -> str:
    """Step numbers every ten columns."""
    line = [" "] * cols
    for c in range(0, cols, 10):
        label = str(c * per)
        if c + len(label) <= cols:
            line[c:c + len(label)] = label
    return "".join(line)
