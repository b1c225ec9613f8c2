"""Where a non-finite value is born: the failing step's forward run again, each operation's
output checked (a TorchDispatchMode), at a stop only.

The first operation whose output holds a NaN or an infinity while none of its inputs did is
where the value is born; the module it ran in and the rows of the batch that carry it say
which samples to blame. A value already non-finite in the model's input is born in the data.
"""
from __future__ import annotations

import torch
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

MAX_ROWS = 32           # rows named at most (a batch of NaN is the data's, not a few samples')


def _floats(tree) -> list:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)
            and t.is_floating_point() and t.numel()]


def _bad(t: torch.Tensor) -> bool:
    return not bool(torch.isfinite(t).all())


def kind_of(t: torch.Tensor) -> str:
    return "NaN" if bool(torch.isnan(t).any()) else "inf"


def rows_of(t: torch.Tensor, batch: int | None) -> list | None:
    """The rows (first dimension) of `t` holding a non-finite value, when its first
    dimension is the batch's; else None."""
    if batch is None or t.dim() == 0 or t.shape[0] != batch:
        return None
    bad = ~torch.isfinite(t.detach().reshape(batch, -1)).all(dim=1)
    return bad.nonzero().flatten()[:MAX_ROWS].tolist()


class FirstNonfinite(TorchDispatchMode):
    """Records the first operation whose output is non-finite while its inputs are finite."""

    def __init__(self, where, batch: int | None):
        super().__init__()
        self.where = where          # callable: the layer name the operation runs in
        self.batch = batch
        self.found: dict | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.found is None:
            bad = next((t for t in _floats(out) if _bad(t)), None)
            if bad is not None and not any(_bad(t) for t in _floats((args, kwargs))):
                self.found = {"born": "op", "op": func.overloadpacket.__name__,
                              "module": self.where(), "kind": kind_of(bad),
                              "rows": rows_of(bad, self.batch), "batch": self.batch}
        return out


class ModuleStack:
    """The layer name of the innermost module running (global hooks, while in use)."""

    def __init__(self, name_of):
        self.name_of = name_of      # callable(module) -> layer name or None
        self.stack: list = []
        self._handles: list = []

    def __enter__(self) -> ModuleStack:
        self._handles = [register_module_forward_pre_hook(self._push),
                         register_module_forward_hook(self._pop, always_call=True)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()

    def _push(self, module, args):
        self.stack.append(self.name_of(module))

    def _pop(self, module, args, output):
        if self.stack:
            self.stack.pop()

    def where(self) -> str | None:
        return next((n for n in reversed(self.stack) if n is not None), None)


def in_input(tensors: list, batch: int | None) -> dict | None:
    """The model's input already non-finite: born in the data."""
    bad = next((t for t in tensors if t.is_floating_point() and _bad(t)), None)
    if bad is None:
        return None
    return {"born": "input", "op": None, "module": "(input)", "kind": kind_of(bad),
            "rows": rows_of(bad, batch), "batch": batch}
