"""Losses written by hand, read off the autograd graph: `((model(x) - y) ** 2).mean()`, a
clamped BCE `-(t * p.clamp(eps, 1 - eps).log() + ...)`, `-(y * torch.log(p)).sum(1).mean()`.

Most ported and research code writes its loss this way, so no `torch.nn.functional` loss is
called for pairing.py to see. At the backward() of a step whose output pairing is read (and
where no functional loss was seen), the graph from the loss is searched breadth first
(bounded: MAX_NODES nodes) for what the loss does with the prediction:

- a log taken of it through nothing but clamps, `1 - p` and indexing: a likelihood, which
  expects probabilities (`log_likelihood`); the prediction is the model's output, or a
  sigmoid/softmax/tanh applied to it on the way (a softmax taken in the training loop);
- a difference with the targets (`pred - y`) squared or taken absolute: a regression
  (`mse_loss`, `l1_loss`); the difference the power or `abs` saved gives the targets back
  (y = pred - d), and its shape shows a broadcast ((N, 1) against (N,) gives (N, N)).

The prediction is the model's output when an outermost module returned it, else (a model of
bare tensors) the result an activation node saved. It yields a LossCall that the output
detector judges like a functional one. Nothing is read here: the reductions join the step's
one read.
"""
from __future__ import annotations

import torch

from .loss_graph import activation_at, activation_of, node_name
from .pairing import LossCall, low_dtype, rows_of

MAX_NODES = 64      # autograd nodes visited at most from the loss
LOG_LIKELIHOOD = "log_likelihood"
_LOGS = frozenset(("LogBackward", "Log2Backward", "Log10Backward"))
# Between a log and the prediction: what leaves a probability a probability (p.clamp(eps,
# 1 - eps), 1 - p, p + eps, p / p.sum(1), picking rows or the target's class), and reshapes.
_DIRECT = frozenset((
    "ClampBackward", "ClampMinBackward", "ClampMaxBackward", "RsubBackward", "AddBackward",
    "DivBackward",
    "SelectBackward", "SliceBackward", "GatherBackward", "IndexBackward", "ViewBackward",
    "UnsafeViewBackward", "ReshapeAliasBackward", "SqueezeBackward", "UnsqueezeBackward",
    "CloneBackward", "ToCopyBackward", "ExpandBackward", "PermuteBackward", "TransposeBackward",
    "AliasBackward", "TBackward"))
_RESHAPES = _DIRECT - {"ClampBackward", "ClampMinBackward", "ClampMaxBackward", "RsubBackward",
                       "AddBackward", "DivBackward"}
# What produces a linear output (no activation): a Linear, a matmul, a convolution.
_LINEAR = frozenset(("AddmmBackward", "MmBackward", "AddBackward", "LinearBackward",
                     "ConvolutionBackward", "BmmBackward", "MvBackward", "MatmulBackward"))
_DIFFERENCE_USERS = {"PowBackward": "mse_loss", "MulBackward": "mse_loss", "AbsBackward": "l1_loss"}
_NAMES = ("output_min", "output_max", "target_min", "target_max")


def read_handwritten(loss: torch.Tensor, out: torch.Tensor | None) -> LossCall | None:
    """The LossCall of a hand-written loss `loss` of the model output `out` (None: a model of
    bare tensors), or None where the graph shows neither a log nor a regression of it."""
    start = loss.grad_fn
    target_fn = out.grad_fn if out is not None else None
    if start is None or out is not None and (target_fn is None or out.dim() == 0):
        return None
    parent = {start: None}
    queue, seen = [start], 0
    while queue and seen < MAX_NODES:
        fn = queue.pop(0)
        seen += 1
        kind = node_name(fn)
        if kind in _LOGS:
            found = _log_of(fn, parent[fn], out, target_fn)
            if found is not None:
                return found
        elif kind == "SubBackward" and parent[fn] is not None:
            found = _regression(fn, parent[fn], out, target_fn)
            if found is not None:
                return found
        if fn is target_fn:
            continue        # (not into the model)
        for nxt, _ in fn.next_functions:
            if nxt is not None and nxt not in parent:
                parent[nxt] = fn
                queue.append(nxt)
    return None


