"""What the cause and echo rules may look at besides the episode itself."""
from __future__ import annotations

from dataclasses import dataclass

from ..trace import INPUT_LAYER
from .runs import is_number


@dataclass
class Context:
    """The digested runs, the layers' forward order, and the model events' layer lists."""
    runs: list
    order: dict
    models: list

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


def models_of(runs: list) -> list:
    """The layer lists of the first trace's model events (the ranks share one model)."""
    return [m for r in runs[:1] for m in r.models]
