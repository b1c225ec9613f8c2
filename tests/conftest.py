"""Shared test helpers: the one strict trace reader, the check that nothing stays installed in
torch, the one training loop, and `neuraldbg run` / `python` in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module

from neuraldbg_cli import states
from neuraldbg_cli.trace import SCHEMA

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_scripts"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCRIPTS = Path(__file__).resolve().parent / "scripts"

# What a healthy run must never enter: the failures, and the warning sign `anomalous` too
# (every state of every signal but good health).
FAILURE_STATES = states.problem_names()


# ---- the trace ----------------------------------------------------------------------------------
def trace_events(path, *, complete: bool = True) -> list:
    """The events of a trace, read strictly: the file ends with a newline, every line is one
    JSON object with an "event" key (NaN/Infinity constants are not JSON), the first is
    run_start of this schema; with `complete`, the last and only run_end is the last line.
    `complete=False` is for a trace cut short (a killed run, a full disk)."""
    text = Path(path).read_text(encoding="utf-8")
    assert text.endswith("\n"), f"{path} does not end at a complete line: {text[-200:]!r}"
    events = []
    for n, line in enumerate(text.splitlines(), 1):
        event = json.loads(line, parse_constant=_not_json(path, n))
        assert isinstance(event, dict) and "event" in event, f"{path} line {n}: {line[:200]}"
        events.append(event)
    start = events[0]
    assert start["event"] == "run_start" and start["schema"] == SCHEMA, start
    if complete:
        ends = [n for n, e in enumerate(events) if e["event"] == "run_end"]
        assert ends == [len(events) - 1], f"{path}: run_end at lines {[n + 1 for n in ends]} " \
                                          f"of {len(events)}"
    return events


def _not_json(path, n):
    def reject(constant):
        raise AssertionError(f"{path} line {n}: {constant} is not JSON")
    return reject


def transitions(events, *, layer=None, signal=None, to=None) -> list:
    """The transition events, filtered by any of layer, signal and `to` state."""
    return [e for e in events if e.get("event") == "transition"
            and (layer is None or e["layer"] == layer)
            and (signal is None or e["signal"] == signal)
            and (to is None or e["to"] == to)]


def failures(events) -> list:
    """Transitions into a failure state."""
    return [e for e in transitions(events) if e["to"] in FAILURE_STATES]


MAX_CHANGES = 8     # state changes of any layer and signal in one run (hysteresis)


def most_changes(events) -> tuple:
    """(count, (layer, signal)) of the layer and signal whose state changed most often. A
    layer's first transition (from null: its first state) is no change of state."""
    counts: dict = {}
    for t in transitions(events):
        key = (t["layer"], t["signal"])
        counts[key] = counts.get(key, 0) + (t.get("from") is not None)
    return max(((n, k) for k, n in counts.items()), default=(0, None))


def run_end(events) -> dict:
    ends = [e for e in events if e.get("event") == "run_end"]
    assert len(ends) == 1, f"expected one run_end event, got {len(ends)}"
    return ends[0]


def describe(events) -> str:
    """A compact listing of transitions, for assertion messages."""
    return "\n".join(f"  step {e['step']:>4} {e['layer']} [{e['module_type']}] {e['signal']}: "
                     f"{e['from']} -> {e['to']} {e.get('stats')}" for e in transitions(events)) \
        or "  (no transitions)"


# ---- nothing left installed in torch -------------------------------------------------------------
_MODULE_HOOKS = (
    "_global_forward_hooks", "_global_forward_pre_hooks", "_global_forward_hooks_always_called",
    "_global_forward_hooks_with_kwargs", "_global_backward_hooks", "_global_backward_pre_hooks",
    "_global_buffer_registration_hooks", "_global_module_registration_hooks",
    "_global_parameter_registration_hooks",
)
_OPTIMIZER_HOOKS = ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks")
# Taken at import, before any test can have patched it.
_OPTIMIZER_INIT = torch.optim.Optimizer.__init__


def _global_hook_dicts() -> dict:
    dicts = {f"nn.modules.module.{name}": getattr(nn_module, name) for name in _MODULE_HOOKS}
    dicts.update({f"optim.optimizer.{name}": getattr(optim_module, name)
                  for name in _OPTIMIZER_HOOKS})
    return dicts


