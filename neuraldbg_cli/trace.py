"""The trace file: JSON Lines, one event per line. Owns the schema version, the writer and
the reader.

Schema history:
  1  run_start, model, hparams, transition, warning, run_end (see CONTRACT.md).
"""
from __future__ import annotations

import errno
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import errors
from . import trace_shapes as shapes
from .errors import InputError
from .inert import inert

# 2: learning dynamics, loop mistakes and the output/loss pairing (signals update, loss, loop,
# output; weight scale in model events). 3: the verdict (run_end.failures, blips). Schema-1
# and schema-2 traces are still read.
SCHEMA = 3

# Pseudo-layers of the trace: the outermost module's input, the outermost module itself, the
# loss passed to backward(), the training loop, the model's output where it meets the loss.
INPUT_LAYER = "(input)"
ROOT_LAYER = "(root)"
LOSS_LAYER = "(loss)"
LOOP_LAYER = "(loop)"
OUTPUT_LAYER = "(output)"
SCALER_LAYER = "(scaler)"
# not modules: no module type to show
PSEUDO_LAYERS = (INPUT_LAYER, LOSS_LAYER, LOOP_LAYER, OUTPUT_LAYER, SCALER_LAYER)


# Made once: json.dumps with any option builds a new encoder at every call. Strict: a NaN or
# an infinity raises, and only that (rare) event goes through _clean.
_encode = json.JSONEncoder(separators=(", ", ": "), allow_nan=False).encode


