"""Layers sharded by FSDP: each rank's trace holds its own shard's gradient norm (no
collective is made at run time); the layer's norm is the square root of the ranks' sums of
squares, combined here from the summaries of the traces of one run."""
from __future__ import annotations

import math

from .runs import GRAD


def combined(runs: list, run: int, layer: str, step: int) -> tuple | None:
    """(the layer's gradient norm, the summary step it is from, ranks found, world size) at
    the last summary step at or before `step`, over the traces of run `run`'s launch; None
    where the layer is not sharded there or no summary is that early."""
    me = runs[run]
    ranks = [r for r in runs if r.run_id == me.run_id and r.world_size == me.world_size
             and r.script == me.script]
    steps = [s for r in ranks for (name, s) in r.shards if name == layer and s <= step]
    if not steps:
        return None
    at = max(steps)
    # (a rank with an empty shard of the layer has no norm of it: it adds nothing)
    total = sum(r.shards.get((layer, at), 0.0) ** 2 for r in ranks)
    return math.sqrt(total), at, len({r.rank for r in ranks}), me.world_size


def evidence(ep, runs: list) -> list:
    """A line for a gradient failure of a sharded layer: the whole layer's norm beside this
    rank's shard's."""
    if ep.signal != GRAD:
        return []
    found = combined(runs, ep.run, ep.layer, ep.onset)
    if found is None:
        return []
    norm, at, ranks, world = found
    mine = runs[ep.run].shards[(ep.layer, at)] if (ep.layer, at) in runs[ep.run].shards else 0.0
    partial = "" if ranks >= world else f" (the traces of {ranks} of {world} ranks)"
    return [f"{ep.layer} is sharded (FSDP): its whole gradient norm was {norm:.4g} at step {at}"
            f"{partial}, rank {ep.rank}'s shard {mine:.4g}"]
