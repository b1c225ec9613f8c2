"""Residual health: a block whose branch overwhelms its skip so that the stream grows
geometrically from block to block (`exploding`), or whose branch adds nothing (`collapsed`:
the block is skipped).

Blocks are not layers the registry knows: the hooks find them at their first call
(observe/residual.py) and hand them to every detector with `blocks = True`, so `needs` asks
for nothing. facts (step end): "branch_ratio" ||out - in|| / ||in||, "rms_in", "rms_out",
"growth" (rms_out / rms_in), summed over the step's calls; where the block is in a run of
consecutive blocks each growing the stream `residual.growth` times: "run_blocks",
"run_index" (its place in the run, 0: the first), "run_growth" (per block over the run),
"run_rms_from", "run_rms_to", "run_nonfinite", "run_branch_growth" (the branch's rms,
per block over the run). Exploding: a run of `residual.blocks` or more whose branches grow
too, at least `residual.branch_growth` per block."""
from __future__ import annotations

import math
from collections import deque

from ... import states
from . import register
from .base import Detector, Observation

_KEEP = ("branch_ratio", "growth", "rms_in", "rms_out", "run_blocks", "run_index",
         "run_growth", "run_rms_from", "run_rms_to", "run_branch_growth")


class ResidualHistory:
    __slots__ = ("steps", "ratios", "last")

    def __init__(self, window: int):
        self.steps = 0                      # steps judged
        self.ratios = deque(maxlen=window)  # the last branch ratios (window - 1 are used)
        self.last = "normal"                # the last verdict on a finite stream


class ResidualDetector(Detector):
    """Every residual block found by the hooks (eager calls with gradients in training)."""

    signal = states.RESIDUAL
    blocks = True       # watches the hooks' residual blocks (observe/residual.py)

    @property
    def cover(self) -> int:
        """Calls within which a large block's branch must have been read on every row: the
        steps a collapse is judged over (observe/residual.py samples rows within that)."""
        return self.th.residual.window

    def history(self) -> ResidualHistory:
        return ResidualHistory(self.th.residual.window)

    def judge(self, x: Observation, h: ResidualHistory) -> tuple:
        f = x.facts
        if not math.isfinite(f["rms_in"]):
            # the stream reached it broken (NaN/inf from before): nothing new to judge
            return h.last, {}
        state = self._verdict(f, h)
        if state == "exploding":
            # the stream overflowing is confirmed at once, as NaN is: the next step's weights
            # are NaN, and the run is no longer there to see
            return state, {"urgent": True} if f.get("run_nonfinite") else {}
        return state, {}

    def _verdict(self, f: dict, h: ResidualHistory) -> str:
        th = self.th.residual
        # (a normalised branch adds a like amount whatever the stream's scale: the stream may
        # grow along the blocks, the branches do not; an unnormalised one scales with it)
        if f.get("run_blocks", 0) >= th.blocks and f["run_branch_growth"] >= th.branch_growth:
            return "exploding"
        ratio = f["branch_ratio"]
        if h.steps >= th.warmup and ratio < th.collapse_ratio and \
                all(r < th.collapse_ratio for r in list(h.ratios)[-(th.window - 1):]) and \
                len(h.ratios) >= th.window - 1:
            return "collapsed"
        return "normal"

    def remember(self, x: Observation, h: ResidualHistory) -> None:
        f = x.facts
        if not math.isfinite(f["rms_in"]):
            return
        h.last = self._verdict(f, h)
        h.steps += 1
        if math.isfinite(f["branch_ratio"]):
            h.ratios.append(f["branch_ratio"])

    def evidence(self, x: Observation, extra: dict) -> dict:
        f = x.facts
        return {**{k: f[k] for k in _KEEP if f.get(k) is not None}, **extra}


register(ResidualDetector)
