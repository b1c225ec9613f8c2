"""A trace digested for explaining: its run, layers, learning rates and transitions in step order."""
from __future__ import annotations

from dataclasses import dataclass

from .. import states
from ..trace import Trace

ACT = states.ACTIVATION.name
GRAD = states.GRADIENT.name
INPUT_LAYER = "(input)"     # the layer name of the outermost module's input (a pseudo-layer)
INPUT_TYPE = "input"        # the module_type the trace gives that pseudo-layer


@dataclass(kw_only=True)
class Run:
    """One trace, digested: what rules and report need, with transitions sorted by step
    (the monitor writes them when confirmed, not in step order). `rank` is the process rank."""
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
    hparams: list
    transitions: list
    notes: list

    @property
    def last_step(self) -> int:
        seen = [t["step"] for t in self.transitions] + [h["step"] for h in self.hparams]
        return max([self.steps - 1 if self.steps else 0, *seen])


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


def digest(trace: Trace) -> Run:
    start, end = trace.start, trace.end or {}
    layers = [l for m in trace.of("model") if isinstance(m.get("layers"), list)
              for l in m["layers"] if isinstance(l, dict) and _str(l.get("name"))]
    hparams = [h for h in trace.of("hparams") if is_int(h.get("step")) and isinstance(h.get("lr"), list)]
    return Run(
        path=trace.path, rank=_get(start, "rank", is_int, 0),
        world_size=_get(start, "world_size", is_int, 1),
        script=_get(start, "script", _str, "?"),
        run_id=_get(start, "run_id", lambda v: _str(v) or is_int(v)),
        status=_get(end, "status", _str), steps=_get(end, "steps", is_int),
        exit_code=_get(end, "exit_code", is_int), error=_get(end, "error", _str),
        layers=layers, hparams=sorted(hparams, key=lambda e: e["step"]),
        transitions=sorted((t for t in trace.of("transition") if _valid(t)), key=lambda e: e["step"]),
        notes=[w for w in trace.of("warning") if _str(w.get("message"))])


def gate(runs: list, wanted) -> list:
    """The transitions into any of the states `wanted` (the --fail-on gate, after the fact)."""
    wanted = set(wanted or ())
    return [t for r in runs for t in r.transitions if t["to"] in wanted]


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
