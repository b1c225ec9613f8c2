"""`neuraldbg explain`: read the traces, analyze, print the report or JSON, give the exit code."""
from __future__ import annotations

import json
import os
import sys

from ..explain.analysis import analyze, to_json
from ..explain.runs import gate, mixed
from ..inert import inert
from ..trace import open_trace

FAILED_GATE = 3


def explain_traces(paths, as_json: bool = False, fail_on=None, junit: str | None = None) -> int:
    """0, or 3 when a `fail_on` state is in the traces; unreadable traces raise InputError
    (exit 2). The script's own exit status is reported, not re-applied."""
    traces = [open_trace(p) for p in paths]     # read once, as analyze goes
    analysis = analyze(traces)
    for message in [w for t in traces for w in t.warnings] + mixed(analysis.runs):
        print(f"neuraldbg: warning: {inert(message)}", file=sys.stderr)
    if as_json:
        print(json.dumps(to_json(analysis), indent=2, allow_nan=False))
    else:
        from ..explain.report import render, theme

        console_for_stdout(theme()).print(render(analysis))
    from ..publish import ci

    if ci.wanted(junit):
        ci.publish(analysis, fail_on or (), junit)
    return FAILED_GATE if fail_on and gate(analysis.runs, fail_on) else 0


def console_for_stdout(theme):
    """Colour on a terminal; plain text when piped or when NO_COLOR is set (no-color.org)."""
    from rich.console import Console

    plain = bool(os.environ.get("NO_COLOR")) or not sys.stdout.isatty()
    # Piped into a file or a CI log there is no terminal width: 100 columns keeps each
    # hypothesis's head line whole (COLUMNS still wins when set).
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 100
    return Console(theme=theme, highlight=False, emoji=False, markup=False,
                   color_system=None if plain else "auto", width=width)
