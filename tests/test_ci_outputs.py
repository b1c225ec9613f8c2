"""What CI systems read: JUnit XML from `run --junit` and `explain --junit` (a test case per
observed layer and signal, failed by the --fail-on states, with the hypothesis as its text),
and under GitHub Actions the workflow annotations and the step summary."""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import ENV, SAMPLES, run_neuraldbg, trace_events
from tracemaker import TraceMaker, dying_relu


def cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "neuraldbg_cli", *map(str, args)],
                          capture_output=True, text=True, env=env or ENV, cwd=cwd, timeout=120)


def parse_junit(path) -> ET.Element:
    """Parsed, and checked as JUnit readers (Jenkins' schema, GitLab, dorny/test-reporter)
    read it: counts that add up, the attributes they require, one outcome per case."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert suites
    for suite in suites:
        cases = suite.findall("testcase")
        assert suite.get("name") and int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("errors")) == sum(c.find("error") is not None for c in cases)
        assert int(suite.get("skipped")) == sum(c.find("skipped") is not None for c in cases)
        for c in cases:
            assert c.get("name") and c.get("classname") and c.get("time") is not None
            outcomes = c.findall("failure") + c.findall("error") + c.findall("skipped")
            assert len(outcomes) <= 1
            for o in outcomes:
                assert o.get("message") and o.get("type")
    for key in ("tests", "failures", "errors", "skipped"):
        assert int(root.get(key)) == sum(int(s.get(key)) for s in suites)
    return root


def cases(root) -> dict:
    return {c.get("name"): c for c in root.iter("testcase")}


@pytest.mark.e2e
def test_run_junit_fails_the_dead_layer_with_its_hypothesis(tmp_path):
    junit = tmp_path / "neuraldbg.xml"
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "dying_relu.py",
                                 options=["--fail-on", "dead", "--junit", str(junit)])
    assert proc.returncode == 3, proc.stderr
    root = parse_junit(junit)
    by_name = cases(root)
    # one case per observed layer and signal, as the model event lists them, and the run
    model = next(e for e in events if e["event"] == "model")
    expected = {f"{l['name']} {s}" for l in model["layers"] for s in l["signals"]}
    expected |= {f"{p['name']} {s}" for p in model["pseudo_layers"] for s in p["signals"]}
    assert set(by_name) == expected | {"run"}
    failed = {n for n, c in by_name.items() if c.find("failure") is not None}
    assert failed == {"1 activation", "3 activation"}          # the two ReLUs that died
    failure = by_name["1 activation"].find("failure")
    assert failure.get("type") == "dead"
    assert "dead at step 4" in failure.get("message")
    assert "cause learning_rate" in failure.text and "fix:" in failure.text
    # a state not in --fail-on is noted, not failed
    assert "too_large" in by_name["2 update"].find("system-out").text
    assert by_name["run"].find("error") is None


@pytest.mark.e2e
def test_healthy_run_junit_has_no_failure(tmp_path):
    junit = tmp_path / "j.xml"
    proc, _ = run_neuraldbg(tmp_path, SAMPLES / "healthy.py",
                            options=["--fail-on", "dead,nonfinite", "--junit", str(junit)])
    assert proc.returncode == 0, proc.stderr
    root = parse_junit(junit)
    assert root.get("failures") == "0" and root.get("errors") == "0"
    assert int(root.get("tests")) > 5


def test_explain_junit_after_the_fact_with_ranks_and_a_killed_run(tmp_path):
    a = dying_relu(rank=0, world_size=2).write(tmp_path / "t.rank0.jsonl")
    b = TraceMaker(rank=1, world_size=2)
    b.tr(50, "net.1", "nonfinite")
    b = b.write(tmp_path / "t.rank1.jsonl")         # no run_end: killed
    junit = tmp_path / "out.xml"
    proc = cli("explain", "--fail-on", "dead,nonfinite", "--junit", junit, a, b)
    assert proc.returncode == 3, proc.stderr
    root = parse_junit(junit)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["neuraldbg.train.rank0", "neuraldbg.train.rank1"]
    rank1 = cases(suites[1])
    assert rank1["net.1 activation"].find("failure").get("type") == "nonfinite"
    assert rank1["run"].find("error").get("type") == "killed"
    assert cases(suites[0])["net.3 activation"].find("failure").get("type") == "dead"


def test_junit_holds_any_string_a_trace_carries(tmp_path):
    """Layer names with markup, control characters and a lone surrogate still give XML that
    parses, and say what they said."""
    name = "blk<&>\"'\x1b\x00\ud800"
    t = TraceMaker(layers=[(name, "ReLU", "relu")])
    t.tr(5, name, "dead", dead_ratio=1.0)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in t.end(20).events), encoding="utf-8")
    junit = tmp_path / "j.xml"
    proc = cli("explain", "--fail-on", "dead", "--junit", junit, path)
    assert proc.returncode == 3, proc.stderr
    failed = [c for c in parse_junit(junit).iter("testcase") if c.find("failure") is not None]
    assert len(failed) == 1 and failed[0].get("name").startswith("blk<&>\"'")


def test_junit_to_a_missing_folder_is_one_line_and_the_script_never_starts(tmp_path):
    marker = tmp_path / "started"
    script = tmp_path / "s.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    proc = cli("run", "--junit", tmp_path / "no" / "j.xml", script, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "cannot write JUnit file" in proc.stderr
    assert not marker.exists()


def github_env(tmp_path) -> dict:
    return {**ENV, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
            "GITHUB_WORKSPACE": str(tmp_path)}


def test_github_annotations_and_step_summary(tmp_path):
    trace = dying_relu(script=str(tmp_path / "train.py")).write(tmp_path / "t.jsonl")
    env = github_env(tmp_path)
    proc = cli("explain", "--json", "--fail-on", "dead", trace, env=env)
    assert proc.returncode == 3
    json.loads(proc.stdout)                 # --json stays JSON: commands go to stderr
    commands = [l for l in proc.stderr.splitlines() if l.startswith("::")]
    assert commands and commands[0].startswith("::error file=train.py,title=neuraldbg%3A dead")
    assert "net.3" in commands[0] and "%0Afix: " in commands[0]
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("## neuraldbg")
    assert "**Failed**: dead detected" in summary
    assert "| 1 | dead activation | net.3 (ReLU) | 41 |" in summary
    # appended, as each step of a job adds its own
    cli("explain", trace, env=env)
    assert (tmp_path / "summary.md").read_text().count("## neuraldbg") == 2


def test_a_likely_failure_outside_the_gate_is_a_warning_and_nothing_outside_github(tmp_path):
    trace = dying_relu().write(tmp_path / "t.jsonl")
    proc = cli("explain", trace, env=github_env(tmp_path))
    assert proc.stderr.splitlines()[0].startswith("::warning title=neuraldbg%3A dead")
    quiet = cli("explain", trace)
    assert "::" not in quiet.stderr and not (tmp_path / "other.md").exists()


@pytest.mark.e2e
def test_run_under_github_actions_annotates_on_stderr_leaving_stdout_the_scripts(tmp_path):
    env = github_env(tmp_path)
    plain = subprocess.run([sys.executable, str(SAMPLES / "dying_relu.py")], capture_output=True,
                           text=True, env=ENV, cwd=tmp_path, timeout=120)
    proc = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "run", "--fail-on", "dead",
                           "--trace", str(tmp_path / "t.jsonl"), str(SAMPLES / "dying_relu.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 3
    assert proc.stdout == plain.stdout
    assert any(l.startswith("::error ") and "dead" in l for l in proc.stderr.splitlines())
    assert "dead" in (tmp_path / "summary.md").read_text()
    assert trace_events(tmp_path / "t.jsonl")
