"""Losses written by hand, read off the autograd graph: `((model(x) - y) ** 2).mean()`, a
clamped BCE `-(t * p.clamp(eps, 1 - eps).log() + ...)`, `-(y * torch.log(p)).sum(1).mean()`.

Most ported and research code writes its loss this way, so no `torch.nn.functional` loss is
called for pairing.py to see. At the backward() of a step whose output pairing is read (and
where no functional loss was seen), the graph from the loss is searched breadth first
(bounded: MAX_NODES nodes) for what the loss does with the prediction:

- a log taken of it through nothing but clamps, `1 - p` and indexing: a likelihood, which
  expects probabilities (`log_likelihood`); the prediction is the model's output, or a
  sigmoid/softmax/tanh applied to it on the way (a softmax taken in the training loop);
  where indexing picked each row's class (`-torch.log(p[range(n), y])`), its index is
  the targets;
- each row's class picked out of a log_softmax (`-lp[range(n), y].mean()`,
  `-lp.gather(1, y[:, None])`, `-lp[y]` of one example): a negative log-likelihood with
  class-index targets, read as `nll_loss` is; a product on its way to the loss
  (REINFORCE's advantages, a mask, a constant factor alike) makes it something else, which
  is not read;
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

from .loss_graph import (
    activation_at,
    activation_input,
    activation_of,
    activation_output,
    node_name,
    reaches,
    saved_dim,
)
from .pairing import LossCall, low_dtype, read_call, rows_of

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
# Picking each row's class; and between that pick and the loss, what keeps it a class loss
# (a mean, a sum of terms, a division by a count). Not a product: a factor of one value may be
# an advantage (REINFORCE on one action a step, `-(r - baseline) * lp[a]`), as well as a
# constant (label smoothing's 1 - eps), and the graph does not tell them apart
_PICKS = frozenset(("SelectBackward", "IndexBackward", "GatherBackward"))
_TO_LOSS = frozenset(("NegBackward", "MeanBackward", "SumBackward", "AddBackward", "DivBackward",
                      "SqueezeBackward", "UnsqueezeBackward", "ViewBackward",
                      "UnsafeViewBackward", "ReshapeAliasBackward"))
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
            found = _log_of(fn, parent, out, target_fn)
            if found is not None:
                return found
        elif kind == "SubBackward" and parent[fn] is not None:
            found = _regression(fn, parent[fn], out, target_fn)
            if found is not None:
                return found
        elif kind in _PICKS:
            found = _picked_log_prob(fn, parent, target_fn)
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
            result = activation_output(fn)
            return (result, *found, depth > 0) if isinstance(result, torch.Tensor) else None
        if node_name(fn) not in _RESHAPES:
            return None
        fn = fn.next_functions[0][0] if fn.next_functions else None
    return None


def _log_of(log_fn, parent: dict, out, target_fn) -> LossCall | None:
    """log(p): p is the prediction, through clamps, 1 - p and indexing; parent[log_fn], the
    node that took the log (t * log(p): the targets are what it saved besides)."""
    fn = log_fn.next_functions[0][0] if log_fn.next_functions else None
    pick = None
    for _ in range(MAX_NODES):
        if fn is None or fn is target_fn or activation_at(fn) is not None:
            break
        if node_name(fn) not in _DIRECT:
            return None     # (a log of something computed from the output: a density)
        pick = fn
        # (1 - p, p + eps: the operand with a gradient is the way to the prediction)
        fn = next((n for n, _ in fn.next_functions if n is not None), None)
    found = _prediction(fn, out, target_fn)
    if found is None or found[0].dim() == 0:
        return None
    pred, act, size, _ = found
    # (each row's class picked from the prediction itself, in a class loss: its index is the
    # targets; -log(p[range(n), a]) * advantage is a policy's loss, its actions no labels)
    picked = _class_index(pick, pred) if pick is not None and pred.dim() <= 2 \
        and pick.next_functions[0][0] is fn and _to_loss(log_fn, parent) else None
    if picked is not None:      # (one example's row of probabilities read as a batch of 1)
        # (whether the probabilities are the model's: a contrastive loss's are of similarities)
        model = None if target_fn is None else fn is target_fn or reaches(
            activation_input(fn), target_fn)
        return read_call(LOG_LIKELIHOOD, pred if pred.dim() == 2 else pred.reshape(1, -1),
                         picked[1])._replace(activation=act, normalised=size,
                                             dtype=low_dtype(pred), from_model=model)
    o = _rows(pred)
    target = _targets_of(parent[log_fn])
    if target is not None:
        t = rows_of(target.detach(), target.dim() - 1 if target.dim() >= 2 else None).float()
        bounds = [*t.aminmax()]
    else:
        bounds = [torch.full((), float("nan"), device=o.device)] * 2
    return LossCall(LOG_LIKELIHOOD, act, size, _units(pred), int(o.shape[0]), "float",
                    tuple(pred.shape), tuple(pred.shape), _NAMES, [*o.aminmax(), *bounds],
                    dtype=low_dtype(pred))


def _picked_log_prob(pick, parent: dict, target_fn) -> LossCall | None:
    """-lp[range(n), y]: each row's class picked out of a log_softmax, and nothing but
    means, sums and constant factors on its way to the loss: the LossCall of `nll_loss` on
    those log-probabilities and targets."""
    lsm = pick.next_functions[0][0] if pick.next_functions else None
    if lsm is None or node_name(lsm) != "LogSoftmaxBackward" or not _to_loss(pick, parent):
        return None
    picked = _class_index(pick, lsm._saved_result)
    if picked is None:
        return None
    lp, targets = picked
    # (None where the model's output is not known: a model of bare tensors)
    model = None if target_fn is None else reaches(lsm.next_functions[0][0], target_fn)
    return read_call("nll_loss", lp, targets)._replace(dtype=low_dtype(lp), from_model=model)


def _to_loss(node, parent: dict) -> bool:
    """The way up from `node` to the loss holds nothing but means, sums, reshapes and
    divisions by one value (a weight per row or a factor, an advantage or a mask, makes it
    no class loss)."""
    node = parent[node]
    while node is not None:
        kind = node_name(node)
        if kind not in _TO_LOSS or kind == "DivBackward" and any(
                isinstance(t, torch.Tensor) and t.numel() > 1
                for t in (getattr(node, "_saved_self", None), getattr(node, "_saved_other", None))):
            return False
        node = parent[node]
    return True


def _class_index(pick, probs: torch.Tensor) -> tuple | None:
    """(probs with its classes at dimension 1 (a row of one example: 0), each row's class
    index) where the autograd node `pick` took one class per row out of `probs`, else None
    (a slice, a column of constant index, several classes a row)."""
    kind, n = node_name(pick), probs.dim()
    if kind not in _PICKS:
        return None
    if kind == "SelectBackward":        # lp[y] of one example (an int, or a 0-d tensor)
        if n != 1:
            return None     # (lp[:, 0]: the same class for every row, by construction)
        index = int(pick._saved_index) % probs.shape[0]
        return probs, torch.tensor([index], device=probs.device)
    if kind == "GatherBackward":        # lp.gather(dim, y.unsqueeze(dim))
        dim, index = saved_dim(pick._saved_dim, n), pick._saved_index
        if index.dim() != n or index.shape[dim] != 1:
            return None
        return (probs.movedim(dim, 1) if n >= 2 and dim != 1 else probs), index.squeeze(dim)
    indices = pick._saved_indices       # lp[range(n), y]
    if n == 2 and len(indices) == 2 and all(
            isinstance(i, torch.Tensor) and i.dim() == 1 and not i.is_floating_point()
            and i.dtype != torch.bool for i in indices) and indices[0].shape == indices[1].shape:
        return probs, indices[1]
    return None


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
