"""Bad usage and bad input: exit 2, exactly one line on stderr naming the problem, no Python
traceback, and the script is never started. Checked in-process through `cli.main`; a few runs
of `python -m neuraldbg_cli` prove the same of the real entry point."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ENV
from neuraldbg_cli.cli import main
from neuraldbg_cli.trace import read_trace

SIDE_EFFECT = ('open(__import__("os").path.join(__import__("os").path.dirname(__file__), "started"), '
               '"w").close()\n')


def assert_one_line_error(rc, out, err, *needles):
    assert rc == 2, (rc, err[-2000:])
    lines = err.splitlines()
    assert len(lines) == 1, err[-2000:]
    assert "Traceback" not in err
    assert lines[0].startswith("neuraldbg: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert out == ""
    return lines[0]


@pytest.fixture
def work(tmp_path, monkeypatch):
    """The current folder: tmp_path with side.py, a script whose only effect is to create the
    file 'started', and good.yaml, a valid thresholds file."""
    (tmp_path / "side.py").write_text(SIDE_EFFECT + "print('started')\n")
    (tmp_path / "good.yaml").write_text("relu: {dead_ratio: 0.8}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def not_started(work, *, trace="t.jsonl"):
    assert not (work / "started").exists(), "the script was started"
    assert not (work / trace).exists(), "a trace was written"


def run_bad(work, capsys, options, script, *needles):
    """`neuraldbg run --trace t.jsonl OPTIONS SCRIPT`, in-process: one line naming `needles`,
    and neither the script nor the trace started."""
    rc = main(["run", "--trace", str(work / "t.jsonl"), *options, *script])
    not_started(work)
    return assert_one_line_error(rc, *capsys.readouterr(), *needles)


# ---- run: the script ------------------------------------------------------------------------------
def test_missing_script(work, capsys):
    run_bad(work, capsys, [], ["nosuch.py"], "nosuch.py")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_script(work, capsys):
    (work / "locked.py").write_text(SIDE_EFFECT)
    os.chmod(work / "locked.py", 0)
    try:
        run_bad(work, capsys, [], ["locked.py"], "locked.py")
    finally:
        os.chmod(work / "locked.py", 0o644)


def test_directory_without_main(work, capsys):
    (work / "folder").mkdir()
    run_bad(work, capsys, [], ["folder"], "folder", "__main__")


def test_unknown_module(work, capsys):
    run_bad(work, capsys, ["-m"], ["no_such_module_xyz"], "no_such_module_xyz")


def test_package_without_main(work, capsys):
    # Python itself imports the package before it finds no __main__, so its __init__ may run:
    # only the message is checked here.
    (work / "pkgnomain").mkdir()
    (work / "pkgnomain" / "__init__.py").write_text("")
    run_bad(work, capsys, ["-m"], ["pkgnomain"], "pkgnomain", "__main__")


# ---- run: the thresholds file (its values: test_thresholds.py) ---------------------------------------
@pytest.mark.parametrize("content,needles", [
    (None, ["missing.yaml", "not found"]),
    ("relu: [unclosed\n", ["bad.yaml", "not valid YAML", "line"]),
    (b"\x00\x01\xff\xfe binary", ["bad.yaml"]),
    ("relu:\n  dead_ration: 0.5\n", ["bad.yaml", "relu.dead_ration"]),
], ids=["missing", "not-yaml", "binary", "a-bad-key"])
def test_bad_thresholds_file(work, capsys, content, needles):
    path = "missing.yaml" if content is None else "bad.yaml"
    if isinstance(content, bytes):
        (work / path).write_bytes(content)
    elif content is not None:
        (work / path).write_text(content)
    run_bad(work, capsys, ["--thresholds", path], ["side.py"], *needles)


def test_thresholds_is_a_folder(work, capsys):
    (work / "th").mkdir()
    run_bad(work, capsys, ["--thresholds", "th"], ["side.py"], "th")


# ---- run: trace and options -------------------------------------------------------------------------
def test_trace_in_missing_folder(work, capsys):
    rc = main(["run", "--trace", str(work / "nope" / "t.jsonl"), "side.py"])
    assert not (work / "started").exists(), "the script was started"
    assert_one_line_error(rc, *capsys.readouterr(), str(work / "nope"))


def test_trace_is_a_folder(work, capsys):
    (work / "tdir").mkdir()
    rc = main(["run", "--trace", str(work / "tdir"), "side.py"])
    assert not (work / "started").exists(), "the script was started"
    assert_one_line_error(rc, *capsys.readouterr(), "tdir")


@pytest.mark.parametrize("options,needles", [
    (["--fail-on", "dead,deadd"], ["deadd"]),
    (["--every", "0"], ["--every"]),
    (["--bogus"], ["--bogus", "option"]),
    (["--detectors", "activation,gradiant"], ["--detectors", "gradiant", "activation"]),
], ids=["unknown-fail-on-state", "every-not-positive", "unknown-option", "unknown-detector"])
def test_bad_option_before_script(work, capsys, options, needles):
    run_bad(work, capsys, options, ["side.py"], *needles)


@pytest.mark.parametrize("args,needle", [
    (["run"], "SCRIPT"),
    (["run", "--trace"], "--trace"),
    (["frobnicate", "x"], "frobnicate"),
], ids=["no-script", "option-without-value", "unknown-command"])
def test_usage_errors(work, capsys, args, needle):
    assert_one_line_error(main(args), *capsys.readouterr(), needle)


# ---- explain ------------------------------------------------------------------------------------------
START = {"event": "run_start", "schema": 1, "version": "0.1.0", "script": "s.py", "argv": ["s.py"],
         "torch": "2.13.0", "thresholds": {}, "rank": 0, "world_size": 1, "time": "t"}
TRANSITION = {"event": "transition", "step": 3, "layer": "act", "module_type": "ReLU",
              "signal": "activation", "from": "normal", "to": "dead", "stats": {"dead_ratio": 0.95}}
END = {"event": "run_end", "status": "completed", "steps": 10, "exit_code": 0, "error": None,
       "time": "t"}


def _jsonl(*events) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


BAD_TRACES = {
    "missing": (None, []),
    "empty": (b"", []),
    "binary": (b"\x00\x01\x02\xff" * 64, []),
    "not-json": (b"this is not json\n" + _jsonl(END).encode(), ["line 1"]),
    "newer-schema": (b'{"event": "run_start", "schema": 99}\n', ["line 1", "99"]),
    "not-run-start": (_jsonl(TRANSITION, END).encode(), ["line 1"]),
    "bad-middle-line": (_jsonl(START).encode() + b"{oops\n" + _jsonl(END).encode(), ["line 2"]),
}


def _bad_trace(tmp_path, case):
    content, needles = BAD_TRACES[case]
    path = tmp_path / f"{case}.jsonl"
    if content is not None:
        path.write_bytes(content)
    return path, needles


@pytest.mark.parametrize("case", list(BAD_TRACES))
def test_explain_bad_trace(tmp_path, capsys, case):
    """The line is the reader's InputError: it names the file by its full path (and the line)."""
    path, needles = _bad_trace(tmp_path, case)
    assert_one_line_error(main(["explain", str(path)]), *capsys.readouterr(), str(path), *needles)


