"""`neuraldbg run SCRIPT ARGS` behaves as `python SCRIPT ARGS`: stdout, stderr (less neuraldbg's
own 'neuraldbg: ...' lines), exit status, signals; and the trace always ends with run_end."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ENV, SCRIPTS, run_neuraldbg, run_python, trace_events

pytestmark = pytest.mark.e2e

TIMEOUT = 180


# ---- helpers -----------------------------------------------------------------------------
def python(args, cwd):
    return run_python(*args, cwd=cwd, timeout=TIMEOUT)


def neuraldbg(args, cwd, trace="t.jsonl", command=None):
    """(process, trace events) of `neuraldbg run --trace cwd/TRACE ARGS`."""
    return run_neuraldbg(cwd, *args, trace=cwd / trace, cwd=cwd, timeout=TIMEOUT,
                         command=command)


def own_lines_removed(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith("neuraldbg: "))


def torch_notes_removed(stderr: str) -> str:
    """Without what torch itself prints on import where numpy is missing (a warning and its
    source line): python prints it too for these scripts, which import torch, and
    test_fresh_env checks that neuraldbg prints it exactly as python does. Tests that
    compare with a fixed text rather than with python's own run leave it out."""
    lines = stderr.splitlines(keepends=True)
    out, skip = [], False
    for line in lines:
        if "UserWarning: Failed to initialize NumPy" in line:
            skip = True
            continue
        if skip and line.startswith("  "):
            continue
        skip = False
        out.append(line)
    return "".join(out)


def assert_same(py, nd):
    assert nd.stdout == py.stdout
    assert own_lines_removed(nd.stderr) == py.stderr
    assert nd.returncode == py.returncode


def traceback_frames(stderr: str) -> list:
    """The 'File ..., line N, in f' lines of a traceback, in order."""
    return [line.strip() for line in stderr.splitlines() if line.strip().startswith('File "')]


@pytest.fixture
def work(tmp_path):
    """A folder with copies of the fixture scripts, also in a subfolder."""
    sub = tmp_path / "sub"
    sub.mkdir()
    for name in ("show_env.py", "raise_exc.py", "exit_with.py"):
        shutil.copy(SCRIPTS / name, tmp_path / name)
        shutil.copy(SCRIPTS / name, sub / name)
    return tmp_path


# ---- what the script sees ---------------------------------------------------------------------
@pytest.mark.parametrize("where", ["relative", "absolute"])
def test_name_argv_path_file_and_options_after_script(work, where):
    script = "sub/show_env.py" if where == "relative" else str(work / "sub" / "show_env.py")
    # Options after SCRIPT are the script's own, neuraldbg's option names included.
    args = [script, "--parse", "a", "--trace", "z.jsonl", "-m", "q", "--thresholds", "w"]
    py = python(args, work)
    assert py.returncode == 0, py.stderr
    nd, events = neuraldbg(args, work)
    assert_same(py, nd)
    assert "parsed {'rest': ['a'], 'parse': True, 'trace': 'z.jsonl'" in nd.stdout
    assert not (work / "z.jsonl").exists()
    assert events[0]["argv"] == args
    assert events[-1]["status"] == "completed" and events[-1]["exit_code"] == 0


def test_help_after_script_goes_to_the_script(work):
    args = ["show_env.py", "--parse", "--help"]
    py = python(args, work)
    nd, events = neuraldbg(args, work)
    assert_same(py, nd)
    assert "a script with its own options" in nd.stdout
    assert "neuraldbg" not in nd.stdout
    assert events[-1]["status"] == "completed"


