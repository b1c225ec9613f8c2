"""Shared helpers for end-to-end tests: run `neuraldbg run` in a subprocess and read its trace."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_scripts"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Every state that is a failure (the `to` of a transition that should never appear in a
# healthy run).
FAILURE_STATES = ("dead", "saturated", "anomalous", "nonfinite", "vanishing", "exploding")


def read_trace(path) -> list:
    """The events of a JSONL trace, in order (blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("OMP_NUM_THREADS", "1")      # small models: threads only add noise on CI
    return env


def run_neuraldbg(tmp_path, script, *args, trace=None, options=(), timeout=120, cwd=None):
    """Run `python -m neuraldbg_cli run [OPTIONS] --trace TRACE SCRIPT ARGS...` in a subprocess.

    Returns (CompletedProcess with text stdout/stderr, list of trace events). `trace` defaults
    to tmp_path/"trace.jsonl"; `options` are extra `run` options placed before SCRIPT. The
    events list is empty when no trace file was written."""
    trace = Path(trace) if trace is not None else Path(tmp_path) / "trace.jsonl"
    cmd = [sys.executable, "-m", "neuraldbg_cli", "run", "--trace", str(trace), *options,
           str(script), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or tmp_path, env=_env())
    events = read_trace(trace) if trace.exists() else []
    return proc, events


def run_python(script, *args, timeout=120, cwd=None):
    """Run `python SCRIPT ARGS...` plainly, for parity checks against `neuraldbg run`."""
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=_env())


def transitions(events, *, layer=None, signal=None, to=None) -> list:
    """The transition events, filtered by any of layer, signal and `to` state."""
    return [e for e in events if e.get("event") == "transition"
            and (layer is None or e["layer"] == layer)
            and (signal is None or e["signal"] == signal)
            and (to is None or e["to"] == to)]


def failures(events) -> list:
    """Transitions into a failure state."""
    return [e for e in transitions(events) if e["to"] in FAILURE_STATES]


def run_end(events) -> dict:
    ends = [e for e in events if e.get("event") == "run_end"]
    assert len(ends) == 1, f"expected one run_end event, got {len(ends)}"
    return ends[0]


def describe(events) -> str:
    """A compact listing of transitions, for assertion messages."""
    return "\n".join(f"  step {e['step']:>4} {e['layer']} [{e['module_type']}] {e['signal']}: "
                     f"{e['from']} -> {e['to']} {e.get('stats')}" for e in transitions(events)) \
        or "  (no transitions)"


@pytest.fixture
def neuraldbg(tmp_path):
    """`neuraldbg(script, *args, **kw)` -> (proc, events), with the trace under tmp_path."""
    def _run(script, *args, **kw):
        return run_neuraldbg(tmp_path, script, *args, **kw)
    return _run
