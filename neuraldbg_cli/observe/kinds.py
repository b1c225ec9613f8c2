"""Activation kinds: how a layer's output is judged, told from its module type."""
from __future__ import annotations

from torch import nn

from .naming import class_name

RELU = "relu"          # ReLU, ReLU6: dies (units output exactly zero)
SMOOTH = "smooth"      # GELU, SiLU, Mish: stuck in the flat negative tail
SIGMOID = "sigmoid"    # saturates near 0 and near 1
TANH = "tanh"          # saturates near -1 and +1
PARAM = "param"        # Linear / conv: their input is checked for dead units (F.relu upstream)
OTHER = "other"        # everything else: non-finite values and sudden shifts only
CONTAINER = "container"  # a module with children, judged on parameters of its own (a gradient)
INPUT_KIND = "input"   # the outermost module's input (the pseudo-layer trace.INPUT_LAYER)
LOSS_KIND = "loss"     # the loss passed to backward() (the pseudo-layer trace.LOSS_LAYER)
LOOP_KIND = "loop"     # the training loop itself (the pseudo-layer trace.LOOP_LAYER)
OUTPUT_KIND = "output"  # the model's output at the loss call (the pseudo-layer trace.OUTPUT_LAYER)
SCALER_KIND = "scaler"  # torch.amp.GradScaler's loss scale (the pseudo-layer trace.SCALER_LAYER)

UNIT_KINDS = (RELU, SMOOTH)         # per-unit maxima tell inactive units
SQUASH_KINDS = (SIGMOID, TANH)      # per-unit mean derivative tells saturated units

_KINDS = (
    ((nn.ReLU, nn.ReLU6), RELU),
    ((nn.GELU, nn.SiLU, nn.Mish), SMOOTH),
    ((nn.Sigmoid,), SIGMOID),
    ((nn.Tanh,), TANH),
    ((nn.Linear, nn.modules.conv._ConvNd), PARAM),
)
# Activation and weight classes of frameworks, known by class name (the core never imports
# them): Hugging Face transformers' activations (transformers.activations) and GPT-2's
# Conv1D, a Linear with its weight transposed (transformers.pytorch_utils).
_NAMED_KINDS = {
    "GELUActivation": SMOOTH, "NewGELUActivation": SMOOTH, "FastGELUActivation": SMOOTH,
    "QuickGELUActivation": SMOOTH, "GELUTanh": SMOOTH, "PytorchGELUTanh": SMOOTH,
    "AccurateGELUActivation": SMOOTH, "MishActivation": SMOOTH, "SiLUActivation": SMOOTH,
    "ClippedGELUActivation": SMOOTH, "GELUActivationPyTorch": SMOOTH,
    "Conv1D": PARAM,
}
TRANSPOSED_WEIGHT = ("Conv1D",)     # class names whose weight is (in, out)

# Modules whose 3-D tensors are (batch, channels, length) rather than (batch, time, features).
CHANNEL_FIRST = (nn.modules.conv._ConvNd, nn.modules.batchnorm._BatchNorm,
                 nn.modules.instancenorm._InstanceNorm, nn.modules.pooling._MaxPoolNd,
                 nn.modules.pooling._AvgPoolNd)
# Modules whose output is their input, reshaped or (Dropout) masked and rescaled: their own
# numbers only echo the layer before them, so they are not judged (a healthy run's shift in
# a Linear was told twice, once again by the Dropout after it).
ECHOING = (nn.modules.dropout._DropoutNd, nn.Identity, nn.Flatten, nn.Unflatten)
# Modules whose forward does their children's work in one function (nn.MultiheadAttention
# calls F.multi_head_attention_forward with out_proj's weight; out_proj is never called):
# their own output is that of the child never seen, and is read as a layer's.
FUSED = (nn.MultiheadAttention,)
# Modules whose output keeps the zeros of their input: what follows them must look for
# dead units itself.
TRANSPARENT = (nn.modules.dropout._DropoutNd, nn.Identity, nn.Flatten, nn.Unflatten,
               nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd,
               nn.modules.pooling._AdaptiveMaxPoolNd, nn.modules.pooling._AdaptiveAvgPoolNd)


def kind_of(module: nn.Module) -> str:
    for types, kind in _KINDS:
        if isinstance(module, types):
            return kind
    return _NAMED_KINDS.get(class_name(module), OTHER)     # (FSDPConv1D is a Conv1D)
