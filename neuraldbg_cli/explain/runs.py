"""A trace digested for explaining, in one pass with bounded state: its run, layers, learning
rates, and each layer's transitions in step order."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .. import states
from ..trace import OUTPUT_LAYER, Trace
from ..verdict import Ledger, Rule

ACT = states.ACTIVATION.name
GRAD = states.GRADIENT.name


KEPT_EPISODES = 8   # per layer and signal; later ones fold into the last (a flapping layer)
MAX_NOTES = 100     # warnings kept per run: those near an onset are quoted as evidence
MAX_CURVE = 256     # rms points kept per layer (explain/precision.py)
LOW_DTYPES = ("float16", "bfloat16")
MAX_SHARD_POINTS = 200_000  # summary numbers kept per run, each kind (FSDP norms, classes)


class Track:
    """One layer's transitions on one signal, in step order, bounded: after KEPT_EPISODES
    unhealthy episodes, the next ones are folded into the last kept one (its end moves on and
    `folded` counts them), so a layer flapping for a million steps costs what eight flaps do."""

    __slots__ = ("transitions", "folded", "first", "_bad")

    def __init__(self, first_step: int):
        self.transitions: list = []
        self.folded = 0
        self.first = first_step
        self._bad = 0               # unhealthy transitions kept

    def add(self, t: dict, good: bool) -> None:
        """Transitions arrive in step order within a track (the monitor confirms a layer's
        states in order); a hand-made trace's stray one is put in its place, or, once folding,
        taken as happening now."""
        kept = self.transitions
        late = bool(kept) and t["step"] < kept[-1]["step"]
        if good or self._bad < KEPT_EPISODES:
            self._bad += not good
            if late and not self.folded:
                bisect.insort_right(kept, t, key=_step)
            else:
                kept.append(t if not late else {**t, "step": kept[-1]["step"]})
            self.first = min(self.first, t["step"])
            return
        # one more unhealthy stretch: it continues the last kept one (which healed, perhaps)
        self.folded += 1
        if kept and _is_good(kept[-1]):
            kept.pop()


def _step(t: dict) -> int:
    return t["step"]


def _is_good(t: dict) -> bool:
    return t["to"] in states.ok_names()


@dataclass(kw_only=True)
class Run:
    """One trace, digested in one pass with bounded state: what the rules and the report
    need. `rank` is the process rank; `tracks` holds each (layer, signal)'s transitions in
    step order (the monitor writes them when confirmed, not in step order)."""
    path: str
    rank: int
    world_size: int
    script: str
    run_id: str | None
    status: str | None
    steps: int | None
    exit_code: int | None
    error: str | None
    layers: list
    models: list            # per model event, its layer list (the outermost modules)
    hparams: list
    tracks: dict
    reached: set            # every state some transition entered (the --fail-on gate)
    seen_step: int          # the largest step of any transition, summary or learning-rate change
    notes: list
    thresholds: dict        # run_start's effective thresholds ({} if not given)
    observed: dict          # layer -> the signals watching it, as the model events list them
    shards: dict            # (layer, step) -> this rank's shard's gradient norm (FSDP layers)
    classes: dict           # step -> (classes in the targets sampled, output units, rows)
    ledger: Ledger          # the failure episodes, for the verdict (verdict.py)
    stop: dict | None = None        # run_end.stop: where --stop-on stopped training
    capture: dict | None = None     # the capture event: the evidence's file, its pinpoint
    curves: dict = field(default_factory=dict)  # layer -> [(step, rms)] from the summaries
    low: dict = field(default_factory=dict)     # layer -> "float16"/"bfloat16" it computed in
    off: dict | None = None     # {"step", "message"}: a fault switched monitoring off there
    torch_func: bool = False    # run_end.torch_func: a model was called under vmap/grad, unread

    @property
    def last_step(self) -> int:
        return max(self.steps - 1 if self.steps else 0, self.seen_step)

    def verdict(self, wanted=None) -> list:
        """The episodes that count against the run (in `wanted` states, default every
        failure state): the trace is all there will be, so the run is taken as over."""
        return self.ledger.counted(self.last_step + 1, True, wanted)

    def blips(self) -> int:
        return self.ledger.blip_count(self.last_step + 1, True)

    def counted(self) -> set:
        """(layer, signal, onset, state) of each counted episode."""
        return {(h.layer, h.signal, h.step, h.state) for h in self.verdict()}

    def transitions_of(self, layer: str) -> list:
        """The kept transitions of `layer`, all its signals, in step order."""
        return sorted((t for (name, _), tr in self.tracks.items() if name == layer
                       for t in tr.transitions), key=lambda t: t["step"])


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    """A finite-or-not real number (NaN/inf arrive as strings, which are not numbers here)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _valid(t: dict) -> bool:
    """A transition this version can explain: its signal is registered (states.SIGNALS)."""
    return is_int(t.get("step")) and isinstance(t.get("layer"), str) \
        and t.get("signal") in states.SIGNALS and isinstance(t.get("to"), str)


