"""Hand-made traces for the explain tests: a few lines of Python per story, written as JSONL."""
from __future__ import annotations

import json

from neuraldbg_cli import states

MLP = [("net.0", "Linear", "param"), ("net.1", "ReLU", "relu"), ("net.2", "Linear", "param"),
       ("net.3", "ReLU", "relu"), ("net.4", "Linear", "param")]


class TraceMaker:
    """Builds the events of one trace; `from` of each transition follows the layer's history."""

    def __init__(self, layers=MLP, *, script="train.py", rank=0, world_size=1, run_id=None,
                 lr=0.05, optimizer="SGD", healthy_start=True, weights=None):
        """weights: {layer: (weight_rms, init_rule, init_rms)}, the model event's weight scale."""
        self.layers = {name: (typ, kind) for name, typ, kind in layers}
        self.layers["(input)"] = ("input", "input")
        self.layers["(loss)"] = ("loss", "loss")
        self.layers["(loop)"] = ("loop", "loop")
        self.layers["(output)"] = ("output", "output")
        self.state: dict = {}
        self.events = [
            {"event": "run_start", "schema": 1, "version": "0.1.0", "script": script,
             "argv": [script], "torch": "2.13.0", "thresholds": {}, "rank": rank,
             "world_size": world_size, "pid": 1, "run_id": run_id, "time": "2026-01-01T00:00:00"},
            {"event": "model", "step": 0, "root": "Sequential",
             "layers": [{"name": n, "type": t, "kind": k, "params": 10, **_scale(weights, n)}
                        for n, t, k in layers]}]
        if lr is not None:
            self.events.append({"event": "hparams", "step": 0, "optimizer": optimizer,
                                "optimizer_index": 0, "lr": [lr], "previous_lr": None})
        if healthy_start:
            self.tr(0, "(input)", "normal")
            for name, _, kind in layers:
                self.tr(0, name, "normal")
                if kind == "param":
                    self.tr(0, name, "healthy")
                    self.tr(0, name, "normal", signal="update")
            self.tr(0, "(loss)", "normal", signal="loss")
            self.tr(0, "(loop)", "normal", signal="loop")
            self.tr(0, "(output)", "normal", signal="output")

    def tr(self, step, layer, to, *, signal=None, **stats):
        if signal is None:      # the first signal that has the state: nonfinite is an activation
            signal = next(s.name for s in states.SIGNALS.values() if s.state(to))
        typ, kind = self.layers.get(layer, ("Linear", "param"))
        key = (layer, signal)
        self.events.append({"event": "transition", "step": step, "layer": layer,
                            "module_type": typ, "kind": kind, "signal": signal,
                            "from": self.state.get(key), "to": to, "stats": stats})
        self.state[key] = to
        return self

    def lr(self, step, new, old, optimizer="SGD"):
        self.events.append({"event": "hparams", "step": step, "optimizer": optimizer,
                            "optimizer_index": 0, "lr": [new], "previous_lr": [old]})
        return self

    def end(self, steps=100, status="completed", exit_code=0, error=None):
        self.events.append({"event": "run_end", "status": status, "steps": steps,
                            "exit_code": exit_code, "error": error, "time": "2026-01-01T00:01:00"})
        return self

    def write(self, path) -> str:
        path.write_text("".join(json.dumps(e) + "\n" for e in self.events), encoding="utf-8")
        return str(path)


def _scale(weights, name) -> dict:
    if not weights or name not in weights:
        return {}
    rms, rule, init = weights[name]
    return {"weight_rms": rms, "init_rule": rule, "init_rms": init}


def dying_relu(**kw) -> TraceMaker:
    """The issue's story: lr 0.05 -> 2.0 at step 40, net.3 dies at 41, the Linear layers
    before it get zero gradients (echoes); transitions written when confirmed, not in order."""
    t = TraceMaker(**kw).lr(40, 2.0, 0.05)
    t.tr(43, "net.2", "vanishing", grad_norm=0.0, model_max_grad_norm=0.4)
    t.tr(41, "net.3", "dead", dead_ratio=0.97, units=64, rms=0.01)
    t.tr(42, "net.0", "vanishing", grad_norm=0.0, model_max_grad_norm=0.4)
    return t.end(80)
