"""Which layer inputs need a reading of their own for dead units.

A Linear's or a conv's input is read for units that are zero all step (a functional ReLU's,
seen by no module of its own): a full pass over it at every call. Units that a layer just
observed judges already need no second reading: its very output, or that output pooled and
reshaped (a ReLU's map, max-pooled, then flattened into a classifier; a ResNet block's input,
read again by its first conv after the downsample's conv and BatchNorm ran). Nor do the
outputs of products that mix features (attention's heads joined before its projection): no
activation switched their units off. The last few leaf outputs are remembered with their
version counters (one changed in place since is read again), for the current forward only,
in eager mode only.
"""
from __future__ import annotations

import torch

from .loss_graph import units_judged

RECENT = 4      # leaf outputs remembered
_Tensor = torch.Tensor


class JudgedOutputs:
    """The last few leaf outputs whose units a layer's numbers judge."""

    __slots__ = ("_recent",)

    def __init__(self):
        self._recent = []       # (output, its version when seen)

    def clear(self) -> None:
        self._recent = []

    def add(self, rec, args, y) -> None:
        """A leaf's output, read or passed on: judged when its units are the layer's own (not
        a Dropout's or a pool's, whose zeros are their input's), or its input's, judged."""
        if type(y) is not _Tensor or rec.transparent and not (args and self._covers(args[0])):
            return
        recent = self._recent
        recent.append((y, y._version))
        if len(recent) > RECENT:
            del recent[0]

    def read_input(self, acc, x, eager: bool) -> bool:
        """Read a layer's input `x` for its dead units into `acc` (Accumulator), unless it
        needs no reading: data straight from the loader does not require grad (its zero
        features, one-hot or padding, are not dead units), and judged units are judged
        (eager only). A computed input is read: that is how F.relu(...) is seen."""
        if not isinstance(x, _Tensor) or not x.requires_grad or not x.is_floating_point() \
                or eager and (self._covers(x) or units_judged(x, self._nodes())):
            return False
        acc.add_input(x)
        return True

    def _nodes(self) -> tuple:
        """The autograd nodes of the outputs remembered, less those changed in place since
        (whose node is now the in-place op's)."""
        return tuple(t.grad_fn for t, version in self._recent if t._version == version)

    def _covers(self, x) -> bool:
        for t, version in self._recent:
            if t is x:
                return x._version == version
        return False
