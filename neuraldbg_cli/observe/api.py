"""`with NeuralDbg(model, trace="t.jsonl") as dbg:` for notebooks: the engine of `run`."""
from __future__ import annotations

import sys

from ..states import parse_signals
from ..thresholds import Thresholds, load_thresholds, parse_states


class NeuralDbg:
    """Observe training inside a `with` block; every hook is removed when it ends.

    model: observe only this module (and name layers from it); None observes every module.
    thresholds: a Thresholds, a path to a YAML file, or None for the defaults.
    fail_on: states for `dbg.failed` (e.g. "dead,nonfinite"); default from the thresholds.
    every: observe every N-th step only (default 1: every step).
    detectors: the signals observed, e.g. "activation,gradient" (or a list); default all.
    stop_on: states that stop training where a failure in them counts (e.g. "nonfinite"):
    `optimizer.step()` raises `neuraldbg_cli.TrainingStopped` before its update.
    capture: the folder where the evidence of the first counted failure is written
    (default with stop_on: "neuraldbg-capture"; else None, no capture).
    """

    def __init__(self, model=None, trace: str = "neuraldbg-trace.jsonl", thresholds=None,
                 fail_on: str | None = None, quiet: bool = True, every: int = 1,
                 detectors=None, stop_on=None, capture: str | None = None,
                 stop_mode: str = "raise"):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.every = every
        self.signals = parse_signals(detectors, what="detectors")
        self.thresholds = thresholds if isinstance(thresholds, Thresholds) else load_thresholds(thresholds)
        self.fail_on = self.thresholds.fail_on if fail_on is None else parse_states(fail_on)
        self.model = model
        self.trace = trace
        self.quiet = quiet
        self.stop_on = () if stop_on is None else parse_states(stop_on, what="stop_on") \
            if isinstance(stop_on, str) else tuple(stop_on)
        self.capture = "neuraldbg-capture" if self.stop_on and capture is None else capture
        self.stop_mode = stop_mode      # "raise"; the framework callbacks': "skip"
        self.session = None

    def __enter__(self) -> NeuralDbg:
        from .session import Session

        argv = list(sys.argv)
        self.session = Session(self.trace, self.thresholds, script=argv[0] if argv else "",
                               argv=argv, model=self.model, quiet=self.quiet, every=self.every,
                               signals=self.signals, stop_on=self.stop_on,
                               capture=self.capture, stop_mode=self.stop_mode)
        self.session.start(existing_optimizers=True)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.session.finish("completed", 0)
        elif issubclass(exc_type, KeyboardInterrupt):
            self.session.finish("interrupted", 130, "KeyboardInterrupt")
        else:
            self.session.finish("failed", 1, f"{exc_type.__name__}: {exc}")
        return False

    @property
    def transitions(self) -> list:
        """Transition events written so far (dicts as in the trace)."""
        return list(self.session.transitions) if self.session else []

    @property
    def stopped(self):
        """The TrainingStopped of a stop (its state, layer, step, capture), or None."""
        return self.session.stopped if self.session else None

    @property
    def steps(self) -> int:
        return self.session.steps if self.session else 0

    @property
    def unobserved_from(self) -> tuple | None:
        """(step, why) when a fault switched monitoring off: the steps from it on were not
        observed, and `failed` speaks of the steps before it only; else None."""
        return self.session.off if self.session else None

    @property
    def failed(self) -> bool:
        """True when a failure in a `fail_on` state counts (verdict.py: it lasted)."""
        return bool(self.session and self.session.failures(self.fail_on))

    def failures(self, states=None) -> list:
        """The onset transitions of the failures that count (verdict.py: held long enough,
        still held at the end, recurring, or non-finite) in any of `states`; by default every
        failure state. Blips, failures that did not last, are in `transitions` only."""
        if states is None:
            from ..states import failure_names

            states = failure_names()
        return self.session.failures(states) if self.session else []
