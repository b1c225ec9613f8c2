"""What the cause and echo rules may look at besides the episode itself."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .. import states
from ..thresholds import InitThresholds
from ..trace import INPUT_LAYER
from .echoes import HORIZON
from .runs import is_number

_UPDATE = states.UPDATE.name


class Stretch(NamedTuple):
    """A layer's stretch in one state of one signal, with the stats it began with."""
    onset: int
    end: int | None
    layer: str
    stats: dict


@dataclass
class Context:
    """The digested runs, the layers' forward order, and the model events' layer lists."""
    runs: list
    order: dict
    models: list
    _stretches: dict = field(default_factory=dict)  # (run, signal, state) -> Stretches, once asked

    def hparams(self, run: int) -> list:
        return self.runs[run].hparams

    def input_rms(self, run: int, step: int) -> float | None:
        """The last rms of the model's input written at or before `step` (None: unknown)."""
        return next((t["stats"]["rms"] for t in reversed(self.runs[run].transitions_of(INPUT_LAYER))
                     if t["step"] <= step
                     and isinstance(t.get("stats"), dict) and is_number(t["stats"].get("rms"))),
                    None)

    def model_of(self, layer: str) -> list:
        """The layers of the outermost module holding `layer` (all layers if unknown)."""
        found = next((m for m in self.models if any(l["name"] == layer for l in m)), None)
        return found if found is not None else [l for m in self.models for l in m]

    def stretches(self, run: int, signal: str, state: str, before: int) -> list:
        """The stretches of `state` on `signal` (any layer) that began at or before step
        `before`, in step order."""
        key = (run, signal, state)
        found = self._stretches.get(key)
        if found is None:
            found = self._stretches[key] = _stretches(self.runs[run], signal, state)
        return [s for s in found if s.onset <= before]

    def folded(self, run: int, layer: str, signal: str) -> int:
        """How many later unhealthy stretches of `layer`'s `signal` were folded, not kept."""
        track = self.runs[run].tracks.get((layer, signal))
        return track.folded if track is not None else 0

    def big_updates(self, run: int, step: int) -> list:
        """The stretches of updates too large for the weights going on at `step`, or over
        at most HORIZON steps before it (those with their ratio)."""
        return [s for s in self.stretches(run, _UPDATE, "too_large", step)
                if (s.end is None or s.end + HORIZON >= step) and is_number(s.stats.get("update_ratio"))]

    def init_factor(self, run: int) -> float:
        """The run's init.scale_factor: how far off its fan-in scale a weight is named."""
        init = self.runs[run].thresholds.get("init")
        value = init.get("scale_factor") if isinstance(init, dict) else None
        return value if is_number(value) and value > 1 else InitThresholds.scale_factor


def models_of(runs: list) -> list:
    """The layer lists of the first trace's model events (the ranks share one model)."""
    return [m for r in runs[:1] for m in r.models]


def _stretches(run, signal: str, state: str) -> list:
    out = []
    for (layer, sig), track in run.tracks.items():
        if sig != signal:
            continue
        ts = track.transitions
        for t, nxt in zip(ts, ts[1:] + [None]):
            if t["to"] == state:
                stats = t.get("stats") if isinstance(t.get("stats"), dict) else {}
                out.append(Stretch(t["step"], nxt["step"] if nxt else None, layer, stats))
    return sorted(out, key=lambda s: s.onset)
