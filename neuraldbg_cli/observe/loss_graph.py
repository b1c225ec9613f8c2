"""What produced a loss's input, read off the autograd graph: the activation before it
(through reshapes and copies), and whether it is the model's output itself; and whether a
layer's input units are judged elsewhere already. Host work only: the nodes' names and saved
attributes, no tensor read."""
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
# Nodes whose every output value mixes many input values: matrix products, attention, a
# normalisation across features. No unit of their output is switched off as a ReLU's is.
_MIXING = frozenset(("MmBackward", "BmmBackward", "AddmmBackward", "BaddbmmBackward",
                     "AddbmmBackward", "MvBackward", "SoftmaxBackward", "NativeLayerNormBackward"))
_ATTENTION = "ScaledDotProduct"     # (its CPU, flash, efficient and cuDNN kernels' nodes)
# Nodes whose output is zero on a unit only where their input is, all over: pools, and the
# mean or maximum over a map's positions (global pooling by hand)
_POOLS = ("MaxPool", "AvgPool", "AdaptiveMaxPool", "AdaptiveAvgPool")
_REDUCING = frozenset(("MeanBackward", "AmaxBackward"))
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


def units_judged(t: torch.Tensor, judged: tuple) -> bool:
    """Whether no unit of `t` needs a check of its own: through reshapes, copies and pools
    it is the output of an autograd node in `judged` (a layer's, whose numbers judge those
    units: a ReLU's map pooled, then flattened), or of a product that mixes features
    (attention's heads joined before its output projection), whose units no activation
    switched off."""
    fn = t.grad_fn
    for _ in range(_DEPTH):
        if fn is None:
            return False
        if fn in judged:
            return True
        name = node_name(fn)
        if name in _MIXING or name.startswith(_ATTENTION):
            return True
        if name not in _PASS_THROUGH and name not in _REDUCING and not name.startswith(_POOLS):
            return False
        nxt = fn.next_functions
        fn = nxt[0][0] if nxt else None
    return False


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
        return _softmax_by_hand(fn)
    size = None
    if found in ("softmax", "log_softmax"):
        result = fn._saved_result
        size = int(result.shape[saved_dim(fn._saved_dim)]) if result.dim() else 1
    return found, size


def _softmax_by_hand(fn) -> tuple | None:
    """("softmax", size of the dimension summed) where the autograd node `fn` divides an exp
    by its sum along one dimension (`e = z.exp(); e / e.sum(1, keepdim=True)`: d2l's and
    makemore's softmax, the stable one of `z - max` too), else None."""
    if node_name(fn) != "DivBackward" or len(fn.next_functions) != 2:
        return None
    (num, _), (den, _) = fn.next_functions
    for _ in range(_DEPTH):     # (e.sum(1)[:, None], e.sum(1).unsqueeze(1))
        if den is None or node_name(den) not in _PASS_THROUGH:
            break
        den = den.next_functions[0][0] if den.next_functions else None
    if num is None or den is None or node_name(num) != "ExpBackward" \
            or node_name(den) != "SumBackward" or not den.next_functions:
        return None
    summed = den.next_functions[0][0]   # (the same exp, or one taken again of its input)
    if summed is not num and not (summed is not None and node_name(summed) == "ExpBackward"
                                  and summed.next_functions[0][0] is num.next_functions[0][0]):
        return None
    dims = getattr(den, "_saved_dim", None)     # (a sum over every value saves none)
    if dims is None or len(dims) != 1:
        return None
    result = num._saved_result
    return "softmax", int(result.shape[saved_dim(dims[0], result.dim())])


def activation_output(fn) -> torch.Tensor | None:
    """The output of the activation node `fn` (one activation_at tells), as it saved it."""
    result = getattr(fn, "_saved_result", None)
    if result is None and node_name(fn) == "DivBackward":   # (a softmax by hand: exp / sum)
        result = fn._saved_self / fn._saved_other
    return result


def activation_input(fn):
    """The autograd node of the input of the activation node `fn`: a softmax by hand's is the
    exp's, less a subtracted maximum (`(z - z.max(1, keepdim=True).values).exp()`)."""
    node = fn.next_functions[0][0] if fn.next_functions else None
    if node is not None and node_name(fn) == "DivBackward" and node.next_functions:
        node = node.next_functions[0][0]
        if node is not None and node_name(node) == "SubBackward" and node.next_functions:
            node = node.next_functions[0][0]
    return node


def saved_dim(dim: int, n: int | None = None) -> int:
    """A dimension an autograd node saved, as a Python index (a negative one comes back as an
    unsigned int64); with `n`, the tensor's number of dimensions, made non-negative."""
    if dim >= 2 ** 63:
        dim -= 2 ** 64
    return dim if n is None else dim % n
