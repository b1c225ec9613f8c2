"""Failure episodes: a layer's signal held in one unhealthy state from its onset to its end."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import states
from ..trace import INPUT_LAYER
from .runs import ACT, Run


@dataclass(frozen=True, kw_only=True)
class Episode:
    """A layer's signal in one unhealthy state, from `onset` until `end` (None: to the end).
    `run` indexes the traces given; `rank` is the process rank that wrote it; `pos` the
    layer's forward position."""
    run: int
    rank: int
    layer: str
    signal: str
    state: str
    onset: int
    end: int | None
    previous: str | None
    module_type: str
    kind: str
    pos: int
    stats: dict = field(hash=False, compare=False)
    recovered: bool = False     # the next transition of the layer is back to healthy
    lasting: bool = False       # the layer never got back to healthy after it
    folded: int = 0             # later unhealthy stretches of a flapping layer, folded into it
    counted: bool = False       # it fails the run (verdict.py); else a blip or a warning sign


def layer_order(runs: list) -> dict:
    """Forward position of each layer: the input first, then the model events' order (a
    module's later call sites, NAME#k, just after it); layers known only from transitions
    come last."""
    order = {INPUT_LAYER: -1}
    for name in [l["name"] for r in runs for l in r.layers]:
        order.setdefault(name, len(order) - 1)
    for name in [layer for r in runs for layer, _ in r.tracks]:
        if name not in order:
            # NAME#k, the k-th call of an activation module in a forward: just after NAME
            base, _, k = name.rpartition("#")
            inner = [p for n, p in order.items() if n.startswith(name + ".")]
            order[name] = order[base] + min(int(k), 999) / 1000 if k.isdigit() and base in order \
                else min(inner) - 0.5 if inner else len(order) - 1
            # (a residual block, a container the model event does not list: before its layers)
    return order


def episodes(run: Run, index: int, order: dict) -> list:
    """The unhealthy stretches of each layer's signals (every registered one) in one run."""
    good = states.ok_names()
    counted = run.counted()
    out = []
    for (layer, signal), track in run.tracks.items():
        ts = track.transitions
        healed = max((i for i, t in enumerate(ts) if t["to"] in good), default=-1)
        last_bad = max((i for i, t in enumerate(ts) if t["to"] not in good), default=-1)
        for i, (t, nxt) in enumerate(zip(ts, ts[1:] + [None])):
            if t["to"] in good:
                continue
            out.append(Episode(
                run=index, rank=run.rank, layer=layer, signal=signal, state=t["to"],
                onset=t["step"], end=nxt["step"] if nxt else None, previous=t.get("from"),
                module_type=str(t.get("module_type") or "?"), kind=str(t.get("kind") or ""),
                pos=order[layer],
                stats=t.get("stats") if isinstance(t.get("stats"), dict) else {},
                recovered=nxt is not None and nxt["to"] in good, lasting=i > healed,
                folded=track.folded if i == last_bad else 0,
                counted=(layer, signal, t["step"], t["to"]) in counted))
    return out


def precedence(ep: Episode) -> tuple:
    """Earlier steps first; in a step, the output/loss pairing (a property of the script,
    there before any pass), then forward (activations and normalisation statistics, input
    first), then backward (gradients, from the loss back to the first layer); then by rank."""
    act = ep.signal in _FORWARD
    phase = 0 if ep.signal == _OUTPUT else 1 if act else 2
    return ep.onset, phase, ep.pos if act else -ep.pos, ep.rank, ep.run


_OUTPUT = states.OUTPUT.name
_FORWARD = (ACT, states.NORM.name, states.RESIDUAL.name)    # seen in the forward pass
