"""One observed run: the trace file, its run_start and run_end, and the monitor between."""
from __future__ import annotations

import datetime
import os
import sys

from .. import __version__
from ..thresholds import Thresholds
from ..trace import SCHEMA, TraceWriter, rank_path


def dist_rank() -> tuple[int, int]:
    """(rank, world_size) from torchrun's environment; (0, 1) for a plain run."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def trace_path_for(path: str) -> str:
    rank, world = dist_rank()
    return rank_path(path, rank) if world > 1 else path


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class Session:
    """Writes run_start, runs the monitor, writes run_end; `finish` is safe to call once from
    a `finally`, so a crash or an interrupt still closes the trace."""

    def __init__(self, trace: str, thresholds: Thresholds, *, script: str, argv: list,
                 model=None, quiet: bool = False, every: int = 1):
        import torch

        from .monitor import Monitor

        self.rank, self.world_size = dist_rank()
        self.path = trace_path_for(trace)
        self.thresholds = thresholds
        self.quiet = quiet or self.rank != 0
        self.writer = TraceWriter(self.path, warn=self.warn)
        self.transitions: list = []
        self.writer.write({
            "event": "run_start", "schema": SCHEMA, "version": __version__, "script": script,
            "argv": list(argv), "torch": torch.__version__, "thresholds": thresholds.to_dict(),
            "rank": self.rank, "world_size": self.world_size, "every": every, "pid": os.getpid(),
            "run_id": os.environ.get("TORCHELASTIC_RUN_ID"), "time": _now()})
        self.monitor = Monitor(thresholds, self._emit, model=model, warn=self.warn, every=every)
        self._finished = False

    def warn(self, msg: str) -> None:
        # Warnings go to stderr on every rank: they concern that rank's own trace.
        print(f"neuraldbg: {msg}", file=sys.stderr, flush=True)

    def _emit(self, event: dict) -> None:
        if event["event"] == "transition":
            self.transitions.append(event)
        # Each event is written through at once (events are rare: transitions, not steps),
        # so the file is complete up to its last line whenever the process dies.
        self.writer.write(event)

    def start(self, existing_optimizers: bool = False) -> None:
        self.monitor.install(existing_optimizers)

    def failures(self, states) -> list:
        """The confirmed transitions into any of `states`."""
        wanted = set(states)
        return [t for t in self.transitions if t["to"] in wanted]

    def finish(self, status: str, exit_code: int, error: str | None = None,
               fail_on=()) -> int:
        """Close the trace; returns the exit status: the script's own, or 3 when the script
        succeeded but a `fail_on` state was detected."""
        if self._finished:
            return self.exit_code
        self._finished = True
        self.exit_code = exit_code
        try:
            self.monitor.close(completed=status == "completed")
            if exit_code == 0 and self.failures(fail_on):
                self.exit_code = 3
        finally:
            self.writer.write({"event": "run_end", "status": status, "steps": self.monitor.steps,
                               "exit_code": self.exit_code, "error": error, "time": _now()})
            self.writer.close()
        return self.exit_code
