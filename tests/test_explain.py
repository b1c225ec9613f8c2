"""`neuraldbg explain`: the --json schema, exit codes, input errors, warnings, several ranks."""
import json

import pytest

from neuraldbg_cli.cli import main
from tracemaker import TraceMaker, dying_relu

ACTIVATION = ("dead", "saturated", "anomalous", "nonfinite")
GRADIENT = ("vanishing", "exploding", "nonfinite")
CAUSES = ("learning_rate", "initialization", "input_data", "architecture", "upstream", "unknown")


def run_json(capsys, *args):
    rc = main(["explain", "--json", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, json.loads(out, parse_constant=_no_nan), err


def _no_nan(name):
    raise AssertionError(f"not strict JSON: {name}")


def test_json_schema(tmp_path, capsys):
    rc, doc, _ = run_json(capsys, dying_relu().write(tmp_path / "t.jsonl"))
    assert rc == 0 and doc["schema"] == 1
    assert doc["traces"][0]["path"].endswith("t.jsonl") and doc["traces"][0]["status"] == "completed"
    hyps = doc["hypotheses"]
    assert [h["rank"] for h in hyps] == list(range(1, len(hyps) + 1))
    for h in hyps:
        assert {"rank", "symptom", "layer", "step", "cause", "confidence", "summary", "evidence",
                "fix", "process_rank"} <= set(h)
        assert h["symptom"] in ACTIVATION + GRADIENT and h["cause"] in CAUSES
        assert 0 <= h["confidence"] <= 1 and isinstance(h["step"], int)
        assert isinstance(h["summary"], str) and isinstance(h["fix"], str)
        assert h["evidence"] and all(isinstance(e, str) for e in h["evidence"])
    top = hyps[0]
    assert (top["symptom"], top["layer"], top["step"], top["cause"]) == ("dead", "net.3", 41, "learning_rate")
    assert all(h["cause"] == "upstream" and h["upstream_of"] == 1 for h in hyps[1:])
    assert [h["confidence"] for h in hyps] == sorted((h["confidence"] for h in hyps), reverse=True)


def test_healthy_run_yields_nothing_likely(tmp_path, capsys):
    rc, doc, _ = run_json(capsys, TraceMaker().end(50).write(tmp_path / "t.jsonl"))
    assert rc == 0 and all(h["confidence"] < 0.5 for h in doc["hypotheses"])


@pytest.mark.parametrize("option,expected", [
    ([], 0), (["--fail-on", "dead"], 3), (["--fail-on", "dead,nonfinite"], 3),
    (["--fail-on", "nonfinite"], 0), (["--fail-on", "vanishing"], 3), (["--fail-on", "none"], 0),
])
def test_fail_on_exit_codes(tmp_path, capsys, option, expected):
    path = dying_relu().write(tmp_path / "t.jsonl")
    assert main(["explain", *option, path]) == expected
    assert main(["explain", "--json", *option, path]) == expected


def test_scripts_own_failure_is_not_reapplied(tmp_path, capsys):
    t = dying_relu()
    t.events[-1].update(status="failed", exit_code=1, error="RuntimeError: boom")
    path = t.write(tmp_path / "t.jsonl")
    assert main(["explain", path]) == 0
    assert "failed (exit 1): RuntimeError: boom" in capsys.readouterr().out
    assert main(["explain", "--fail-on", "dead", path]) == 3


def test_unknown_fail_on_state_is_a_usage_error(tmp_path, capsys):
    assert main(["explain", "--fail-on", "zombie", dying_relu().write(tmp_path / "t.jsonl")]) == 2
    assert "zombie" in capsys.readouterr().err


def _bad(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


START = json.dumps(TraceMaker().events[0])


@pytest.mark.parametrize("make,needle", [
    (lambda d: str(d / "missing.jsonl"), "missing.jsonl"),
    (lambda d: _bad(d, "empty.jsonl", ""), "empty"),
    (lambda d: _bad(d, "junk.jsonl", START + "\nnot json\n" + START + "\n"), "line 2"),
    (lambda d: _bad(d, "new.jsonl", START.replace('"schema": 1', '"schema": 9') + "\n"), "schema 9"),
    (lambda d: _bad(d, "nostart.jsonl", '{"event": "run_end", "status": "completed"}\n'), "run_start"),
])
def test_unreadable_traces_are_one_line_exit_2(tmp_path, capsys, make, needle):
    path = make(tmp_path)
    assert main(["explain", path]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert needle in err and path.split("/")[-1] in err and "Traceback" not in err


def test_trace_cut_mid_line_is_explained_with_a_warning(tmp_path, capsys):
    text = "".join(json.dumps(e) + "\n" for e in dying_relu().events[:-1])
    path = _bad(tmp_path, "cut.jsonl", text + '{"event": "transition", "step": 5')
    rc, doc, err = run_json(capsys, path)
    assert rc == 0 and "cut short" in err and doc["hypotheses"][0]["layer"] == "net.3"
    assert doc["traces"][0]["status"] is None


def test_missing_run_end_is_a_warning(tmp_path, capsys):
    t = dying_relu()
    t.events.pop()
    rc, doc, err = run_json(capsys, t.write(tmp_path / "t.jsonl"))
    assert rc == 0 and "no run_end" in err and doc["hypotheses"]


def test_unknown_keys_and_events_are_ignored(tmp_path, capsys):
    t = dying_relu()
    t.events.insert(2, {"event": "from_the_future", "step": 3, "whatever": [1, 2]})
    for e in t.events:
        e["extra_key"] = {"nested": True}
    t.events.insert(3, {"event": "transition", "step": "soon"})     # unusable: skipped
    rc, doc, _ = run_json(capsys, t.write(tmp_path / "t.jsonl"))
    assert rc == 0 and doc["hypotheses"][0]["layer"] == "net.3"


def ranks(tmp_path, run_ids=("r1", "r1"), scripts=("train.py", "train.py")):
    """Rank 1 gets a NaN batch at step 10; rank 0 follows through the shared update."""
    r0 = TraceMaker(rank=0, world_size=2, run_id=run_ids[0], script=scripts[0])
    r0.tr(10, "net.4", "nonfinite", signal="gradient").tr(10, "net.0", "nonfinite", signal="gradient")
    r0.tr(11, "net.0", "nonfinite", rms="nan").tr(11, "net.1", "nonfinite", rms="nan")
    r1 = TraceMaker(rank=1, world_size=2, run_id=run_ids[1], script=scripts[1])
    r1.tr(10, "(input)", "nonfinite", rms="nan").tr(10, "net.0", "nonfinite", rms="nan")
    r1.tr(10, "net.4", "nonfinite", signal="gradient").tr(11, "(input)", "normal")
    return [r0.end(20).write(tmp_path / "t.rank0.jsonl"), r1.end(20).write(tmp_path / "t.rank1.jsonl")]


def test_several_ranks_name_the_rank_where_it_began(tmp_path, capsys):
    rc, doc, err = run_json(capsys, *ranks(tmp_path))
    assert rc == 0 and err == ""
    top = doc["hypotheses"][0]
    assert (top["layer"], top["cause"], top["process_rank"], top["rank"]) == ("(input)", "input_data", 1, 1)
    assert len([h for h in doc["hypotheses"] if h["cause"] != "upstream"]) == 1
    assert {h["process_rank"] for h in doc["hypotheses"]} == {0, 1}
    assert [t["rank"] for t in doc["traces"]] == [0, 1]


@pytest.mark.parametrize("kw,needle", [
    ({"run_ids": ("a", "b")}, "different runs"),
    ({"scripts": ("a.py", "b.py")}, "script"),
])
def test_mixed_runs_warn(tmp_path, capsys, kw, needle):
    rc, _, err = run_json(capsys, *ranks(tmp_path, **kw))
    assert rc == 0 and needle in err


def test_same_rank_twice_and_world_size_mismatch_warn(tmp_path, capsys):
    a = TraceMaker(world_size=2).end(5).write(tmp_path / "a.jsonl")
    b = TraceMaker(world_size=4).end(5).write(tmp_path / "b.jsonl")
    _, _, err = run_json(capsys, a, b)
    assert "rank 0 appears in several traces" in err and "world_size" in err


def test_a_spike_that_returns_later_is_told_with_its_own_recovery(tmp_path, capsys):
    """Two one-step loss spikes 23 steps apart are one story, but neither lasted 24 steps."""
    t = TraceMaker()
    t.tr(47, "(loss)", "spiking", signal="loss", loss=6.9, loss_median=0.23)
    t.tr(48, "(loss)", "normal", signal="loss", loss=0.38)
    t.tr(70, "(loss)", "spiking", signal="loss", loss=5.1, loss_median=0.09)
    t.tr(71, "(loss)", "normal", signal="loss", loss=0.1)
    _, doc, _ = run_json(capsys, t.end(80).write(tmp_path / "t.jsonl"))
    top = doc["hypotheses"][0]
    assert (top["symptom"], top["step"]) == ("spiking", 47)
    assert "recovered at step 48, 1 step(s) after the onset; the last of the others at step 71" \
        in top["evidence"], top["evidence"]


def test_a_failure_that_recovered_while_its_echo_lasted_says_which_lasted(tmp_path, capsys):
    """Class-sorted data: every target class 0 for the first 140 steps, and the loss stalled
    from step 100 to the end. The first failure recovered; only its echo lasted."""
    t = TraceMaker()
    told = {"loss_fn": "nll_loss", "activation": "log_softmax", "normalised": 3, "units": 3,
            "rows": 1, "target": "index", "output_min": -1.1, "output_max": -1.1,
            "target_min": 0.0, "target_max": 0.0, "target_classes": 1.0,
            "output_shape": [3], "target_shape": [1]}
    t.tr(50, "(output)", "one_class", signal="output", why="one_class", steps=51, **told)
    t.tr(100, "(loss)", "stalled", signal="loss", loss=1.098, loss_median=1.098, loss_start=1.099)
    t.tr(140, "(output)", "normal", signal="output")
    _, doc, _ = run_json(capsys, t.end(400).write(tmp_path / "t.jsonl"))
    top = doc["hypotheses"][0]
    assert (top["symptom"], top["step"], top["cause"]) == ("one_class", 50, "input_data")
    assert "recovered at step 140, 90 step(s) after the onset" in top["evidence"], top["evidence"]
    assert "the others lasted to the end of the run (step 399)" in top["evidence"], top["evidence"]