def _cut_trace(tmp_path) -> Path:
    text = _jsonl(START, TRANSITION, END)
    path = tmp_path / "cut.jsonl"
    path.write_text(text[: len(text) - 25])       # the run_end line cut mid-line, no newline
    return path


def test_trace_cut_mid_line_is_read_up_to_the_cut(tmp_path, capsys):
    path = _cut_trace(tmp_path)
    trace = read_trace(str(path))
    assert [e["event"] for e in trace.events] == ["run_start", "transition"]
    assert len(trace.warnings) == 1 and "line 3" in trace.warnings[0]
    rc = main(["explain", str(path)])
    err = capsys.readouterr().err
    assert rc in (0, 3), err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if "line 3" in line], err


def test_trace_of_a_killed_run_is_readable(tmp_path):
    """A trace without run_end (the process was killed) is readable, with a warning."""
    path = tmp_path / "killed.jsonl"
    path.write_text(_jsonl(START, TRANSITION))
    trace = read_trace(str(path))
    assert trace.end is None and len(trace.events) == 2 and trace.warnings


# ---- the same through `python -m neuraldbg_cli` ---------------------------------------------------------
def cli(args, cwd):
    r = subprocess.run([sys.executable, "-m", "neuraldbg_cli", *map(str, args)],
                       capture_output=True, text=True, cwd=cwd, env=ENV, timeout=120)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.e2e
def test_side_effect_script_does_run(work):
    """The control case: with good input the side effect happens."""
    rc, _, err = cli(["run", "--trace", "t.jsonl", "--thresholds", "good.yaml", "side.py"], work)
    assert rc == 0, err
    assert (work / "started").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("options,needles", [
    (["--thresholds", "bad.yaml"], ["bad.yaml", "relu.dead_ration"]),
    (["--bogus"], ["--bogus"]),
    (["--trace", "nope/t.jsonl"], ["nope"]),
], ids=["bad-thresholds", "unknown-option", "trace-in-missing-folder"])
def test_script_never_started(work, options, needles):
    (work / "bad.yaml").write_text("relu:\n  dead_ration: 0.5\n")
    rc, out, err = cli(["run", "--trace", "t.jsonl", *options, "side.py"], work)
    not_started(work)
    assert_one_line_error(rc, out, err, *needles)


@pytest.mark.e2e
def test_explain_bad_trace_python_m(tmp_path):
    path, needles = _bad_trace(tmp_path, "bad-middle-line")
    assert_one_line_error(*cli(["explain", path], tmp_path), str(path), *needles)