def test_directory_with_main(tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(SCRIPTS / "show_env.py", app / "__main__.py")
    py = python(["app", "x"], tmp_path)
    nd, events = neuraldbg(["app", "x"], tmp_path)
    assert nd.returncode == py.returncode == 0, nd.stderr
    keep = ("name ", "argv ", "path0 ", "file ")
    assert [ln for ln in nd.stdout.splitlines() if ln.startswith(keep)] == \
        [ln for ln in py.stdout.splitlines() if ln.startswith(keep)]
    assert events[-1]["status"] == "completed"


# ---- -m ----------------------------------------------------------------------------------------
@pytest.fixture
def package(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copy(SCRIPTS / "show_env.py", pkg / "mod.py")
    shutil.copy(SCRIPTS / "show_env.py", pkg / "__main__.py")
    (pkg / "helper.py").write_text("VALUE = 42\n")
    # a relative import, as code run with -m does
    with open(pkg / "mod.py", "a") as f:
        f.write("from .helper import VALUE\nprint('relative import', VALUE)\n")
    return tmp_path


@pytest.mark.parametrize("module", ["pkg.mod", "pkg"])
def test_module_form(package, module):
    args = ["-m", module, "--parse", "--trace", "x", "arg"]
    py = python(args, package)
    assert py.returncode == 0, py.stderr
    nd, events = neuraldbg(args, package)
    assert_same(py, nd)
    assert "path0 " + str(package) in nd.stdout
    assert events[-1]["status"] == "completed"


# ---- exceptions and exit codes ------------------------------------------------------------------
@pytest.fixture(scope="module")
def exception_runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("exc")
    shutil.copy(SCRIPTS / "raise_exc.py", work / "raise_exc.py")
    py = python(["raise_exc.py"], work)
    return work, py, neuraldbg(["raise_exc.py"], work)


def test_exception_exit_status_stdout_and_trace(exception_runs):
    work, py, (nd, events) = exception_runs
    assert py.returncode == nd.returncode == 1
    assert nd.stdout == py.stdout == "before\n"
    err = own_lines_removed(nd.stderr)
    assert err.splitlines()[-1] == py.stderr.splitlines()[-1] == "ValueError: bad value 'k'"
    assert "KeyError: 'k'" in err and "direct cause" in err        # the chained cause
    end = events[-1]
    assert end["status"] == "failed" and end["exit_code"] == 1
    assert end["error"] == "ValueError: bad value 'k'"


def test_exception_traceback_as_python(exception_runs):
    work, py, (nd, _) = exception_runs
    err = own_lines_removed(nd.stderr)
    assert err == py.stderr
    # After the chained KeyError's traceback, the second one starts at the script's frame.
    last = err.rsplit("Traceback (most recent call last):\n", 1)[1]
    assert last.startswith(f'  File "{work / "raise_exc.py"}", line ')


@pytest.mark.parametrize("value,code,stderr", [("3", 3, ""), ("message", 1, "message\n"),
                                               ("none", 0, "")])
def test_sys_exit(work, value, code, stderr):
    py = python(["exit_with.py", value], work)
    assert py.returncode == code and py.stderr == stderr
    nd, events = neuraldbg(["exit_with.py", value], work)
    assert_same(py, nd)
    end = events[-1]
    assert end["status"] == "completed" and end["exit_code"] == code and end["error"] is None


@pytest.fixture(scope="module")
def crash_runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("crash")
    script = SCRIPTS / "crash_train.py"
    return work, python([script], work), neuraldbg([script], work)


def test_crash_mid_training(crash_runs):
    work, py, (nd, events) = crash_runs
    script = SCRIPTS / "crash_train.py"
    assert py.returncode == nd.returncode == 1
    assert nd.stdout == py.stdout == ""
    err = own_lines_removed(nd.stderr)
    message = py.stderr.splitlines()[-1]
    assert message.startswith("TypeError: ") and err.splitlines()[-1] == message
    # The script's own frames are those python shows (torch's frames differ with hooks on).
    script_frames = [f for f in traceback_frames(py.stderr) if str(script) in f]
    assert [f for f in traceback_frames(err) if str(script) in f] == script_frames
    end = events[-1]
    assert end == {**end, "status": "failed", "exit_code": 1, "steps": 5, "error": message}
    assert any(e["event"] == "transition" for e in events)


def test_crash_mid_training_traceback_starts_at_script(crash_runs):
    work, py, (nd, _) = crash_runs
    err = torch_notes_removed(own_lines_removed(nd.stderr))
    script = SCRIPTS / "crash_train.py"
    assert err.startswith(f'Traceback (most recent call last):\n  File "{script}", line ')
    assert "neuraldbg_cli" not in err


# ---- DataLoader workers with the spawn start method --------------------------------------------
def test_dataloader_spawn_workers_with_script_classes(tmp_path):
    nd, events = neuraldbg([SCRIPTS / "dl_spawn.py"], tmp_path)
    assert nd.returncode == 0, nd.stderr[-3000:]
    assert nd.stdout == "steps 3 batch __main__ Batch\n"
    assert torch_notes_removed(own_lines_removed(nd.stderr)) == ""
    end = events[-1]
    assert end["status"] == "completed" and end["steps"] == 3


# ---- signals -------------------------------------------------------------------------------------
def _signalled(cmd, sig, cwd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=cwd, env=ENV)
    try:
        first = p.stdout.readline()
        assert first == "ready\n", (first, p.stderr.read() if p.poll() is not None else "")
        time.sleep(0.2)
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, first + out, err


def _neuraldbg_signalled(work, sig):
    trace = work / "t.jsonl"
    rc, out, err = _signalled([sys.executable, "-m", "neuraldbg_cli", "run", "--trace", str(trace),
                               str(SCRIPTS / "sig_train.py")], sig, work)
    return rc, out, err, trace_events(trace)


def test_sigterm(tmp_path):
    # python dies of the signal: status -15, nothing printed
    rc, out, err, events = _neuraldbg_signalled(tmp_path, signal.SIGTERM)
    assert rc == -signal.SIGTERM
    assert out == "ready\n"
    assert torch_notes_removed(own_lines_removed(err)) == ""
    end = events[-1]
    assert end["status"] == "interrupted" and end["steps"] >= 3


@pytest.fixture(scope="module")
def sigint_runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("sigint")
    py = _signalled([sys.executable, str(SCRIPTS / "sig_train.py")], signal.SIGINT, work)
    return py, _neuraldbg_signalled(work, signal.SIGINT)


def test_sigint_trace(sigint_runs):
    py, (rc, out, err, events) = sigint_runs
    end = events[-1]
    assert end["status"] == "interrupted" and end["error"] == "KeyboardInterrupt"
    assert end["steps"] >= 3
    assert out == py[1] == "ready\n"
    assert own_lines_removed(err).splitlines()[-1] == py[2].splitlines()[-1] == "KeyboardInterrupt"
    assert rc != 0


def test_sigint_returncode_as_python(sigint_runs):
    py, (rc, _, _, _) = sigint_runs
    assert py[0] == -signal.SIGINT
    assert rc == py[0]


# ---- `python -m neuraldbg_cli` is `neuraldbg` -----------------------------------------------------
@pytest.mark.skipif(shutil.which("neuraldbg") is None, reason="console script not installed")
def test_console_script_same_as_python_m(work):
    console = shutil.which("neuraldbg")
    r, events = neuraldbg(["exit_with.py", "message"], work, "b.jsonl", command=[console])
    assert (r.returncode, r.stdout) == (1, "exiting ['message']\n")
    assert own_lines_removed(r.stderr) == "message\n"
    assert events[-1]["exit_code"] == 1
    for args in (["--help"], ["run", "--help"], ["run", "missing.py"]):
        a = subprocess.run([sys.executable, "-m", "neuraldbg_cli", *args], capture_output=True,
                           text=True, env=ENV, timeout=TIMEOUT, cwd=work)
        b = subprocess.run([console, *args], capture_output=True, text=True, env=ENV,
                           timeout=TIMEOUT, cwd=work)
        assert (a.returncode, a.stdout, a.stderr) == (b.returncode, b.stdout, b.stderr), args
    assert b.returncode == 2 and "missing.py" in b.stderr
