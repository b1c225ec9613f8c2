"""The step's one host read: at once on the CPU, when ready on a CUDA device.

On a GPU a blocking read (`.tolist()`) waits for every kernel queued so far, every step: the
device then idles while Python prepares the next step. Instead, step k's numbers are stacked,
copied without blocking into pinned host memory, and a CUDA event is recorded after the copy;
step k is judged at a later step end, once its event has completed (or at close, after
waiting for it). The job handed in with the tensors comes back with the values, so step k's
transitions are still dated to step k.
"""
from __future__ import annotations

from collections import deque

import torch

from .stats import read_now

_MAX_PENDING = 4        # steps read but not yet judged: beyond this, wait for the oldest


class Readout:
    """Turns each step's 0-d tensors into floats, in step order.

    defer(first tensor) -> bool decides which steps are read when ready (default: those on a
    CUDA device); pin and event (a factory of objects with record(), query() and
    synchronize(), as torch.cuda.Event) are there for tests to run the deferred path on the
    CPU."""

    def __init__(self, defer=None, pin: bool = True, event=None):
        self._defer = defer
        self._pin = pin
        self._event = event
        self._pending: deque = deque()      # (host buffer, event, job), oldest first

    def submit(self, tensors: list, job) -> list:
        """[(values, job)] of the steps now readable, oldest first; perhaps none yet."""
        first = tensors[0]
        # (the default test inline: this runs at every step)
        if not (first.is_cuda if self._defer is None else self._defer(first)):
            now = (read_now(tensors), job)
            return [*self.drain(), now] if self._pending else [now]
        home = first.device
        stacked = torch.stack([t if t.device == home else t.to(home) for t in tensors])
        host = torch.empty(stacked.shape, dtype=stacked.dtype,
                           pin_memory=self._pin and torch.cuda.is_available())
        host.copy_(stacked, non_blocking=True)
        event = self._event() if self._event is not None else torch.cuda.Event()
        event.record()
        self._pending.append((host, event, job))
        return self._ready(_MAX_PENDING)

    def drain(self) -> list:
        """Every step still pending, waiting for the device where needed."""
        return self._ready(0)

    def _ready(self, keep: int) -> list:
        out, pending = [], self._pending
        while pending:
            host, event, job = pending[0]
            if not event.query():
                if len(pending) <= keep:
                    break
                event.synchronize()
            pending.popleft()
            out.append((host.tolist(), job))
        return out
