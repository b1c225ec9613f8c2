"""Faults inside neuraldbg itself must never end the user's training: one warning, a `warning`
event, the rest of the monitoring goes on; a trace that cannot be written ends at its last
complete line."""
from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import neuraldbg_cli.observe.accumulator as accumulator_mod
import neuraldbg_cli.observe.judge as judge_mod
import neuraldbg_cli.trace as trace_mod
from conftest import SCRIPTS, assert_hooks_clean, trace_events, train
from neuraldbg_cli import NeuralDbg


@pytest.fixture(autouse=True)
def _seeded(hooks_clean):
    """Each test starts seeded, and leaves nothing installed in torch (conftest's check)."""
    torch.manual_seed(0)


def events_of(path) -> list:
    """The trace as far as it was written: a full disk may cut it anywhere, even before
    run_start, so an empty file is allowed; what is there must be complete lines."""
    return trace_events(path, complete=False) if Path(path).read_text() else []


def model_and_data():
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    return model, torch.randn(32, 8), torch.randn(32, 1)


def neuraldbg_lines(err: str) -> list:
    return [line for line in err.splitlines() if line.strip()]


# ---- a fault in the per-layer statistics ----------------------------------------------------
def test_fault_in_one_layer_type_switches_off_that_layer_only(tmp_path, capsys, monkeypatch):
    original = accumulator_mod.Accumulator.add_output
    calls = {"tanh": 0}

    def faulty(self, y, *rest, **kwargs):
        if self.kind == "tanh":
            calls["tanh"] += 1
            raise RuntimeError("injected fault")
        return original(self, y, *rest, **kwargs)

    monkeypatch.setattr(accumulator_mod.Accumulator, "add_output", faulty)
    model, x, y = model_and_data()
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(model, trace=str(trace)) as dbg:
        loss = train(model, x, y, steps=6)
    assert_hooks_clean()
    assert torch.isfinite(loss)
    assert dbg.steps == 6
    assert calls["tanh"] == 1                      # switched off after the first fault
    err = neuraldbg_lines(capsys.readouterr().err)
    assert len(err) == 1, err
    assert err[0].startswith("neuraldbg: ") and "1" in err[0] and "injected fault" in err[0]
    events = events_of(trace)
    warnings = [e for e in events if e["event"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["layer"] == "1" and "injected fault" in warnings[0]["message"]
    layers = {e["layer"] for e in events if e["event"] == "transition" and e["signal"] == "activation"}
    assert {"0", "2", "3", "4"} <= layers and "1" not in layers, layers
    assert events[-1]["event"] == "run_end" and events[-1]["status"] == "completed"
    assert events[-1]["steps"] == 6


def test_fault_in_add_input_switches_off_that_layer_only(tmp_path, capsys, monkeypatch):
    """A fault in the input check of Linear layers fed by a functional relu."""
    def faulty(self, x):
        raise ValueError("input fault")

    monkeypatch.setattr(accumulator_mod.Accumulator, "add_input", faulty)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 16)
            self.b = nn.Linear(16, 1)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    model = M()
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(model, trace=str(trace)) as dbg:
        train(model, x, y, steps=6)
    assert dbg.steps == 6
    err = neuraldbg_lines(capsys.readouterr().err)
    assert len(err) == 1 and "b" in err[0] and "input fault" in err[0], err
    events = events_of(trace)
    assert [e["layer"] for e in events if e["event"] == "warning"] == ["b"]
    assert "a" in {e["layer"] for e in events if e["event"] == "transition"}


def test_fault_in_step_reduction_does_not_end_training(tmp_path, capsys, monkeypatch):
    original = judge_mod.collect
    calls = {"n": 0}

    def faulty(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] >= 3:                 # from the third step on, and at close
            raise RuntimeError("reduction fault")
        return original(*args, **kwargs)

    monkeypatch.setattr(judge_mod, "collect", faulty)
    model, x, y = model_and_data()
    trace = tmp_path / "t.jsonl"
    try:
        with NeuralDbg(model, trace=str(trace)) as dbg:
            train(model, x, y, steps=6)
    finally:
        assert_hooks_clean()
    assert dbg.steps == 6
    err = neuraldbg_lines(capsys.readouterr().err)
    assert len(err) == 1 and "reduction fault" in err[0], err
    events = events_of(trace)
    warnings = [e for e in events if e["event"] == "warning"]
    assert len(warnings) == 1
    # where in neuraldbg's own code it failed, for a report of the fault: the call of collect
    assert warnings[0]["where"].startswith("observe/judge.py:"), warnings
    assert f"(at {warnings[0]['where']})" in err[0], err
    assert events[-1]["status"] == "completed"


def test_a_run_whose_monitoring_was_switched_off_does_not_read_as_clean(tmp_path, capsys,
                                                                       monkeypatch):
    """A fault that switches monitoring off leaves the rest of the run unobserved: run_end
    says from which step, and `explain` says so beside its verdict, in text and in JSON,
    instead of "every layer stayed normal"."""
    from neuraldbg_cli.cli import main

    trace = tmp_path / "t.jsonl"
    _switched_off_at_step_2(trace, monkeypatch)
    assert events_of(trace)[-1]["unobserved_from"] == 2
    capsys.readouterr()
    assert main(["explain", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "Not observed from step 2 on: monitoring was switched off (RuntimeError: reduction fault)" \
        in " ".join(out.split()), out
    assert "every layer stayed normal" not in out
    assert main(["explain", "--json", str(trace)]) == 0
    off = json.loads(capsys.readouterr().out)["traces"][0]["monitoring_off"]
    assert off == {"step": 2, "message": "RuntimeError: reduction fault"}


def test_every_report_says_monitoring_was_switched_off(tmp_path, monkeypatch):
    """What CI reads says it too: JUnit a skipped `monitoring` case, GitHub a warning
    annotation and the summary, the HTML report a warning; none says "stayed normal"."""
    import xml.etree.ElementTree as ET

    from neuraldbg_cli.explain.analysis import analyze
    from neuraldbg_cli.publish import github, html, junit
    from neuraldbg_cli.trace import open_trace

    trace = tmp_path / "t.jsonl"
    _switched_off_at_step_2(trace, monkeypatch)
    said = "Not observed from step 2 on: monitoring was switched off (RuntimeError: reduction fault)"
    analysis = analyze([open_trace(str(trace))])
    suite = ET.fromstring(junit.to_xml(analysis, {"dead"})).find("testsuite")
    case = next(c for c in suite.iter("testcase") if c.get("name") == "monitoring")
    assert case.find("skipped").get("message") == said
    assert suite.get("skipped") == "1" and int(suite.get("tests")) == len(suite.findall("testcase"))
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    notes = github.annotations(analyze([open_trace(str(trace))]), set(), env={})
    assert notes[0].startswith("::warning title=neuraldbg%3A monitoring switched off::" + said)
    summary = github.summary(analyze([open_trace(str(trace))]), set())
    assert said in summary and "stayed normal" not in summary
    page = html.build([str(trace)])
    assert page["warnings"][0] == said and page["heading"] == "No failure found in the steps observed."


def _switched_off_at_step_2(trace, monkeypatch) -> None:
    """A short training whose reductions fail from the third step end on."""
    original = judge_mod.collect
    calls = {"n": 0}

    def faulty(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] >= 3:
            raise RuntimeError("reduction fault")
        return original(*args, **kwargs)

    monkeypatch.setattr(judge_mod, "collect", faulty)
    model, x, y = model_and_data()
    with NeuralDbg(model, trace=str(trace)) as dbg:
        train(model, x, y, steps=6)
    monkeypatch.undo()
    assert dbg.unobserved_from == (2, "RuntimeError: reduction fault")


def test_the_run_summary_line_says_monitoring_was_switched_off(capsys):
    from neuraldbg_cli.cli.run_cmd import _summary

    class Session:
        steps, path, off = 8000, "t.jsonl", (1, "RuntimeError: escaped")

        def failures(self, states):
            return []

        def blips(self):
            return 0
    _summary(Session())
    assert capsys.readouterr().err.strip() == (
        "neuraldbg: 8000 steps, no failure detected; monitoring was switched off at step 1: "
        "not observed from then on; trace: t.jsonl")


def test_fault_in_input_norm_warns_once(tmp_path, capsys, monkeypatch):
    """The pseudo-layer (input) fails at every step: one warning, not one per step."""
    original = accumulator_mod.Accumulator.add_output

    def faulty(self, x, *rest, **kwargs):
        if self.kind == "input":
            raise RuntimeError("input norm fault")
        return original(self, x, *rest, **kwargs)

    monkeypatch.setattr(accumulator_mod.Accumulator, "add_output", faulty)
    model, x, y = model_and_data()
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(model, trace=str(trace)) as dbg:
        train(model, x, y, steps=6)
    assert dbg.steps == 6
    err = neuraldbg_lines(capsys.readouterr().err)
    assert len(err) == 1, err
    events = events_of(trace)
    assert len([e for e in events if e["event"] == "warning"]) == 1


# ---- disk full -------------------------------------------------------------------------------
class _Full(io.RawIOBase):
    """A file on which only the first `lines` lines and `extra` more bytes fit; then ENOSPC
    (or, with `fails`, ENOSPC that many times and then space again)."""

    def __init__(self, path, lines, extra, fails=None):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.lines, self.extra, self.fails = lines, extra, fails
        self.limit = None
        self.newlines = 0

    def writable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=0):
        return os.lseek(self.fd, offset, whence)

    def tell(self):
        return os.lseek(self.fd, 0, os.SEEK_CUR)

    def fileno(self):
        return self.fd

    def write(self, b):
        data = bytes(b)
        pos = self.tell()
        if self.fails is not None and self.fails <= 0:
            return os.write(self.fd, data)       # space came back
        if self.limit is None:
            # Find where the `lines`-th line of the file ends.
            for i, c in enumerate(data):
                if c == 10:
                    self.newlines += 1
                    if self.newlines == self.lines:
                        self.limit = pos + i + 1 + self.extra
                        break
            if self.limit is None:
                return os.write(self.fd, data)
        room = self.limit - pos
        if room <= 0:
            if self.fails is not None:
                self.fails -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(self.fd, data[:room])

    def close(self):
        if not self.closed:
            os.close(self.fd)
        super().close()


def _full_open(lines, extra, fails=None):
    def fake_open(path, mode="r", encoding=None, **kw):
        assert mode == "wb" and kw.get("buffering") == 0
        return _Full(path, lines, extra, fails)
    return fake_open


def _check_cut_trace(path, capsys, dbg, steps):
    assert dbg.steps == steps
    err = neuraldbg_lines(capsys.readouterr().err)
    assert len(err) == 1 and "could not be written" in err[0], err
    assert b"\x00" not in Path(path).read_bytes()
    trace_events(path, complete=False)      # whole lines of JSON events, run_start first
    return Path(path).read_text().splitlines()


@pytest.mark.parametrize("lines,extra", [(1, 0), (1, 40), (3, 25), (6, 10)])
def test_disk_full_trace_ends_at_last_complete_line(tmp_path, capsys, monkeypatch, lines, extra):
    model, x, y = model_and_data()
    trace = tmp_path / "t.jsonl"
    # `lines` lines fit, then `extra` more bytes: the next write is cut mid-line.
    monkeypatch.setattr(trace_mod, "open", _full_open(lines, extra), raising=False)
    with NeuralDbg(model, trace=str(trace)) as dbg:
        loss = train(model, x, y, steps=6)
    assert_hooks_clean()
    assert torch.isfinite(loss)
    written = _check_cut_trace(trace, capsys, dbg, 6)
    assert len(written) == lines


def test_write_error_then_space_again_trace_ends_at_last_complete_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(trace_mod, "open", _full_open(2, 30, fails=1), raising=False)
    path = tmp_path / "t.jsonl"
    w = trace_mod.TraceWriter(str(path))
    for i in range(5):      # 72-byte lines: the third one is cut after 30 bytes
        w.write({"event": "x" * 50, "i": i})
    w.close()
    err = neuraldbg_lines(capsys.readouterr().err)
    assert len(err) == 1, err
    data = path.read_bytes()
    assert b"\x00" not in data, data
    assert data.endswith(b"\n")
    assert [json.loads(line)["i"] for line in data.decode().splitlines()] == [0, 1]


@pytest.mark.e2e
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_dev_full_trace_cli(tmp_path):
    r = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "run", "--trace", "/dev/full",
                        str(SCRIPTS / "crash_train.py"), "--no-crash"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "trained 10 steps" in r.stdout
    warn = [line for line in r.stderr.splitlines() if "could not be written" in line]
    assert len(warn) == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_fault_when_installing_switches_monitoring_off_not_the_run(tmp_path, capsys, monkeypatch):
    import neuraldbg_cli.observe.monitor as monitor_mod

    def faulty(self, existing_optimizers=False):
        raise RuntimeError("boom")
    monkeypatch.setattr(monitor_mod.Monitor, "install", faulty)
    model, x, y = model_and_data()
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(model, trace=str(trace)) as dbg:
        loss = train(model, x, y, steps=6)
    assert torch.isfinite(loss) and dbg.steps == 0
    assert_hooks_clean()
    events = trace_events(trace)
    warning = [e for e in events if e["event"] == "warning"]
    assert len(warning) == 1 and "monitoring switched off: RuntimeError: boom" in warning[0]["message"]
    assert "boom" in capsys.readouterr().err
