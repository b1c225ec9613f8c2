"""Which dataset indices each batch was built from: the DataLoader's iterator, observed in
the main process.

The main process's iterator draws every index batch from the sampler (`_next_index`), sends
it to a worker under a task number, and hands the batches back in task order: so the indices
of the batch `next()` returns are known without touching the workers. Map-style datasets
only (an IterableDataset has no indices); with `in_order=False` the order is the workers',
and the indices are not claimed. Bounded: per iterator, the index batches in flight (at most
prefetch_factor x num_workers); overall, the last batch returned.
"""
from __future__ import annotations

from torch.utils.data import dataloader as _dl

_Base = _dl._BaseDataLoaderIter
_MAP = _dl._DatasetKind.Map
_SENT = "_neuraldbg_sent"        # iterator attribute: task number -> index batch in flight


class SampleIndices:
    """`last`: the index batch (a list of ints, or one int) of the batch most recently
    returned by any DataLoader iterator; None when unknown."""

    def __init__(self):
        self.last = None
        self._saved = None

    def install(self) -> None:
        if self._saved is not None:
            return
        self._saved = (_Base._next_index, _Base.__next__)
        next_index, next_batch = self._saved
        me = self

        def _next_index(it):
            index = next_index(it)
            if it._dataset_kind == _MAP:
                sent = getattr(it, "_send_idx", None)       # (worker processes: in flight)
                it.__dict__.setdefault(_SENT, {})[-1 if sent is None else sent] = index
            return index

        def __next__(it):
            batch = next_batch(it)
            sent = it.__dict__.get(_SENT)
            if sent is None:
                me.last = None
            elif not hasattr(it, "_rcvd_idx"):              # in this process
                me.last = sent.pop(-1, None)
            else:
                me.last = sent.pop(it._rcvd_idx - 1, None) if it._in_order else None
            return batch

        _Base._next_index, _Base.__next__ = _next_index, __next__

    def remove(self) -> None:
        if self._saved is not None:
            _Base._next_index, _Base.__next__ = self._saved
            self._saved = None
