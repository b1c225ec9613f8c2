"""Losses written by hand, read off the autograd graph: `((model(x) - y) ** 2).mean()`, a
clamped BCE `-(t * p.clamp(eps, 1 - eps).log() + ...)`, `-(y * torch.log(p)).sum(1).mean()`.

Most ported and research code writes its loss this way, so no `torch.nn.functional` loss is
called for pairing.py to see. At the backward() of a step whose output pairing is read (and
where no functional loss was seen), the graph from the loss back to the model's output is
searched (bounded: MAX_NODES nodes). The ops on that path say what the loss does with the
output:

- a difference (`out - y`) squared or taken absolute: a regression; the difference the power
  or `abs` saved gives the targets back (y = out - d), and its shape shows a broadcast
  ((N, 1) against (N,) gives (N, N));
- a log applied to the output through nothing but clamps, `1 - p` and indexing: a likelihood
  that expects probabilities.

It yields a LossCall that the output detector judges like a functional one: `mse_loss` or
`l1_loss` for a regression, `log_likelihood` for a log of the output. Nothing is read here:
the reductions join the step's one read.
"""
from __future__ import annotations

import torch

from .pairing import LossCall, activation_of, rows_of

MAX_NODES = 64      # autograd nodes visited at most from the loss toward the output
LOG_LIKELIHOOD = "log_likelihood"
_LOGS = frozenset(("LogBackward", "Log2Backward", "Log10Backward"))
# Between a log and the output: what leaves a probability a probability (p.clamp(eps, 1 - eps),
# 1 - p, p + eps, picking rows or the target's class).
_DIRECT = frozenset((
    "ClampBackward", "ClampMinBackward", "ClampMaxBackward", "RsubBackward", "AddBackward",
    "SelectBackward", "SliceBackward", "GatherBackward", "IndexBackward", "ViewBackward",
    "UnsafeViewBackward", "ReshapeAliasBackward", "SqueezeBackward", "UnsqueezeBackward",
    "CloneBackward", "ToCopyBackward", "ExpandBackward", "PermuteBackward", "TransposeBackward",
    "AliasBackward"))
# What produces a linear output (no activation): a Linear, a matmul, a convolution.
_LINEAR = frozenset(("AddmmBackward", "MmBackward", "AddBackward", "LinearBackward",
                     "ConvolutionBackward", "BmmBackward", "MvBackward", "MatmulBackward"))
_SQUARED = frozenset(("PowBackward", "MulBackward"))
_ABS = "AbsBackward"


def _name(fn) -> str:
    return type(fn).__name__.rstrip("0123456789")


def path_to(loss_fn, target_fn) -> list | None:
    """The autograd nodes from `loss_fn` to the one right before `target_fn` (the output's),
    breadth first, at most MAX_NODES visited; None when the output is not reached."""
    parent = {loss_fn: None}
    queue, seen = [loss_fn], 0
    while queue and seen < MAX_NODES:
        fn = queue.pop(0)
        seen += 1
        for nxt, _ in fn.next_functions:
            if nxt is None or nxt in parent:
                continue
            parent[nxt] = fn
            if nxt is target_fn:
                out, at = [], fn
                while at is not None:
                    out.append(at)
                    at = parent[at]
                return out[::-1]
            queue.append(nxt)
    return None


def read_handwritten(loss: torch.Tensor, out: torch.Tensor) -> LossCall | None:
    """The LossCall of a hand-written loss `loss` of the model output `out`, or None where
    the graph shows neither a regression nor a log of the output."""
    target_fn, loss_fn = out.grad_fn, loss.grad_fn
    if target_fn is None or loss_fn is None or out.dim() == 0:
        return None
    path = path_to(loss_fn, target_fn)
    if not path:
        return None
    names = [_name(fn) for fn in path]
    activation, normalised = activation_of(out)
    class_dim = out.dim() - 1 if out.dim() >= 2 else None
    units = int(out.shape[class_dim]) if class_dim is not None else 1
    o = rows_of(out.detach(), class_dim).float()
    tensors = [*o.aminmax()]
    log_at = max((i for i, n in enumerate(names) if n in _LOGS), default=None)
    if log_at is not None:
        if not all(n in _DIRECT for n in names[log_at + 1:]):
            return None     # (a log of something computed from the output: a density)
        linear = activation is None and _name(target_fn) in _LINEAR
        nan = torch.full((), float("nan"), device=o.device)
        return LossCall(LOG_LIKELIHOOD, activation if not linear else "linear", normalised,
                        units, int(o.shape[0]), "float", tuple(out.shape), tuple(out.shape),
                        ("output_min", "output_max", "target_min", "target_max"),
                        [*tensors, nan, nan])
    return _regression(path, names, out, o, activation, normalised, units, tensors)


def _regression(path, names, out, o, activation, normalised, units, tensors):
    """out - y squared or absolute: the targets from the difference the power saved."""
    sub_at = max((i for i, n in enumerate(names) if n == "SubBackward"), default=None)
    if sub_at is None or sub_at == 0 or names[sub_at - 1] not in (*_SQUARED, _ABS):
        return None
    user = path[sub_at - 1]
    diff = getattr(user, "_saved_self", None)
    if not isinstance(diff, torch.Tensor):
        return None
    # out - y or y - out: which operand of the subtraction the output's side is
    first = path[sub_at].next_functions[0][0]
    toward = path[sub_at + 1] if sub_at + 1 < len(path) else out.grad_fn
    y = out.detach() - diff.detach() if first is toward else diff.detach() + out.detach()
    t = rows_of(y, None if y.dim() < 2 else y.dim() - 1).float()
    loss = "l1_loss" if names[sub_at - 1] == _ABS else "mse_loss"
    return LossCall(loss, activation, normalised, units, int(o.shape[0]), "float",
                    tuple(out.shape), tuple(diff.shape),
                    ("output_min", "output_max", "target_min", "target_max"),
                    [*tensors, *t.aminmax()])
