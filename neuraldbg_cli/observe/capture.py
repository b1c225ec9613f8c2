"""The capture: one file holding the evidence of the first counted failure, written then.

The step's inputs, targets and dataset indices (evidence.py, samples.py); the failing
layer's input and output and the pinpoint (pinpoint.py), both from the step's forward run
again on the captured inputs under `no_grad`, its buffers and the RNG states restored after
(the run goes on unchanged, or stops); the model's and the optimizer's state as they are
then (at a stop on a non-finite gradient, before its update); the RNG states.
"""
from __future__ import annotations

import contextlib
import os

import torch
from torch.utils._pytree import tree_map

from ..trace import rank_path
from . import naming
from .pinpoint import FirstNonfinite, ModuleStack, in_input


def _cpu(value):
    """Tensors copied to the CPU (detached); other leaves kept if plain, else dropped."""
    def leaf(x):
        if isinstance(x, torch.Tensor):
            return x.detach().to("cpu", copy=True)
        return x if x is None or isinstance(x, (bool, int, float, str)) else None
    return tree_map(leaf, value)


def _rng() -> dict:
    out = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def _set_rng(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def _batch(fwd) -> int | None:
    first = next((t for t in (*fwd.args, *fwd.kwargs.values()) if isinstance(t, torch.Tensor)
                  and t.dim()), None)
    return first.shape[0] if first is not None else None


def rerun(fwd, layer, name_of, pinpoint: bool) -> tuple:
    """(layer tensors, pinpoint) of the forward `fwd` run again; the model's buffers and the
    RNG states are as before afterwards."""
    root = naming.unwrap(fwd.module())
    batch = _batch(fwd)
    found = in_input([t for t in (*fwd.args, *fwd.kwargs.values())
                      if isinstance(t, torch.Tensor)], batch) if pinpoint else None
    got: dict = {}

    def keep(module, args, output):         # (the layer's first call in the forward)
        if not got:
            got["input"] = _cpu(args[0]) if len(args) == 1 else _cpu(list(args))
            got["output"] = _cpu(output)
    handle = layer.register_forward_hook(keep) if layer is not None else None
    buffers = {k: b.detach().clone() for k, b in root.named_buffers()}
    rng = _rng()
    try:
        with torch.no_grad(), ModuleStack(name_of) as stack:
            mode = FirstNonfinite(stack.where, batch) if pinpoint and found is None \
                else contextlib.nullcontext()
            with mode:
                root(*fwd.args, **fwd.kwargs)
            if found is None and pinpoint:
                found = mode.found
    finally:
        if handle is not None:
            handle.remove()
        own = dict(root.named_buffers())
        for k, b in buffers.items():
            own[k].copy_(b)
        _set_rng(rng)
    return got, found


def blamed(pin: dict | None, indices) -> list | None:
    """The dataset indices of the pinpoint's rows, where the batch's indices are known."""
    if not pin or pin.get("rows") is None or not isinstance(indices, (list, tuple)):
        return None
    return [int(indices[r]) for r in pin["rows"] if r < len(indices)]


def write(folder: str, rank: int, world: int, found: dict, evidence, layer, name_of, opt,
          warn) -> tuple:
    """Writes the capture file; (its path, what the trace's capture event says of it)."""
    forwards = [f for f in evidence.forwards if f.module() is not None]
    pinpoint = found["to"] == "nonfinite"
    chosen, tensors, pin = (forwards[-1] if forwards else None), {}, None
    for fwd in forwards:            # (with accumulation: the first forward to show it)
        try:
            tensors, pin = rerun(fwd, layer, name_of, pinpoint)
        except Exception as e:  # noqa: BLE001 - the capture is still written
            warn(f"capture: the step's forward could not be run again: {type(e).__name__}: {e}")
            break
        chosen = fwd
        if pin is not None or not pinpoint:
            break
    indices = chosen.indices if chosen is not None else None
    root = naming.unwrap(chosen.module()) if chosen is not None else None
    data = {"step": evidence.step, "since": found["step"], "layer": found["layer"],
            "signal": found["signal"], "state": found["to"],
            "inputs": {"args": _cpu(list(chosen.args)), "kwargs": _cpu(dict(chosen.kwargs))}
            if chosen is not None else None,
            "targets": _cpu(evidence.targets), "layer_tensors": tensors or None,
            "pinpoint": pin, "blamed_indices": blamed(pin, indices),
            "model_state": _cpu(dict(root.state_dict())) if root is not None else None,
            "optimizer_state": _cpu(opt.state_dict()) if opt is not None else None,
            "rng": _rng()}
    if isinstance(indices, (list, tuple)):
        data["sample_indices"] = [int(i) for i in indices]
    elif isinstance(indices, int):
        data["sample_indices"] = [indices]
    os.makedirs(folder, exist_ok=True)
    name = os.path.join(folder, f"step{evidence.step}.pt")
    path = rank_path(name, rank) if world > 1 else name
    torch.save(data, path)
    return path, {"path": path, "step": evidence.step, "layer": found["layer"],
                  "signal": found["signal"], "state": found["to"], "pinpoint": pin,
                  "blamed_indices": data["blamed_indices"]}
