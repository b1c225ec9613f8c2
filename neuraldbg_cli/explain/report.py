"""Rich rendering of an explanation: run line, ranked hypotheses, layer x step timeline."""
from __future__ import annotations

import math

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

SHOWN = 5           # origins shown in full; the rest get one line each (all are in --json)
MAX_ROWS = 30       # timeline rows; beyond that the report says how many were left out
LIKELY = 0.5        # below this a hypothesis is a weak signal, not an answer

# Letters, so the timeline reads without colour too.
CELL = {"nonfinite": "N", "exploding": "E", "dead": "D", "vanishing": "V", "saturated": "S",
        "anomalous": "A"}
WORST_FIRST = ("nonfinite", "exploding", "dead", "vanishing", "saturated", "anomalous")

THEME = Theme({
    "state.nonfinite": "bold magenta", "state.exploding": "bold yellow",
    "state.dead": "bold red", "state.vanishing": "bold blue", "state.saturated": "cyan",
    "state.anomalous": "yellow", "state.healthy": "green dim", "muted": "dim",
    "title": "bold", "cause": "bold cyan", "fix": "green", "rank": "bold",
})


def render(analysis) -> Group:
    """The whole report, one renderable for Console.print."""
    origins = [h for h in analysis.hypotheses if h.origin is None]
    parts = [run_line(analysis.runs), Text(), *hypotheses(origins, multi=len(analysis.runs) > 1)]
    if analysis.episodes:
        parts += [Text(), Timeline(analysis)]
    return Group(*parts)


def run_line(runs) -> Text:
    """One line on the run: script, ranks, steps, status, exit."""
    steps = max((r.steps for r in runs if r.steps is not None), default=None)
    text = Text(runs[0].script, style="title")
    for bit in (_ranks(runs), f"{steps} steps" if steps is not None else "steps unknown",
                _status(runs)):
        if bit:
            text.append(f" | {bit}")
    return text


def _ranks(runs) -> str:
    if len(runs) == 1 and runs[0].world_size == 1:
        return ""
    which = "ranks " * (len(runs) > 1) or "rank "
    return f"{which}{', '.join(str(r.rank) for r in runs)} of {runs[0].world_size}"


def _status(runs) -> str:
    said = {(r.status, r.exit_code, r.error) for r in runs}
    if len(said) > 1:
        return "; ".join(f"rank {r.rank} {_one_status(r)}" for r in runs)
    return _one_status(runs[0])


def _one_status(run) -> str:
    if run.status is None:
        return "no run_end (killed?)"
    code = f" (exit {run.exit_code})" if run.exit_code is not None else ""
    return f"{run.status}{code}" + (f": {run.error}" if run.error else "")


def hypotheses(origins, multi: bool = False) -> list:
    likely = [h for h in origins if h.confidence >= LIKELY]
    if not origins:
        return [Text("No failure found: every layer stayed normal and every gradient healthy.",
                     style="state.healthy")]
    out = [Text("Hypotheses, most likely first" if likely else
                "No likely failure (nothing with confidence >= 0.5); weak signals:", style="title")]
    for n, h in enumerate(origins[:SHOWN]):
        out += [Text()] * (n > 0) + [hypothesis(h, multi)]
    for h in origins[SHOWN:SHOWN * 2]:
        out.append(Text(f"#{h.rank} {h.symptom} {h.signal} in {h.layer} at step {h.step} "
                        f"({h.cause}, confidence {h.confidence:.2f})", style="muted"))
    if len(origins) > SHOWN * 2:
        out.append(Text(f"... and {len(origins) - SHOWN * 2} more (see --json)", style="muted"))
    return out


def hypothesis(h, multi: bool = False) -> Group:
    """One origin: headline, summary, evidence, fix."""
    head = Text(f"#{h.rank} ", style="rank")
    head.append(h.symptom, style=f"state.{h.symptom}")
    where = h.layer if h.module_type == "input" else f"{h.layer} ({h.module_type})"
    head.append(f" {h.signal} in {where} at step {h.step}")
    head.append(f" on rank {h.process_rank}" if multi else "")
    head.append(" | cause ")
    head.append(h.cause, style="cause")
    head.append(f" | confidence {h.confidence:.2f}")
    body = Table.grid(padding=(0, 1))
    body.add_column(width=3, no_wrap=True)
    body.add_column()
    body.add_row("", Text(h.summary))
    for e in h.evidence:
        body.add_row(Text("-", style="muted"), Text(e, style="muted"))
    body.add_row(Text("fix", style="fix"), Text(h.fix))
    if h.alternatives:
        body.add_row("", Text(f"also consistent with: {', '.join(h.alternatives)}", style="muted"))
    return Group(head, Padding(body, (0, 0, 0, 1), expand=False))


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
        for label, eps, first, mark in _pick(rows):
            line = Text(_fit(label, label_w).ljust(label_w) + " ")
            for c in range(cols):
                state = _cell(eps, first, c * per, (c + 1) * per)
                line.append(CELL.get(state, state), style=f"state.{_key(state)}")
            yield line.append(mark, style="rank")
        if len(rows) > MAX_ROWS:
            yield Text(f"... {len(rows) - MAX_ROWS} more rows (see --json)", style="muted")
        yield Text("legend: " + ", ".join(f"{CELL[s]} {s}" for s in WORST_FIRST)
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
                marks.setdefault((h.process_rank, h.layer, h.signal), f" <- #{h.rank}")
        first: dict = {}
        for run, r in enumerate(a.runs):
            for t in r.transitions:     # sorted by step: the first one seen is the earliest
                first.setdefault((run, t["layer"], t["signal"]), t["step"])
        out = []
        for (run, layer, signal), eps in sorted(tracks.items(), key=lambda kv: _row_key(kv, a)):
            r = a.runs[run]
            label = (f"r{r.rank} " if multi else "") + f"{layer} {'act' if signal == 'activation' else 'grad'}"
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


def _row_key(item, analysis) -> tuple:
    (run, layer, signal), _ = item
    return run, analysis.order.get(layer, 0), signal != "activation"


def _cell(eps, first, lo, hi) -> str:
    """The worst state held during steps [lo, hi); '.' healthy, ' ' before first seen."""
    held = {e.state for e in eps if e.onset < hi and (e.end is None or e.end > lo)}
    worst = next((s for s in WORST_FIRST if s in held), None)
    return worst or ("." if hi > first else " ")


def _key(state: str) -> str:
    return "healthy" if state in (".", " ") else state


def _axis(cols: int, per: int) -> str:
    """Step numbers every ten columns."""
    line = [" "] * cols
    for c in range(0, cols, 10):
        label = str(c * per)
        if c + len(label) <= cols:
            line[c:c + len(label)] = label
    return "".join(line)