def leftover_hooks() -> dict:
    """Every global hook torch holds, by dict name, and a patched Optimizer.__init__."""
    left = {name: dict(hooks) for name, hooks in _global_hook_dicts().items() if hooks}
    if torch.optim.Optimizer.__init__ is not _OPTIMIZER_INIT:
        left["Optimizer.__init__"] = torch.optim.Optimizer.__init__
    return left


def assert_hooks_clean() -> None:
    left = leftover_hooks()
    assert not left, f"left installed in torch: {left}"


def _restore_torch() -> None:
    for hooks in _global_hook_dicts().values():
        hooks.clear()
    torch.optim.Optimizer.__init__ = _OPTIMIZER_INIT


@pytest.fixture
def hooks_clean():
    """Fails the test if it leaves anything installed in torch; restores torch either way, so
    that one leak fails one test, not every test after it."""
    assert_hooks_clean()
    yield
    left = leftover_hooks()
    _restore_torch()
    assert not left, f"left installed in torch: {left}"


# ---- training -----------------------------------------------------------------------------------
def train(model, x, y, steps=5, *, opt=None, lr=0.01, loss_of=None, before_step=None):
    """`steps` optimizer steps: forward, loss, zero_grad, backward, step; returns the last loss.

    `opt` defaults to SGD(lr) over the trainable parameters; `loss_of(output)` to the mean
    squared error against `y`; `before_step(step)` runs at the start of each step."""
    opt = opt or torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    loss_of = loss_of or (lambda out: ((out - y) ** 2).mean())
    loss = None
    for step in range(steps):
        if before_step:
            before_step(step)
        loss = loss_of(model(x))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss


# ---- subprocesses -------------------------------------------------------------------------------
def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("OMP_NUM_THREADS", "1")      # small models: threads only add noise on CI
    env["PYTHONDONTWRITEBYTECODE"] = "1"        # no __pycache__ beside the scripts under test
    return env


ENV = _env()


def run_neuraldbg(tmp_path, script, *args, trace=None, options=(), timeout=120, cwd=None,
                  command=None):
    """Run `python -m neuraldbg_cli run --trace TRACE [OPTIONS] SCRIPT ARGS...` in a subprocess.

    Returns (CompletedProcess with text stdout/stderr, trace events read by `trace_events`, or
    [] when no trace was written). `trace` defaults to tmp_path/"trace.jsonl"; `options` go
    before SCRIPT; `command` replaces `python -m neuraldbg_cli` (the console script)."""
    trace = Path(trace) if trace is not None else Path(tmp_path) / "trace.jsonl"
    command = command or [sys.executable, "-m", "neuraldbg_cli"]
    cmd = [*command, "run", "--trace", str(trace), *options, str(script), *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or tmp_path, env=ENV)
    if not trace.exists():
        return proc, []
    try:
        return proc, trace_events(trace)
    except (AssertionError, ValueError) as e:      # ValueError: a line that is not JSON
        raise AssertionError(f"{e}\nexit {proc.returncode}, stderr:\n{proc.stderr[-3000:]}") \
            from None


def run_python(script, *args, timeout=120, cwd=None):
    """Run `python SCRIPT ARGS...` plainly, for parity checks against `neuraldbg run`."""
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, env=ENV)


@pytest.fixture
def one_thread():
    """Small models: a second thread only adds contention on a busy CI machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def observed(tmp_path, model, training) -> list:
    """Run `training()` under NeuralDbg(model); the trace's events."""
    from neuraldbg_cli import NeuralDbg

    trace = tmp_path / "t.jsonl"
    with NeuralDbg(model, trace=str(trace)):
        training()
    return trace_events(trace)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """run(name, *args) -> (events, analysis) of `sample_scripts/{name}.py args` under
    `neuraldbg run --fail-on none`, which must complete; each run once per test module."""
    from neuraldbg_cli.explain.analysis import analyze
    from neuraldbg_cli.trace import read_trace

    cache = {}

    def run(name, *args):
        if (name, args) not in cache:
            tmp = tmp_path_factory.mktemp(name)
            proc, events = run_neuraldbg(tmp, SAMPLES / f"{name}.py", *args,
                                         options=("--fail-on", "none"))
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert run_end(events)["status"] == "completed"
            cache[(name, args)] = events, analyze([read_trace(str(tmp / "trace.jsonl"))])
        return cache[(name, args)]
    return run
