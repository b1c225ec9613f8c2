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

from .errors import InputError

SCHEMA = 1


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
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"cannot write trace {path}: folder {folder} does not exist")
    if p.is_dir():
        raise InputError(f"cannot write trace {path}: it is a folder")
    if not os.access(folder, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"cannot write trace {path}: permission denied")


class TraceWriter:
    """Appends events as single lines, each with one unbuffered write: every line is on disk
    as soon as it is written, so nothing is lost when the process dies.

    A write error (disk full, ...) never reaches the user's script: the file is cut back to
    its last complete line, one warning goes to stderr, and later events are dropped."""

    def __init__(self, path: str, warn=None):
        self.path = path
        self._file = open(path, "wb", buffering=0)
        self._good = 0          # offset just past the last complete line
        self._broken = False
        self._warn = warn or (lambda msg: print(f"neuraldbg: {msg}", file=sys.stderr))

    def write(self, event: dict) -> None:
        if self._broken:
            return
        data = (json.dumps(_clean(event), separators=(", ", ": ")) + "\n").encode("utf-8")
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


def read_trace(path: str) -> Trace:
    """Parse a trace. Strict about what makes it unreadable (InputError naming file and line),
    tolerant of what a killed run leaves (a last line cut short: a warning)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(f"trace not found: {path}") from None
    except IsADirectoryError:
        raise InputError(f"trace {path} is a folder, not a file") from None
    except OSError as e:
        raise InputError(f"cannot read trace {path}: {e.strerror or e}") from None
    if not raw.strip():
        raise InputError(f"trace {path} is empty")
    if b"\x00" in raw[:4096]:
        raise InputError(f"trace {path} is a binary file, not a JSON Lines trace")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise InputError(f"trace {path} line {line}: not UTF-8 text") from None
    trace = Trace(path)
    lines = text.split("\n")
    last = max(i for i, s in enumerate(lines) if s.strip())
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict) or "event" not in event:
                raise ValueError("not an event object")
        except ValueError:
            if i == last and i > 0 and not text.endswith("\n"):
                trace.warnings.append(f"{path} line {i + 1}: cut short (the run was killed?); "
                                      "read up to the line before")
                break
            raise InputError(f"trace {path} line {i + 1}: not a JSON event") from None
        if i == 0 or event.get("event") == "run_start":
            _check_start(path, i + 1, event)
        trace.events.append(event)
    if trace.end is None and not trace.warnings:
        trace.warnings.append(f"{path}: no run_end (the run was killed or is still running)")
    return trace


def _check_start(path: str, line: int, event: dict) -> None:
    if event.get("event") != "run_start":
        raise InputError(f"trace {path} line {line}: expected run_start, found "
                         f"{event.get('event')!r} (not a neuraldbg trace?)")
    schema = event.get("schema")
    if not isinstance(schema, int):
        raise InputError(f"trace {path} line {line}: run_start has no schema version")
    if schema > SCHEMA:
        raise InputError(f"trace {path} line {line}: schema {schema} is newer than this "
                         f"neuraldbg reads (schema {SCHEMA}); upgrade neuraldbg")