def _prediction(fn, out, target_fn):
    """(prediction tensor, activation, normalised size, reshaped) where the chain from the
    node `fn` down its first inputs, through reshapes, meets the model's output or an
    activation (its saved result is the prediction); else None. reshaped: the chain passed
    a reshape, so what the loss took has another shape than the prediction."""
    for depth in range(MAX_NODES):
        if fn is None:
            return None
        if fn is target_fn:
            act, size = activation_of(out)
            return out, act if act or node_name(fn) not in _LINEAR else "linear", size, depth > 0
        found = activation_at(fn)
        if found is not None:
            result = getattr(fn, "_saved_result", None)
            return (result, *found, depth > 0) if isinstance(result, torch.Tensor) else None
        if node_name(fn) not in _RESHAPES:
            return None
        fn = fn.next_functions[0][0] if fn.next_functions else None
    return None


def _log_of(log_fn, user, out, target_fn) -> LossCall | None:
    """log(p): p is the prediction, through clamps, 1 - p and indexing; `user`, the node
    that took the log (t * log(p): the targets are what it saved besides)."""
    fn = log_fn.next_functions[0][0] if log_fn.next_functions else None
    for _ in range(MAX_NODES):
        if fn is None or fn is target_fn or activation_at(fn) is not None:
            break
        if node_name(fn) not in _DIRECT:
            return None     # (a log of something computed from the output: a density)
        # (1 - p, p + eps: the operand with a gradient is the way to the prediction)
        fn = next((n for n, _ in fn.next_functions if n is not None), None)
    found = _prediction(fn, out, target_fn)
    if found is None or found[0].dim() == 0:
        return None
    pred, act, size, _ = found
    o = _rows(pred)
    target = _targets_of(user)
    if target is not None:
        t = rows_of(target.detach(), target.dim() - 1 if target.dim() >= 2 else None).float()
        bounds = [*t.aminmax()]
    else:
        bounds = [torch.full((), float("nan"), device=o.device)] * 2
    return LossCall(LOG_LIKELIHOOD, act, size, _units(pred), int(o.shape[0]), "float",
                    tuple(pred.shape), tuple(pred.shape), _NAMES, [*o.aminmax(), *bounds],
                    dtype=low_dtype(pred))


def _targets_of(user) -> torch.Tensor | None:
    """The targets a product t * log(p) saved: its operand that needs no gradient."""
    if user is None or node_name(user) != "MulBackward":
        return None
    for name in ("_saved_self", "_saved_other"):
        t = getattr(user, name, None)
        if isinstance(t, torch.Tensor) and not t.requires_grad and t.dim() and t.is_floating_point():
            return t
    return None


def _regression(sub_fn, user, out, target_fn) -> LossCall | None:
    """(pred - y) ** 2, |pred - y|: the targets from the difference the power saved."""
    loss = _DIFFERENCE_USERS.get(node_name(user))
    diff = getattr(user, "_saved_self", None)
    operands = [n for n, _ in sub_fn.next_functions]
    if loss is None or not isinstance(diff, torch.Tensor) or len(operands) != 2 \
            or (operands[0] is None) == (operands[1] is None):
        return None     # (both sides computed: not a prediction against fixed targets)
    first = operands[0] is not None
    found = _prediction(operands[0] if first else operands[1], out, target_fn)
    if found is None or found[0].dim() == 0:
        return None
    pred, act, size, reshaped = found
    pred, diff = pred.detach(), diff.detach()
    if reshaped:    # (CleanRL's value loss: critic(x).view(-1) - returns)
        if pred.numel() == diff.numel():
            pred = pred.reshape(diff.shape)     # taken as the targets' shape: no broadcast
        elif pred.numel() > diff.numel():
            return None     # (a slice of the output, out[:, 0]: its targets are not known)
    y = pred - diff if first else diff + pred
    o, t = _rows(pred), rows_of(y, y.dim() - 1 if y.dim() >= 2 else None).float()
    return LossCall(loss, act if act != "linear" else None, size, _units(pred), int(o.shape[0]),
                    "float", tuple(pred.shape), tuple(diff.shape), _NAMES,
                    [*o.aminmax(), *t.aminmax()], dtype=low_dtype(pred))


def _units(pred: torch.Tensor) -> int:
    return int(pred.shape[-1]) if pred.dim() >= 2 else 1


def _rows(pred: torch.Tensor) -> torch.Tensor:
    return rows_of(pred.detach(), pred.dim() - 1 if pred.dim() >= 2 else None).float()
