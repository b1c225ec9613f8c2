"""The weights at first sight: each weight layer's rms against the fan-in rule for the
activation after it (He for ReLU-like units, Xavier otherwise), for `explain` to tell a bad
initialisation ("weights 20x the Xavier scale") from the causes that look alike."""
from __future__ import annotations

import math

import torch

from .kinds import PARAM, RELU, SMOOTH, SQUASH_KINDS, TRANSPOSED_WEIGHT
from .naming import class_name
from .optimizers import local_shard
from .stats import read_now

_HE = (RELU, SMOOTH)
_SUM = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def first_sight(layers: list) -> None:
    """layers: [(model event entry, module, kind)] in the model's order. Adds "weight_rms",
    "init_rule" and "init_rms" to the entries of weight layers; one read for all of them."""
    found = []
    for i, (entry, module, kind) in enumerate(layers):
        w = getattr(module, "weight", None) if kind == PARAM else None
        # (a lazy module's weight before its first call has no shape to ask: tested first)
        if not isinstance(w, torch.Tensor) or torch.nn.parameter.is_lazy(w) or w.dim() < 2 \
                or w.is_meta or w.numel() == 0 or not w.is_floating_point():
            continue
        # An FSDP2 weight is a DTensor: its rms is told by this rank's shard, a sample of its
        # rows (no collective; the norm of the DTensor would be this rank's part of the
        # whole's, over the whole's count). A rank whose shard is empty tells nothing.
        local = local_shard(w)
        if local.numel() == 0:
            continue
        found.append((entry, w, local, _follower(layers, i),
                      class_name(module) in TRANSPOSED_WEIGHT))
    if not found:
        return
    # (one norm per weight: no float copy of the model; half precision summed in float32)
    norms = read_now([torch.linalg.vector_norm(local.detach(), dtype=_SUM.get(w.dtype)).float()
                      for _, w, local, _, _ in found])
    for (entry, w, local, follower, transposed), norm in zip(found, norms):
        receptive = math.prod(w.shape[2:])
        fan_in, fan_out = w.shape[1] * receptive, w.shape[0] * receptive
        if transposed:
            fan_in, fan_out = fan_out, fan_in
        rule, scale = (("he", math.sqrt(2.0 / fan_in)) if follower in _HE else
                       ("xavier", math.sqrt(2.0 / (fan_in + fan_out))))
        entry.update(weight_rms=norm / math.sqrt(local.numel()), init_rule=rule, init_rms=scale)


def _follower(layers: list, i: int) -> str | None:
    """The activation kind right after layer i (before the next weight layer), if any."""
    for _, _, kind in layers[i + 1:]:
        if kind in _HE or kind in SQUASH_KINDS:
            return kind
        if kind == PARAM:
            return None
    return None