def _clean(value):
    """JSON has no NaN/Infinity: write them as strings so every line stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def rank_path(path: str, rank: int) -> str:
    """NAME.jsonl -> NAME.rank{R}.jsonl (one trace per process of a distributed run)."""
    p = Path(path)
    stem, suffix = (p.stem, p.suffix) if p.suffix else (p.name, "")
    return str(p.with_name(f"{stem}.rank{rank}{suffix}"))


def check_writable(path: str) -> None:
    """Fail before the script starts if the trace cannot be created."""
    errors.check_writable(path, "trace")


class TraceWriter:
    """Appends events as single lines, each with one unbuffered write: every line is on disk
    as soon as it is written, so nothing is lost when the process dies.

    A write error (disk full, ...) never reaches the user's script: the file is cut back to
    its last complete line, one warning goes to stderr, and later events are dropped."""

    def __init__(self, path: str, warn=None):
        self.path = path
        self._pid = os.getpid()     # (a forked child, a Hogwild trainer, writes nothing here)
        self._file = open(path, "wb", buffering=0)
        self._good = 0          # offset just past the last complete line
        self._broken = False
        self._warn = warn or (lambda msg: print(f"neuraldbg: {msg}", file=sys.stderr))

    def write(self, event: dict) -> None:
        if self._broken or os.getpid() != self._pid:
            return
        try:
            text = _encode(event)
        except ValueError:      # (NaN or infinite numbers: written as strings)
            text = _encode(_clean(event))
        data = (text + "\n").encode("utf-8")
        try:
            written = self._file.write(data)
            if written != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self._good += written
        except OSError as e:
            self._fail(e)

    def close(self) -> None:
        if not self._broken:
            try:
                self._file.close()
            except OSError:
                pass

    def _fail(self, error: OSError) -> None:
        self._broken = True
        self._warn(f"trace {self.path} could not be written ({error.strerror or error}); "
                   "it ends at its last complete line, the run goes on")
        try:
            os.ftruncate(self._file.fileno(), self._good)
        except OSError:
            pass
        try:
            self._file.close()
        except OSError:
            pass


@dataclass
class Trace:
    """A trace's events (a list; an iterator from `open_trace`) and the reader's warnings."""
    path: str
    events: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    @property
    def start(self) -> dict:
        return next(e for e in self.events if e.get("event") == "run_start")

    @property
    def end(self) -> dict | None:
        return next((e for e in reversed(self.events) if e.get("event") == "run_end"), None)

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.get("event") == kind]


MAX_LINE = 1 << 20          # bytes: an event is a few hundred; anything this long is corrupt
MAX_WARNINGS = 20           # per trace: the rest are counted, not listed


def read_trace(path: str) -> Trace:
    """Parse a trace. Strict about what makes it unreadable (InputError naming file and line),
    tolerant of what a killed run leaves (a last line cut short: a warning), and wary of what
    a trace from elsewhere may hold: an event of a known kind with keys of the wrong type, an
    overlong line, a second run, events after run_end are skipped with a warning."""
    trace = Trace(path)
    trace.events = list(iter_events(path, trace.warnings))
    return trace


def open_trace(path: str) -> Trace:
    """A trace read as it is iterated, in one pass: `events` is an iterator (its `start`,
    `end` and `of` are not for this kind), `warnings` fill as it goes. What explain uses, so
    that memory does not grow with the length of the trace."""
    trace = Trace(path)
    trace.events = iter_events(path, trace.warnings)
    return trace


def iter_events(path: str, warnings: list):
    """The events of a trace, one at a time (memory bounded by one line), with warnings for
    what was skipped appended to `warnings`."""
    skipped = _Skips(path, warnings)
    with _open(path) as f:
        head = f.peek(4096)[:4096] if hasattr(f, "peek") else b""
        if b"\x00" in head:
            raise InputError(f"trace {path} is a binary file, not a JSON Lines trace")
        pending, seen_start, ended = None, False, False
        raw = b""
        for number, raw in _lines(f):
            if raw is not None and not raw.strip():
                continue
            if pending is not None:         # the line before was not an event, yet not the last
                raise InputError(f"trace {path} line {pending}: not a JSON event")
            if raw is None:
                skipped.add(number, f"longer than {MAX_LINE >> 20} MiB")
                continue
            event = _parse(path, number, raw)
            if event is None:
                pending = number
                continue
            kind = event.get("event")
            if not seen_start or kind == "run_start":
                if seen_start:
                    warnings.append(f"{path} line {number}: a second run_start (two runs in one "
                                    "file?); read up to the line before")
                    break
                _check_start(path, number, event)
                seen_start = True
            elif ended:
                skipped.add(number, f"{kind!r} event after run_end")
                continue
            problem = shapes.problem(event)
            if problem is not None:
                skipped.add(number, problem)
                continue
            ended = kind == "run_end"
            yield event
        if pending is not None:
            if pending == 1 or raw.endswith(b"\n"):
                raise InputError(f"trace {path} line {pending}: not a JSON event")
            warnings.append(f"{path} line {pending}: cut short (the run was killed?); "
                            "read up to the line before")
        if not seen_start:
            raise InputError(f"trace {path} is empty")
    skipped.close()
    if not ended and not warnings:
        warnings.append(f"{path}: no run_end (the run was killed or is still running)")


def _open(path: str):
    p = Path(path)
    try:
        return p.open("rb")
    except FileNotFoundError:
        raise InputError(f"trace not found: {path}") from None
    except IsADirectoryError:
        raise InputError(f"trace {path} is a folder, not a file") from None
    except OSError as e:
        raise InputError(f"cannot read trace {path}: {e.strerror or e}") from None


def _lines(f):
    """(line number, bytes), or (line number, None) for a line over MAX_LINE, which is read
    past in pieces rather than held."""
    number = 0
    while True:
        try:
            raw = f.readline(MAX_LINE + 1)
        except OSError as e:
            raise InputError(f"cannot read trace {f.name}: {e.strerror or e}") from None
        if not raw:
            return
        number += 1
        if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(MAX_LINE)
            yield number, None
            continue
        yield number, raw


def _parse(path: str, number: int, raw: bytes):
    """The event on one line, or None when the line is not a JSON event object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"trace {path} line {number}: not UTF-8 text") from None
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):     # RecursionError: nesting deeper than the parser goes
        return None
    return event if isinstance(event, dict) and "event" in event else None


class _Skips:
    """Warnings for skipped lines: the first few named, the rest counted."""

    def __init__(self, path: str, warnings: list):
        self.path, self.warnings, self.count = path, warnings, 0

    def add(self, number: int, why: str) -> None:
        self.count += 1
        if self.count <= MAX_WARNINGS:
            self.warnings.append(f"{self.path} line {number}: {why}; skipped")

    def close(self) -> None:
        if self.count > MAX_WARNINGS:
            self.warnings.append(f"{self.path}: {self.count - MAX_WARNINGS} more lines skipped")


def _check_start(path: str, line: int, event: dict) -> None:
    if event.get("event") != "run_start":
        raise InputError(f"trace {path} line {line}: expected run_start, found "
                         f"{inert(str(event.get('event')))!r} (not a neuraldbg trace?)")
    schema = event.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise InputError(f"trace {path} line {line}: run_start has no schema version")
    if schema > SCHEMA:
        raise InputError(f"trace {path} line {line}: schema {schema} is newer than this "
                         f"neuraldbg reads (schema {SCHEMA}); upgrade neuraldbg")
