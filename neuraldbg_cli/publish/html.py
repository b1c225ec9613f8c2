"""`neuraldbg report`: one self-contained HTML file of an explanation, readable offline.

The page is the verdict and the ranked hypotheses as `explain` prints them, a layer x step
timeline of states (the ranks of a distributed run as lanes), the loss curve and each layer's
summary numbers with its transitions marked. Python gathers the data here (bounded: a long
run costs what a short one does, give or take; the curves in curves.py), page.py embeds it
in the page and writes the file, report.js draws it on canvases.

A trace is data from elsewhere: every string in it reaches the page only as JSON inside
`<script type="application/json">` (with `<`, `>` and `&` escaped, so no string can close the
element), and report.js inserts it with textContent. A Content-Security-Policy that allows
only this page's own script (by hash) and no network backs that up (page.py). Torch-free."""
from __future__ import annotations

import os

from .. import __version__, states
from ..errors import InputError
from ..explain import report as text_report
from ..explain.analysis import analyze
from ..explain.hypothesis import to_dict
from ..explain.runs import mixed
from ..inert import inert
from ..trace import LOSS_LAYER, PSEUDO_LAYERS, iter_events, open_trace
from .curves import MAX_POINTS, MAX_STAT_KEYS, Curves, number
from .page import check_output, render, write
from .report_colors import css_color

FORMAT = 1              # of the embedded JSON document (report.js reads `format`)
TOTAL_POINTS = 500_000  # over all curves: a model of thousands of layers gets fewer per layer
MIN_POINTS = 100        # (but never fewer than this)
MAX_STAT_TEXT = 80      # characters of a string value in a transition's stats
MAX_ORIGINS = 200       # hypotheses embedded in full; the rest are counted (explain --json has all)
MAX_CONSEQUENCES = 50   # per origin


def write_report(traces: list[str], output: str) -> None:
    """Read the traces (the ranks of one run), explain them, write the HTML file `output`.
    Bad input raises InputError (one line, exit 2); the output is checked first, so a typo
    in -o does not cost a read of a large trace."""
    if not traces:
        raise InputError("report: give at least one trace")
    check_output(output, traces)
    for path in traces:     # the first event of each: not found / not a trace, before the slow pass
        events = iter_events(path, [])
        try:
            next(events, None)
        finally:
            events.close()
    page = render(build(traces, output))
    write(output, page)


def build(paths: list[str], output: str | None = None) -> dict:
    """The document report.js draws (format 1). Every string in it that came from a trace has
    been through `inert`; numbers are JSON numbers, or "nan"/"inf"/"-inf" as in the trace.

    format, version; title (the script), run_line and heading (as explain prints them),
    verdict ("likely", "weak" or "none"), warnings (the reader's, and traces that do not look
    like one run); runs [{path, rank, world_size, status, last_step}] in the order given (a
    lane's `run` indexes it), multi (several runs), last_step (of the x axes);
    states {name: {color "#rrggbb", letter, failure, ok, verb, rank (higher is shown on
    top)}} for every registered state; signals {name: {label, ok}};
    hypotheses: the origins best first, each explain --json's keys (`rank` is the position)
    plus where ("net.3 (ReLU)"), on_rank (null unless multi), layer_index (into layers),
    consequences (the same keys, without their own) and more_consequences; more_hypotheses;
    layers in forward order: {name, type, pseudo, failed [states], lanes: [{run, spans:
    [[start, end (exclusive), signal, state, {stats}]], folded {signal: count}, curve: null
    or {steps: index into step_sets, stats: {name: [value or null per step]}}}]};
    curve_order: indices into layers, the order of the curve cards; loss: the index of the
    (loss) layer when it has a curve, else null; step_sets: the curves' step lists;
    stop_lines: [{text, href}], the captures (href: the file) and the stops (href null)."""
    traces = [open_trace(p) for p in paths]
    curves = [Curves() for _ in paths]
    for trace, sink in zip(traces, curves):
        # One pass: analyze consumes the events and the summaries are picked off on the way,
        # so a 100k-step trace is parsed once, not twice.
        trace.events = sink.tap(trace.events)
    analysis = analyze(traces)
    runs = analysis.runs
    notes = text_report.unobserved(runs) + [w for t in traces for w in t.warnings] + mixed(runs)
    notes += [n for c in curves for n in c.notes()]
    last = max([r.last_step for r in runs] + [c.last for c in curves])
    origins = [h for h in analysis.hypotheses if h.origin is None]
    layers = _layers(analysis, curves)
    index = {layer["key"]: n for n, layer in enumerate(layers)}
    step_sets = _step_sets(layers)
    multi = len(runs) > 1
    return {
        "format": FORMAT, "version": __version__,
        "title": inert(runs[0].script),
        "run_line": text_report.run_line(runs).plain,
        # the heading `explain` prints (its wording and its 0.5 threshold, kept in one place)
        "heading": text_report.hypotheses(origins, runs=runs)[0].plain,
        "verdict": "none" if not origins else "likely" if origins[0].confidence >= text_report.LIKELY
        else "weak",
        "warnings": [inert(w) for w in notes],
        "runs": [{"path": inert(r.path), "rank": r.rank, "world_size": r.world_size,
                  "status": inert(r.status or "no run_end"), "last_step": r.last_step} for r in runs],
        "multi": multi, "last_step": last,
        "states": _states(), "signals": _signals(runs),
        "hypotheses": [_hypothesis(h, index, multi) for h in origins[:MAX_ORIGINS]],
        "more_hypotheses": max(0, len(origins) - MAX_ORIGINS),
        "layers": [{k: v for k, v in layer.items() if k != "key"} for layer in layers],
        "curve_order": _curve_order(analysis, layers, index),
        "loss": index[LOSS_LAYER] if LOSS_LAYER in index and _has_curve(layers[index[LOSS_LAYER]])
        else None,
        "step_sets": step_sets,
        "stop_lines": [{"text": line.plain, "href": _href(r, paths[n], output)
                      if line.plain.startswith("Evidence") else None}
                     for n, r in enumerate(runs) for line in text_report.evidence_lines([r])],
    }


