"""Bad usage and bad input: exit 2, exactly one line on stderr naming the problem, no Python
traceback, and the script is never started."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neuraldbg_cli.errors import InputError
from neuraldbg_cli.trace import read_trace

ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
SIDE_EFFECT = 'open(__import__("os").path.join(__import__("os").path.dirname(__file__), "started"), "w").close()\n'


def cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "neuraldbg_cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=ENV, timeout=120)


def assert_one_line_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert lines[0].startswith("neuraldbg: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert r.stdout == ""
    return lines[0]


@pytest.fixture
def work(tmp_path):
    """tmp_path with side.py, a script whose only effect is to create the file 'started'."""
    (tmp_path / "side.py").write_text(SIDE_EFFECT + "print('started')\n")
    (tmp_path / "good.yaml").write_text("relu: {dead_ratio: 0.8}\n")
    return tmp_path


def run_bad(work, options, script=("side.py",)):
    r = cli(["run", "--trace", str(work / "t.jsonl"), *options, *script], work)
    assert not (work / "started").exists(), "the script was started"
    assert not (work / "t.jsonl").exists(), "a trace was written"
    return r


def test_side_effect_script_does_run(work):
    """The control case: with good input the side effect happens."""
    r = cli(["run", "--trace", str(work / "t.jsonl"), "--thresholds", "good.yaml", "side.py"], work)
    assert r.returncode == 0, r.stderr
    assert (work / "started").exists()


# ---- run: the script ------------------------------------------------------------------------------
def test_missing_script(work):
    assert_one_line_error(run_bad(work, [], ["nosuch.py"]), "nosuch.py")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_script(work):
    (work / "locked.py").write_text(SIDE_EFFECT)
    os.chmod(work / "locked.py", 0)
    try:
        assert_one_line_error(run_bad(work, [], ["locked.py"]), "locked.py")
    finally:
        os.chmod(work / "locked.py", 0o644)


def test_directory_without_main(work):
    (work / "folder").mkdir()
    assert_one_line_error(run_bad(work, [], ["folder"]), "folder", "__main__")


def test_unknown_module(work):
    assert_one_line_error(run_bad(work, ["-m"], ["no_such_module_xyz"]), "no_such_module_xyz")


def test_package_without_main(work):
    (work / "pkgnomain").mkdir()
    (work / "pkgnomain" / "__init__.py").write_text(SIDE_EFFECT)
    assert_one_line_error(run_bad(work, ["-m"], ["pkgnomain"]), "pkgnomain")


# ---- run: thresholds -------------------------------------------------------------------------------
@pytest.mark.parametrize("content,needles", [
    (None, ["missing.yaml"]),
    ("relu: [unclosed\n", ["bad.yaml", "YAML", "line"]),
    ("relu:\n  dead_ration: 0.5\n", ["bad.yaml", "relu.dead_ration"]),
    ('relu: {dead_ratio: "high"}\n', ["bad.yaml", "relu.dead_ratio"]),
    ("relu: {dead_ratio: 1.5}\n", ["bad.yaml", "relu.dead_ratio", "1.5"]),
    ("relu: {dead_ratio: .nan}\n", ["bad.yaml", "relu.dead_ratio"]),
    ("debounce_steps: 2.5\n", ["bad.yaml", "debounce_steps"]),
    ("fail_on: [dead, nope]\n", ["bad.yaml", "nope"]),
    ("just a string\n", ["bad.yaml"]),
    ("relu: 3\n", ["bad.yaml", "relu"]),
], ids=["missing", "not-yaml", "unknown-key", "wrong-type", "out-of-range", "nan",
        "not-int", "bad-state", "not-mapping", "section-not-mapping"])
def test_bad_thresholds(work, content, needles):
    if content is None:
        path = "missing.yaml"
    else:
        path = "bad.yaml"
        (work / path).write_text(content)
    assert_one_line_error(run_bad(work, ["--thresholds", path]), *needles)


def test_thresholds_binary_file(work):
    (work / "bad.yaml").write_bytes(b"\x00\x01\xff\xfe binary")
    assert_one_line_error(run_bad(work, ["--thresholds", "bad.yaml"]), "bad.yaml")


def test_thresholds_is_a_folder(work):
    (work / "th").mkdir()
    assert_one_line_error(run_bad(work, ["--thresholds", "th"]), "th")


# ---- run: trace and options -------------------------------------------------------------------------
def test_trace_in_missing_folder(work):
    r = cli(["run", "--trace", str(work / "nope" / "t.jsonl"), "side.py"], work)
    assert not (work / "started").exists()
    assert_one_line_error(r, str(work / "nope"))


def test_trace_is_a_folder(work):
    (work / "tdir").mkdir()
    r = cli(["run", "--trace", str(work / "tdir"), "side.py"], work)
    assert not (work / "started").exists()
    assert_one_line_error(r, "tdir")


def test_unknown_fail_on_state(work):
    assert_one_line_error(run_bad(work, ["--fail-on", "dead,deadd"]), "deadd")


def test_unknown_option_before_script(work):
    line = assert_one_line_error(run_bad(work, ["--bogus"]), "--bogus")
    assert "option" in line.lower()


_VENDORED_CLICK = ("cli.main catches click.UsageError/ClickException from the `click` package, "
                   "but typer 0.29 raises its vendored typer._click.exceptions classes: usage "
                   "errors escape as a Python traceback with exit 1")


@pytest.mark.parametrize("args,needle", [
    (["run"], "SCRIPT"),
    (["run", "--trace"], "--trace"),
    (["frobnicate", "x"], "frobnicate"),
], ids=["no-script", "option-without-value", "unknown-command"])
def test_usage_errors(work, args, needle):
    r = cli(args, work)
    assert_one_line_error(r, needle)


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
def test_explain_bad_trace(tmp_path, case):
    path, needles = _bad_trace(tmp_path, case)
    assert_one_line_error(cli(["explain", path], tmp_path), path.name, *needles)


@pytest.mark.parametrize("case", list(BAD_TRACES))
def test_read_trace_bad_trace(tmp_path, case):
    """The reader behind explain: the same errors, as InputError naming the file (and line)."""
    path, needles = _bad_trace(tmp_path, case)
    with pytest.raises(InputError) as info:
        read_trace(str(path))
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    for needle in needles:
        assert needle in message, message


def _cut_trace(tmp_path) -> Path:
    text = _jsonl(START, TRANSITION, END)
    path = tmp_path / "cut.jsonl"
    path.write_text(text[: len(text) - 25])       # the run_end line cut mid-line, no newline
    return path


def test_explain_trace_cut_mid_line_is_not_an_error(tmp_path):
    path = _cut_trace(tmp_path)
    r = cli(["explain", path], tmp_path)
    assert r.returncode != 2, r.stderr
    assert r.returncode in (0, 3), r.stderr
    assert "Traceback" not in r.stderr


def test_read_trace_cut_mid_line(tmp_path):
    trace = read_trace(str(_cut_trace(tmp_path)))
    assert [e["event"] for e in trace.events] == ["run_start", "transition"]
    assert len(trace.warnings) == 1 and "line 3" in trace.warnings[0]


def test_read_trace_of_a_real_killed_run_is_readable(tmp_path):
    """A trace without run_end (the process was killed) is readable, with a warning."""
    path = tmp_path / "killed.jsonl"
    path.write_text(_jsonl(START, TRANSITION))
    trace = read_trace(str(path))
    assert trace.end is None and len(trace.events) == 2 and trace.warnings
