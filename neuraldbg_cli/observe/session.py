"""One observed run: the trace file, its run_start and run_end, and the monitor between."""
from __future__ import annotations

import datetime
import importlib.metadata
import os
import sys
import weakref

from .. import __version__
from ..thresholds import Thresholds
from ..trace import SCHEMA, TraceWriter, rank_path
from ..verdict import Ledger, Rule
from .on_import import AfterImport


def dist_rank() -> tuple[int, int]:
    """(rank, world_size) from torchrun's environment; (0, 1) for a plain run."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def trace_path_for(path: str) -> str:
    rank, world = dist_rank()
    return rank_path(path, rank) if world > 1 else path


def _torch_version() -> str | None:
    """torch's version without importing it (the script imports it, if at all)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.__version__
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _failure(t: dict) -> bool:
    from ..states import state_of

    known = state_of(t["signal"], t["to"])
    return known is not None and known.failure


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _forked(ref) -> None:
    """In a forked child (a Hogwild trainer, a DataLoader worker): the parent's monitoring is
    not the child's, so it stops here; the trace writer writes nothing from a child either."""
    session = ref()
    if session is not None and session.monitor is not None:
        session.monitor.hooks.active = session.monitor.hooks.observing = False


class Session:
    """Writes run_start, runs the monitor, writes run_end; `finish` is safe to call once from
    a `finally`, so a crash or an interrupt still closes the trace."""

    def __init__(self, trace: str, thresholds: Thresholds, *, script: str, argv: list,
                 model=None, quiet: bool = False, every: int = 1, signals=None,
                 stop_on=(), capture: str | None = None, stop_mode: str = "raise"):
        """stop_on: states that stop training (stopper.py); capture: the folder of the
        capture of the first counted failure, or None; stop_mode: "raise" or "skip"."""
        self.rank, self.world_size = dist_rank()
        self.path = trace_path_for(trace)
        self.thresholds = thresholds
        self.quiet = quiet or self.rank != 0
        self.writer = TraceWriter(self.path, warn=self.warn)
        self.transitions: list = []
        self.ledger = Ledger(Rule.of(thresholds.to_dict()["verdict"], every))
        self.writer.write({
            "event": "run_start", "schema": SCHEMA, "version": __version__, "script": script,
            "argv": list(argv), "torch": _torch_version(), "thresholds": thresholds.to_dict(),
            "rank": self.rank, "world_size": self.world_size, "every": every,
            "detectors": None if signals is None else list(signals), "pid": os.getpid(),
            "run_id": os.environ.get("TORCHELASTIC_RUN_ID"), "time": _now()})
        self.monitor = None         # made once torch is imported (by the script, under `run`)
        self._off = None            # (0, why) the monitor could not be installed
        self._model, self._every, self._signals = model, every, signals
        self._watch = None
        self._finished = False
        self.stop_on, self.capture, self._stop_mode = tuple(stop_on), capture, stop_mode
        self.stopper = None
        self.on_stop = None         # callable, called once when training is stopped

    def warn(self, msg: str) -> None:
        # Warnings go to stderr on every rank: they concern that rank's own trace.
        print(f"neuraldbg: {msg}", file=sys.stderr, flush=True)

    def _emit(self, event: dict) -> None:
        if event["event"] == "transition":
            self.transitions.append(event)
            self.ledger.add(event)
        # Each event is written through at once (events are rare: transitions, not steps),
        # so the file is complete up to its last line whenever the process dies.
        self.writer.write(event)

    def start(self, existing_optimizers: bool = False) -> None:
        """Observe from now on: at once if torch is loaded, else as soon as it is imported."""
        def begin():
            self._begin(existing_optimizers)
        self._watch = AfterImport("torch", begin)
        self._watch.install()
        if hasattr(os, "register_at_fork"):
            me = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: _forked(me))

    def _begin(self, existing_optimizers: bool) -> None:
        try:
            from .monitor import Monitor

            self.monitor = Monitor(self.thresholds, self._emit, model=self._model, warn=self.warn,
                                   every=self._every, signals=self._signals)
            self.monitor.install(existing_optimizers)
            if self.stop_on or self.capture is not None:
                from .stopper import Stopper

                self.stopper = Stopper(self, self.monitor, self.stop_on, self.capture,
                                       self._stop_mode)
                self.stopper.install()
        except Exception as e:  # noqa: BLE001 - the script's own import must not fail for it
            if self.monitor is not None:
                try:
                    self.monitor.remove()       # whatever part of it was installed
                except Exception:  # noqa: BLE001
                    pass
            self.monitor = None
            self._off = (0, f"{type(e).__name__}: {e}")
            msg = f"monitoring switched off: {type(e).__name__}: {e}"
            self.warn(msg)
            self._emit({"event": "warning", "step": 0, "layer": None, "message": msg})

    @property
    def stopped(self):
        """The TrainingStopped of a stop (stopper.py), or None."""
        return self.stopper.stopped if self.stopper is not None else None

    @property
    def steps(self) -> int:
        return self.monitor.steps if self.monitor is not None else 0

    @property
    def off(self) -> tuple | None:
        """(step, why) when a fault switched monitoring off: nothing after it was observed."""
        return self.monitor.off if self.monitor is not None else self._off

    @property
    def torch_func(self) -> bool:
        """A model was called inside a torch.func transform (vmap, grad), where it is not read."""
        return self.monitor is not None and self.monitor.hooks.transformed

    def failures(self, states) -> list:
        """The onset transitions of the episodes that count (verdict.py) in any of `states`;
        a warning sign asked for by name (anomalous) counts at every transition into it."""
        wanted = set(states)
        counted = [h.transition for h in self.ledger.counted(self.steps, self._finished, wanted)]
        signs = [t for t in self.transitions if t["to"] in wanted and not _failure(t)]
        return sorted(counted + signs, key=lambda t: t["step"])

    def blips(self) -> int:
        """Failure episodes too short to count (so far)."""
        return self.ledger.blip_count(self.steps, self._finished)

    def finish(self, status: str, exit_code: int, error: str | None = None,
               fail_on=()) -> int:
        """Close the trace; returns the exit status: the script's own, or 3 when the script
        succeeded but a `fail_on` state was detected, or when training was stopped (whatever
        happened after: the script re-raised or swallowed the exception, exited, or was
        ended by a signal, as torchrun ends every rank once one has stopped)."""
        if self._finished:
            return self.exit_code
        self._finished = True
        self.exit_code = exit_code
        try:
            if self._watch is not None:
                self._watch.remove()
            if self.monitor is not None:
                self.monitor.close(completed=status == "completed")
            if self.stopper is not None:
                self.stopper.remove()
                self.stopper.at_end()
            if self.stopped is not None:    # (a SIGTERM too: torchrun ends the other ranks)
                status, error, self.exit_code = "stopped", None, 3
            elif exit_code == 0 and self.failures(fail_on):
                self.exit_code = 3
        finally:
            stop = self.stopped if status == "stopped" else None
            self.writer.write({"event": "run_end", "status": status, "steps": self.steps,
                               "exit_code": self.exit_code, "error": error,
                               "failures": self.ledger.total(self.steps, True),
                               "blips": self.blips(), "time": _now(),
                               **({"stop": stop.to_dict()} if stop is not None else {}),
                               **({"unobserved_from": self.off[0]} if self.off else {}),
                               **({"torch_func": True} if self.torch_func else {})})
            self.writer.close()
        return self.exit_code