def _href(run, trace: str, output: str | None) -> str:
    """The link to a capture's file. The run wrote its path relative to the run's folder,
    taken to be the trace's; the link is relative to the report `output` (or, without it,
    to the trace's folder). Never a URL scheme of the trace's choosing: `./` or `file://`."""
    path = os.path.normpath(os.path.join(os.path.dirname(trace), run.capture["path"]))
    if output is not None:
        path = os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(output)))
    return inert(("file://" if os.path.isabs(path) else "./") + path)


# ---- layers: timeline lanes and curves -----------------------------------------------------------
def _layers(analysis, curves: list) -> list:
    """Every layer in forward order (then those known only from summaries), with one lane per
    run that saw it: its state spans (the timeline) and its curve."""
    runs = analysis.runs
    order = dict(analysis.order)
    for c in curves:
        for name in c.layers:
            order.setdefault(name, len(order))
    types = {}
    for r in runs:
        for l in r.layers:
            types.setdefault(l["name"], l.get("type"))
        for (name, _), track in r.tracks.items():
            if track.transitions:
                types.setdefault(name, track.transitions[0].get("module_type"))
    lanes: dict = {}
    most = max(MIN_POINTS, min(MAX_POINTS, TOTAL_POINTS // max(1, sum(len(c.layers) for c in curves))))
    for i, r in enumerate(runs):
        end = max(r.last_step, curves[i].last) + 1      # a state held to the end runs to here
        for (name, signal), track in r.tracks.items():
            lane = lanes.setdefault((name, i), _lane(i))
            lane["spans"] += _spans(track.transitions, signal, end)
            if track.folded:
                lane["folded"][signal] = track.folded
        for name, curve in curves[i].layers.items():
            columns = curve.columns(most)
            if columns is not None:
                lanes.setdefault((name, i), _lane(i))["curve"] = columns
    good = states.ok_names()
    out = []
    for name in sorted({n for n, _ in lanes}, key=lambda n: order.get(n, len(order))):
        mine = [lanes[name, i] for i in range(len(runs)) if (name, i) in lanes]
        failed = list(dict.fromkeys(s[3] for lane in mine for s in lane["spans"] if s[3] not in good))
        kind = types.get(name)
        out.append({"key": name, "name": inert(name), "pseudo": name in PSEUDO_LAYERS,
                    "type": inert(kind) if isinstance(kind, str) and name not in PSEUDO_LAYERS
                    else None, "failed": failed, "lanes": mine})
    return out


def _lane(run: int) -> dict:
    return {"run": run, "spans": [], "folded": {}, "curve": None}


def _spans(transitions: list, signal: str, end: int) -> list:
    """[start, end, signal, state, stats] per kept transition: the state held from its step
    to the next transition's (end exclusive; the last one to the end of the run)."""
    out = []
    for t, nxt in zip(transitions, transitions[1:] + [None]):
        stop = nxt["step"] if nxt is not None else max(end, t["step"] + 1)
        out.append([t["step"], stop, inert(signal), inert(t["to"]), _stats(t.get("stats"))])
    return out


def _stats(stats) -> dict:
    """A transition's numbers for the hover text: scalars only, strings cut short."""
    if not isinstance(stats, dict):
        return {}
    out = {}
    for k, v in list(stats.items())[:MAX_STAT_KEYS]:
        if isinstance(v, str):
            out[inert(k)] = inert(v[:MAX_STAT_TEXT])
        elif (n := number(v)) is not None:
            out[inert(k)] = n
    return out


def _curve_order(analysis, layers: list, index: dict) -> list:
    """The curves shown, as indices into `layers`: the layers of the hypotheses first (in their
    ranking), then the other layers that failed, then the rest (these two in forward order).
    The loss has its own chart."""
    first = [index[h.layer] for h in analysis.hypotheses if h.layer in index]
    failed = [n for n, layer in enumerate(layers) if layer["failed"]]
    rest = list(range(len(layers)))
    return [n for n in dict.fromkeys(first + failed + rest)
            if layers[n]["key"] != LOSS_LAYER and _has_curve(layers[n])]


def _has_curve(layer: dict) -> bool:
    return any(lane["curve"] for lane in layer["lanes"])


def _step_sets(layers: list) -> list:
    """Curves share their step lists (every layer is summarised at the same steps): each list
    is embedded once, and a curve's `steps` becomes its index here."""
    sets: dict = {}
    for layer in layers:
        for lane in layer["lanes"]:
            if lane["curve"]:
                steps = tuple(lane["curve"]["steps"])
                lane["curve"]["steps"] = sets.setdefault(steps, len(sets))
    return [list(s) for s in sets]


# ---- hypotheses, states ---------------------------------------------------------------------------
def _hypothesis(h, index: dict, multi: bool) -> dict:
    """An origin as explain prints it, with its consequences; `layer_index` links to its curves."""
    d = _plain(h, index, multi)
    d["consequences"] = [_plain(c, index, multi) for c in h.consequences[:MAX_CONSEQUENCES]]
    d["more_consequences"] = max(0, len(h.consequences) - MAX_CONSEQUENCES)
    return d


def _plain(h, index: dict, multi: bool) -> dict:
    d = to_dict(h)
    d.pop("consequences")
    d = {k: _inert_all(v) for k, v in d.items()}
    d["where"] = inert(h.layer if h.layer in PSEUDO_LAYERS else f"{h.layer} ({h.module_type})")
    d["on_rank"] = h.process_rank if multi else None
    d["layer_index"] = index.get(h.layer)
    return d


def _inert_all(v):
    if isinstance(v, str):
        return inert(v)
    if isinstance(v, list):
        return [_inert_all(x) for x in v]
    return v


def _states() -> dict:
    """Every registered state (as of now: a detector's state registered later is included)
    by name: colour, letter, failure, ok, and the order a cell shows overlapping states in."""
    good = states.ok_names()
    worst = states.worst_first()
    out = {}
    for name in states.state_names():
        st = states.named(name)
        out[name] = {"color": css_color(st.style), "letter": st.letter, "failure": st.failure,
                     "ok": name in good, "verb": st.verb,
                     "rank": len(worst) - worst.index(name) if name in worst else 0}
    return out


def _signals(runs) -> dict:
    """Each signal's short label and good-health state, for those the traces hold."""
    seen = dict.fromkeys([*states.SIGNALS, *(s for r in runs for _, s in r.tracks)])
    out = {}
    for name in seen:
        known = states.SIGNALS.get(name)
        out[inert(name)] = {"label": inert(known.label if known else name),
                            "ok": known.ok if known else None}
    return out