def _get(event: dict, key: str, ok, default=None):
    """A value of the expected kind, or the default: a reader ignores what it cannot use."""
    value = event.get(key)
    return value if ok(value) else default


def _str(v) -> bool:
    return isinstance(v, str)


def _dict(v) -> bool:
    return isinstance(v, dict)


def _list(v) -> bool:
    return isinstance(v, list)


def _switched_off(e: dict) -> dict | None:
    """A warning that monitoring was switched off (by a fault): steps after it were not
    observed, and a clean verdict says nothing of them."""
    prefix = "monitoring switched off: "
    if not e["message"].startswith(prefix) or not is_int(e.get("step")):
        return None
    return {"step": e["step"], "message": e["message"][len(prefix):]}


def digest(trace: Trace) -> Run:
    """One pass over the events: per layer and signal a bounded Track, the run's facts."""
    start, end, models, hparams, notes = {}, {}, [], [], []
    observed: dict = {}
    sharded, shards, classes, tracks, curves, low = set(), {}, {}, {}, {}, {}
    reached, seen = set(), 0
    good = states.ok_names()
    ledger = capture = off = None
    for e in trace.events:
        kind = e.get("event")
        if kind == "transition":
            if _valid(e):
                (ledger := ledger or _ledger(start)).add(e)     # (run_start came first)
                key = (e["layer"], e["signal"])
                track = tracks.get(key)
                if track is None:
                    track = tracks[key] = Track(e["step"])
                track.add(e, e["to"] in good)
                reached.add(e["to"])
                if e.get("dtype") in LOW_DTYPES:
                    low[e["layer"]] = e["dtype"]
                seen = max(seen, e["step"])
        elif kind == "summary":     # (the curves: their step, a killed run's last; sharded
            if is_int(e.get("step")):   # layers' gradient norms, to combine across ranks)
                seen = max(seen, e["step"])
                _summary(e, _get(e, "stats", _dict, {}), sharded, shards, classes, curves)
        elif kind == "hparams" and is_int(e.get("step")) and isinstance(e.get("lr"), list):
            hparams.append(e)
            seen = max(seen, e["step"])
        elif kind == "model" and isinstance(e.get("layers"), list):
            models.append([l for l in e["layers"] if isinstance(l, dict) and _str(l.get("name"))])
            sharded.update(l["name"] for l in models[-1] if l.get("sharded") is True)
            _observe(observed, models[-1])
            _observe(observed, _get(e, "pseudo_layers", _list, []))
        elif kind == "warning" and _str(e.get("message")):
            off = off or _switched_off(e)
            if len(notes) < MAX_NOTES:
                notes.append(e)
        elif kind == "run_start" and not start:
            start = e
        elif kind == "run_end":
            end = e
        elif kind == "capture" and _str(e.get("path")):
            capture = e
    return Run(
        path=trace.path, rank=_get(start, "rank", is_int, 0),
        world_size=_get(start, "world_size", is_int, 1),
        script=_get(start, "script", _str, "?"),
        run_id=_get(start, "run_id", lambda v: _str(v) or is_int(v)),
        status=_get(end, "status", _str), steps=_get(end, "steps", is_int),
        exit_code=_get(end, "exit_code", is_int), error=_get(end, "error", _str),
        layers=[l for m in models for l in m], models=models,
        hparams=sorted(hparams, key=lambda e: e["step"]), tracks=tracks, reached=reached,
        seen_step=seen, notes=notes, thresholds=_get(start, "thresholds", _dict, {}),
        observed=observed, shards=shards, classes=classes,
        ledger=ledger or Ledger(Rule()), stop=_get(end, "stop", _dict), capture=capture,
        curves=curves, low=low, off=off, torch_func=end.get("torch_func") is True)


