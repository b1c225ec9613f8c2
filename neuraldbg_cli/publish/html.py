"""`neuraldbg report`: one self-contained HTML file of an explanation, readable offline.

The page is the verdict and the ranked hypotheses as `explain` prints them, a layer x step
timeline of states (the ranks of a distributed run as lanes), the loss curve and each layer's
summary numbers with its transitions marked. Python gathers the data (bounded: a long run
costs what a short one does, give or take), report.js draws it on canvases.

A trace is data from elsewhere: every string in it reaches the page only as JSON inside
`<script type="application/json">` (with `<`, `>` and `&` escaped, so no string can close the
element), and report.js inserts it with textContent. A Content-Security-Policy that allows
only this page's own script (by hash) and no network backs that up. Torch-free."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
from importlib import resources
from pathlib import Path

from .. import __version__, states
from ..errors import InputError, check_writable
from ..explain import report as text_report
from ..explain.analysis import analyze
from ..explain.hypothesis import to_dict
from ..explain.runs import mixed
from ..inert import inert
from ..trace import LOSS_LAYER, PSEUDO_LAYERS, iter_events, open_trace
from .report_colors import css_color

FORMAT = 1              # of the embedded JSON document (report.js reads `format`)
MAX_POINTS = 1000       # per layer curve and run: more is not visible, and costs load time
TOTAL_POINTS = 500_000  # over all curves: a model of thousands of layers gets fewer per layer
MIN_POINTS = 100        # (but never fewer than this)
MAX_STAT_KEYS = 12      # numbers kept per summary (a summary holds at most 6 today)
MAX_STAT_TEXT = 80      # characters of a string value in a transition's stats
MAX_ORIGINS = 200       # hypotheses embedded in full; the rest are counted (explain --json has all)
MAX_CONSEQUENCES = 50   # per origin
NONFINITE = ("nan", "inf", "-inf")      # how the trace writes them (JSON has no NaN)


def write_report(traces: list[str], output: str) -> None:
    """Read the traces (the ranks of one run), explain them, write the HTML file `output`.
    Bad input raises InputError (one line, exit 2); the output is checked first, so a typo
    in -o does not cost a read of a large trace."""
    if not traces:
        raise InputError("report: give at least one trace")
    _check_output(output, traces)
    for path in traces:     # the first event of each: not found / not a trace, before the slow pass
        events = iter_events(path, [])
        try:
            next(events, None)
        finally:
            events.close()
    page = render(build(traces))
    _write(output, page)


def build(paths: list[str]) -> dict:
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
    (loss) layer when it has a curve, else null; step_sets: the curves' step lists."""
    traces = [open_trace(p) for p in paths]
    curves = [_Curves() for _ in paths]
    for trace, sink in zip(traces, curves):
        # One pass: analyze consumes the events and the summaries are picked off on the way,
        # so a 100k-step trace is parsed once, not twice.
        trace.events = sink.tap(trace.events)
    analysis = analyze(traces)
    runs = analysis.runs
    notes = [w for t in traces for w in t.warnings] + mixed(runs)
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
        "heading": text_report.hypotheses(origins)[0].plain,
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
    }


# ---- summaries ---------------------------------------------------------------------------------
class _Curve:
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
        points = [(s, row) for s, row in ((s, _clean(row)) for s, row in points) if row]
        if not points:
            return None
        keys = list(dict.fromkeys(k for _, row in points for k in row))[:MAX_STAT_KEYS]
        return {"steps": [s for s, _ in points],
                "stats": {inert(k): [row.get(k) for _, row in points] for k in keys}}


class _Curves:
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
                        curve = layers[layer] = _Curve()
                    curve.add(step, stats)
            yield e

    def notes(self) -> list:
        return [f"{self.skipped} malformed summary events skipped"] if self.skipped else []


def _clean(stats: dict) -> dict:
    return {k: n for k, v in stats.items() if (n := _number(v)) is not None}


def _number(v):
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
        elif (n := _number(v)) is not None:
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


# ---- the page -------------------------------------------------------------------------------------
def render(doc: dict) -> str:
    """The HTML page: style, data and script inline, nothing fetched."""
    files = resources.files(__package__)
    css = files.joinpath("report.css").read_text(encoding="utf-8")
    js = files.joinpath("report.js").read_text(encoding="utf-8")
    # (inside <script> and <style>, "</" may end the element and "<!--" or "<script" change how
    # the parser reads on: the page's own files hold none of them, the data is escaped)
    assert not re.search(r"</|<!--|<script", js + css, re.I), "report.js/css hold '</', '<!--' or '<script'"
    policy = (f"default-src 'none'; script-src '{_sha256(js)}'; style-src '{_sha256(css)}'; "
              "img-src data:; base-uri 'none'; form-action 'none'")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"neuraldbg {__version__}\">\n"
        "<title>neuraldbg report</title>\n"
        f"<style>{css}</style>\n</head>\n<body>\n"
        "<noscript>This report draws itself with JavaScript: allow scripts for this file "
        "(it fetches nothing).</noscript>\n<main id=\"report\"></main>\n"
        f"<script type=\"application/json\" id=\"data\">{embed(doc)}</script>\n"
        f"<script>{js}</script>\n</body>\n</html>\n")


def embed(doc: dict) -> str:
    """The document as JSON that cannot end its <script> element nor open a comment: `<`, `>`
    and `&` as \\u escapes (JSON.parse reads them back). ASCII only, so a lone surrogate in a
    trace string stays an escape instead of failing the write."""
    text = json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


# ---- the output file ------------------------------------------------------------------------------
def _check_output(output: str, traces: list[str]) -> None:
    check_writable(output, "report")
    p = Path(output)
    if p.exists() and any(Path(t).exists() and os.path.samefile(p, t) for t in traces):
        raise InputError(f"cannot write report {output}: it is one of the traces")


def _write(output: str, page: str) -> None:
    """Whole or not at all: a temporary file beside the output, renamed over it."""
    folder = os.path.dirname(output) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".neuraldbg-report-", suffix=".html", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(page)
            os.chmod(tmp, 0o666 & ~_umask())    # as open() would have made it, not mkstemp's 0600
            os.replace(tmp, output)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise InputError(f"cannot write report {output}: {e.strerror or e}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
