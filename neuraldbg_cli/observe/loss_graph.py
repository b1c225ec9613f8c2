"""What produced a loss's input, read off the autograd graph: the activation before it
(through reshapes and copies), and whether it is the model's output itself. Host work only:
the nodes' names and saved attributes, no tensor read."""
from __future__ import annotations

import torch

# Autograd nodes an activation's output may pass through unchanged in value on its way to the
# loss (names less their trailing version digits); and the activations told apart.
_PASS_THROUGH = frozenset((
    "ViewBackward", "UnsafeViewBackward", "ReshapeAliasBackward", "SqueezeBackward",
    "UnsqueezeBackward", "CloneBackward", "ToCopyBackward", "PermuteBackward", "TBackward",
    "TransposeBackward", "ExpandBackward", "SelectBackward", "SliceBackward", "AliasBackward"))
_ACTIVATIONS = {"SigmoidBackward": "sigmoid", "SoftmaxBackward": "softmax",
                "LogSoftmaxBackward": "log_softmax", "TanhBackward": "tanh",
                "ReluBackward": "relu"}
_FOLLOWED = _PASS_THROUGH | {"DivBackward", "MulBackward"}     # (and logits / temperature)
_DEPTH = 8          # autograd nodes followed at most from the loss input to its activation


def activation_of(out: torch.Tensor) -> tuple:
    """(the activation that produced `out`, the size of the dimension it normalised): read
    off the autograd graph, through reshapes and copies; (None, None) for anything else (a
    linear output, or a compiled graph)."""
    fn = out.grad_fn
    for _ in range(_DEPTH):
        if fn is None:
            return None, None
        found = activation_at(fn)
        if found is not None:
            return found
        if node_name(fn) not in _PASS_THROUGH:
            return None, None
        nxt = fn.next_functions
        fn = nxt[0][0] if nxt else None
    return None, None


def from_output(out: torch.Tensor, model_out) -> bool | None:
    """Whether `out` is the model's output `model_out`, reshaped, cast or scaled (a classifier's
    logits), not assembled from it (a contrastive loss's `cat([pos, neg]) / T`); None: unknown."""
    if model_out is None or model_out.grad_fn is None:
        return None
    return reaches(out.grad_fn, model_out.grad_fn)


def reaches(fn, to) -> bool:
    """Whether the autograd node `fn` is `to`, or leads to it through nothing but reshapes,
    copies and scales."""
    for _ in range(_DEPTH):
        if fn is to:
            return True
        if fn is None or node_name(fn) not in _FOLLOWED:
            return False
        fn = fn.next_functions[0][0] if fn.next_functions else None
    return False


def passed_through(t: torch.Tensor, fn) -> bool:
    """Whether `t` is the result of the autograd node `fn`, passed through nothing but
    reshapes and copies (at most _DEPTH of them)."""
    node = t.grad_fn
    for _ in range(_DEPTH):
        if node is None or node_name(node) not in _PASS_THROUGH:
            return False
        node = node.next_functions[0][0] if node.next_functions else None
        if node is fn:
            return True
    return False


def node_name(fn) -> str:
    """An autograd node's kind, less its version digits: "SigmoidBackward"."""
    return type(fn).__name__.rstrip("0123456789")


def activation_at(fn) -> tuple | None:
    """(activation, size of the dimension it normalised) of the autograd node `fn` when it is
    one of the activations told apart, else None."""
    found = _ACTIVATIONS.get(node_name(fn))
    if found is None:
        return None
    size = None
    if found in ("softmax", "log_softmax"):
        result, dim = fn._saved_result, fn._saved_dim
        if dim >= 2 ** 63:      # (a negative dim comes back as an unsigned int64)
            dim -= 2 ** 64
        size = int(result.shape[dim]) if result.dim() else 1
    return found, size