def _summary(e: dict, stats: dict, sharded: set, shards: dict, classes: dict,
             curves: dict) -> None:
    """What a summary event adds: a sharded layer's gradient norm, the classes its targets
    held, a layer's rms."""
    _curve(curves, e, stats)
    if e.get("layer") in sharded and len(shards) < MAX_SHARD_POINTS:
        norm = stats.get("grad_norm")
        if is_number(norm):
            shards[(e["layer"], e["step"])] = norm
    elif e.get("layer") == OUTPUT_LAYER and len(classes) < MAX_SHARD_POINTS \
            and all(is_number(stats.get(k)) and 0 <= stats[k] < 1e12
                    for k in ("target_classes", "units", "rows")):
        classes[e["step"]] = tuple(int(stats[k]) for k in ("target_classes", "units", "rows"))


def _curve(curves: dict, e: dict, stats: dict) -> None:
    """A layer's output rms at a summary step, kept for the precision rules (a layer's
    points thinned to every other one when it has MAX_CURVE)."""
    rms, layer = stats.get("rms"), e.get("layer")
    if not is_number(rms) or not _str(layer):
        return
    points = curves.setdefault(layer, [])
    if len(points) >= MAX_CURVE:
        del points[1::2]
    points.append((e["step"], rms))


def _ledger(start: dict) -> Ledger:
    """The verdict's episodes, by the rule of the run's own thresholds."""
    return Ledger(Rule.of(_get(start, "thresholds", _dict, {}).get("verdict"), start.get("every")))


def _observe(observed: dict, layers: list) -> None:
    """Adds the signals each layer entry lists (a model event's, traces since schema 2)."""
    for l in layers:
        if isinstance(l, dict) and _str(l.get("name")) and isinstance(l.get("signals"), list):
            signals = observed.setdefault(l["name"], [])
            signals += [s for s in l["signals"] if _str(s) and s not in signals]


def gate(runs: list, wanted) -> list:
    """The states of `wanted` that fail the runs (the --fail-on gate, after the fact): those of
    the episodes that count (verdict.py), and any warning sign asked for by name."""
    wanted = set(wanted or ())
    counted = {h.state for r in runs for h in r.verdict(wanted)}
    signs = {s for r in runs for s in r.reached & wanted
             if not (known := states.named(s)) or not known.failure}
    return sorted(counted | signs)


def mixed(runs: list) -> list:
    """Warnings when the traces given together do not look like the ranks of one run."""
    out = []
    ids = {r.run_id for r in runs if r.run_id}
    if len(ids) > 1:
        out.append(f"the traces come from different runs (run_id {', '.join(sorted(map(str, ids)))})")
    for what, get in (("script", lambda r: r.script), ("world_size", lambda r: r.world_size)):
        values = {get(r) for r in runs}
        if len(values) > 1:
            out.append(f"the traces differ in {what}: " +
                       ", ".join(f"{get(r)} ({r.path})" for r in runs))
    ranks = [r.rank for r in runs]
    for rank in sorted({k for k in ranks if ranks.count(k) > 1}):
        paths = [r.path for r in runs if r.rank == rank]
        out.append(f"rank {rank} appears in several traces: {', '.join(paths)}")
    return out
