"""Curves in the trace: a `summary` event per layer at some steps, holding the numbers its
detectors judged, so that a report can show how a layer's numbers moved around its
transitions. Bounded: a trace grows with the log of the run's length, not with the length."""
from __future__ import annotations

import json

import pytest

from conftest import SAMPLES, run_neuraldbg
from neuraldbg_cli.explain.analysis import analyze, to_json
from neuraldbg_cli.observe.summaries import SummaryClock
from neuraldbg_cli.trace import read_trace


def summarised(steps: int, every: int = 10, points: int = 100, observed=1) -> list:
    clock = SummaryClock(every, points)
    return [s for s in range(0, steps, observed) if clock.due(s)]


def test_the_first_points_come_at_every_tenth_step():
    assert summarised(1000) == list(range(0, 1000, 10))


def test_the_count_grows_with_the_log_of_the_run():
    counts = {n: len(summarised(n)) for n in (10_000, 100_000, 1_000_000)}
    assert counts[100_000] < 450 and counts[1_000_000] < 650
    # each tenfold longer run adds about the same number of points
    assert abs((counts[1_000_000] - counts[100_000]) - (counts[100_000] - counts[10_000])) < 20
    late = summarised(1_000_000)
    assert late[-1] > 1_000_000 - 20_000      # the curve reaches the end of the run
    assert all(b > a for a, b in zip(late, late[1:]))


def test_a_run_observed_every_third_step_is_still_summarised_about_every_tenth():
    steps = summarised(300, observed=3)
    assert len(steps) == 30 and all(9 <= b - a <= 12 for a, b in zip(steps, steps[1:]))


@pytest.fixture(scope="module")
def dying(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dying")
    proc, events = run_neuraldbg(tmp, SAMPLES / "dying_relu.py")
    assert proc.returncode == 0, proc.stderr
    return tmp / "trace.jsonl", events


def curve(events, layer, key) -> dict:
    return {e["step"]: e["stats"].get(key) for e in events
            if e["event"] == "summary" and e["layer"] == layer}


@pytest.mark.e2e
def test_summaries_hold_each_signals_numbers_around_the_transition(dying):
    _, events = dying
    # the ReLU that dies at step 44: its inactive share before and after, every 10 steps
    inactive = curve(events, "1", "inactive")
    assert sorted(inactive) == list(range(0, 80, 10))
    assert inactive[40] < 0.5 and inactive[50] >= 0.9 and inactive[70] >= 0.9
    # a Linear layer has its output rms, its gradient norm and its update ratio
    linear = next(e for e in events if e["event"] == "summary" and e["layer"] == "2")
    assert {"rms", "grad_norm", "update_ratio"} <= set(linear["stats"])
    # the update ratio jumps with the learning rate raised at step 40
    updates = curve(events, "2", "update_ratio")
    assert updates[30] < 0.05 < updates[40]
    # the loss, on its pseudo-layer: at every step of the first 100 (one number, not one a
    # layer), so its spike at step 41 shows
    loss = curve(events, "(loss)", "loss")
    assert sorted(loss) == list(range(80)) and all(v > 0 for v in loss.values())
    assert loss[41] > 3 * loss[38]


@pytest.mark.e2e
def test_summaries_change_nothing_explain_says(dying, tmp_path):
    path, events = dying
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps(e) + "\n" for e in events if e["event"] != "summary"))
    with_them = to_json(analyze([read_trace(str(path))]))["hypotheses"]
    without = to_json(analyze([read_trace(str(bare))]))["hypotheses"]
    assert with_them == without and with_them


@pytest.mark.e2e
def test_the_cadence_is_a_threshold(tmp_path):
    (tmp_path / "mine.yaml").write_text("summary:\n  every: 4\n  points: 5\n  loss_every: 2\n")
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "healthy.py",
                                 options=["--thresholds", str(tmp_path / "mine.yaml")])
    assert proc.returncode == 0, proc.stderr
    steps = sorted(curve(events, "(input)", "rms"))
    # every 4 steps up to 4 x 5, then every 8 up to 8 x 5, then every 16
    assert steps[:11] == [0, 4, 8, 12, 16, 20, 24, 32, 40, 48, 64]
    loss = sorted(curve(events, "(loss)", "loss"))
    assert loss[:8] == [0, 2, 4, 6, 8, 10, 12, 16]
