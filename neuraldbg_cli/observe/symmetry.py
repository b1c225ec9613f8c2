"""Units that are copies of one another: a weight layer whose every unit (a Linear's output
feature, a conv's output channel) holds the same incoming weights after the optimizer has
moved them.

Units that start equal (weights initialised to zero or to a constant) compute the same
output and, when the layer after them also holds the same weights for each of them, get the
same gradient: no step can tell them apart, and the layer is worth one unit. Random weights
anywhere around them break the tie at the first step, which is why the reading is taken
after steps, never of the initial weights (a zero-initialised layer fed to a random one is
healthy). Rounding sets copies apart, a few parts in a million at first and more with every
step, so units count as copies within `update.symmetric_spread` of the weights' largest
magnitude (the update detector keeps them copies until 100x further apart, and the verdict
counts them only if they still are when the run ends).

A reading is two passes over each weight (its per-input minimum and maximum over the units),
so it is taken rarely: at the `update.symmetric_first`-th step whose updates were sampled and
every `update.symmetric_every` after it, its two numbers a layer read with the step's others.
"""
from __future__ import annotations

import torch

from .kinds import TRANSPOSED_WEIGHT
from .optimizers import local_shard
from .updates import UpdateBatch

# Rows that are vocabulary entries, not units: tokens never seen keep their initial rows.
_NOT_UNITS = ("Embedding", "EmbeddingBag")


def due(count: int, first: int, every: int) -> bool:
    """Whether the `count`-th observed step (from 1) takes a reading."""
    return count >= first and (count - first) % every == 0


def unit_weights(rec) -> torch.Tensor | None:
    """The layer's trainable weight as (units, inputs), or None where it has no units to
    compare (no 2-D weight, fewer than 2 units, rows that are vocabulary entries)."""
    module = rec.ref() if rec.ref is not None else None
    w = getattr(module, "weight", None) if module is not None else None
    if not isinstance(w, torch.Tensor) or not w.requires_grad or w.dim() < 2 or w.is_meta \
            or not w.is_floating_point() or rec.module_type in _NOT_UNITS \
            or torch.nn.parameter.is_lazy(w) or w.layout is not torch.strided:
        return None
    w = local_shard(w).detach()
    if rec.module_type in TRANSPOSED_WEIGHT or rec.module_type.startswith("ConvTranspose"):
        w = w.transpose(0, 1)       # (in, out, ...): the units are the outputs
    if w.shape[0] < 2 or w.numel() == 0:
        return None
    return w.reshape(w.shape[0], -1)


def spread_tensors(batches: list) -> tuple:
    """(0-d tensors to read with the step's others, [layer record]) for the layers with units
    among those whose updates the UpdateBatches of `batches` sampled: per layer, how far its
    units' weights are from one another, and their largest magnitude."""
    tensors, recs, seen = [], [], set()
    for batch in batches:
        if type(batch) is not UpdateBatch:
            continue
        for rec, _ in batch.groups:
            if rec in seen or not rec.on_update:
                continue
            seen.add(rec)
            try:
                w = unit_weights(rec)
                if w is None:
                    continue
                # per input, over the units (two reductions: aminmax along a dimension
                # runs 5-10x slower on the CPU, 4.8 ms against 0.4 on a 1024x1024 weight)
                lo, hi = w.amin(0), w.amax(0)
                read = [(hi - lo).amax().float(), torch.maximum(hi, lo.neg()).amax().float()]
            except Exception:   # noqa: BLE001 - a weight of a kind these ops do not take
                continue        # (a tensor subclass) is not read; the run stays observed
            tensors += read
            recs.append(rec)
    return tensors, recs


def spreads(recs: list, values: list) -> dict:
    """{layer record: (how far its units' weights are from one another) / (their largest
    magnitude), 0.0 for exact copies; None where the weights are all zero} from the values
    read for spread_tensors."""
    return {rec: (spread / scale if scale > 0 else None)
            for rec, spread, scale in zip(recs, values[::2], values[1::2])}
