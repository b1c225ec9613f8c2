"""Mixed precision (CONTRACT schema 3: cause `precision`, signal `scaler`): a GradScaler's
calibration and its occasional skips are how it works, never findings; a scaler that skips
step after step, a float16 output that overflows, a log of a probability rounded to exactly 1,
Adam's eps of 1e-8 on float16 weights are told apart from the model's own trouble and blamed
on the number format."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from conftest import (
    MAX_CHANGES,
    describe,
    failures,
    most_changes,
    run_end,
    run_neuraldbg,
    transitions,
)
from neuraldbg_cli.explain.analysis import analyze
from neuraldbg_cli.observe.detectors.base import Observation
from neuraldbg_cli.observe.detectors.scaler import ScalerDetector
from neuraldbg_cli.observe.optimizers import _low_dtype
from neuraldbg_cli.thresholds import Thresholds
from neuraldbg_cli.trace import read_trace
from tracemaker import TraceMaker

# name: (the transition it must show: layer, signal, state), what the top hypothesis must quote
CASES = {
    "fp16_overflow": (("norm", "activation", "nonfinite"), "climbed from"),
    "scaler_skipping": (("(scaler)", "scaler", "collapsed"), "overflowed first in 2"),
    "bf16_log": (("(loss)", "loss", "nonfinite"), "a bfloat16 sigmoid"),
    "fp16_adam_eps": (("0", "activation", "nonfinite"), "eps 1e-08, under float16's smallest"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("name", CASES)
def test_the_format_is_blamed(traced, name):
    (layer, signal, state), quoted = CASES[name]
    events, analysis = traced(name)
    assert transitions(events, layer=layer, signal=signal, to=state), describe(events)
    top = analysis.hypotheses[0]
    assert (top.layer, top.symptom, top.cause) == (layer, state, "precision"), \
        (top.summary, top.evidence, describe(events))
    assert top.confidence >= 0.5
    assert any(quoted in line for line in [top.summary, *top.evidence]), (top.summary, top.evidence)


@pytest.mark.e2e
@pytest.mark.parametrize("name", CASES)
def test_the_fixed_twin_gets_no_finding(traced, name):
    events, analysis = traced(name, "--fixed")
    assert not failures(events), describe(events)
    assert not analysis.hypotheses, [h.summary for h in analysis.hypotheses]


@pytest.mark.e2e
@pytest.mark.parametrize("fixed", [False, True], ids=["broken", "fixed"])
@pytest.mark.parametrize("name", CASES)
def test_no_layer_flaps(traced, name, fixed):
    events, _ = traced(name, *(("--fixed",) if fixed else ()))
    assert most_changes(events)[0] <= MAX_CHANGES, most_changes(events)


@pytest.mark.e2e
def test_a_skipped_step_is_still_a_step_and_the_loss_is_read_unscaled(traced):
    """Every scaler.step() is a step, skipped or not; the loss judged is the one before
    scaler.scale() (the scaled one jumps with every change of scale)."""
    events, _ = traced("scaler_skipping")
    assert run_end(events)["steps"] == 40
    first = transitions(events, layer="(scaler)")[0]
    assert first["stats"]["skipped"] is True and first["stats"]["scale"] == 65536.0
    assert first["stats"]["overflow_layer"] == "2"
    loss = transitions(events, layer="(loss)")[0]["stats"]["loss"]
    assert 1e5 < loss < 1e8         # the summed loss itself, not x65536 (it is ~6e6)


@pytest.mark.e2e
def test_the_overflow_echoes_in_the_scaler(traced):
    """The NaN born in the forward pass makes every later step skip: one story, headed by
    the overflow, the scaler's collapse its consequence."""
    _, analysis = traced("fp16_overflow")
    top = analysis.hypotheses[0]
    assert any("(scaler)" in line and "collapsed" in line for line in top.evidence), top.evidence
    assert all(h.origin is not None for h in analysis.hypotheses if h.layer == "(scaler)"), \
        [h.summary for h in analysis.hypotheses]


def _judge(steps, th=None):
    """The scaler detector over (scale, skipped) steps: the states it gives, in order."""
    d = ScalerDetector(th or Thresholds())
    h = d.history()
    out = []
    for scale, skipped in steps:
        x = Observation("scaler", facts={"scale": scale, "skipped": skipped})
        out.append(d.judge(x, h)[0])
        d.remember(x, h)
    return out


def _scaler_run(skips_at, steps=200, scale=65536.0, interval=20):
    """What a GradScaler does: halve at a skipped step, double after `interval` clean ones."""
    out, clean = [], 0
    for step in range(steps):
        skipped = step in skips_at
        out.append((scale, skipped))
        if skipped:
            scale, clean = scale / 2, 0
        else:
            clean += 1
            if clean == interval:
                scale, clean = scale * 2, 0
    return out


def test_calibration_and_occasional_skips_are_normal():
    calibration = set(range(9))                         # 2^24 down to 2^15
    probing = {50, 71, 95, 137, 144, 170}               # growth, then one overflow each time
    assert set(_judge(_scaler_run(calibration | probing, scale=2.0 ** 24))) == {"normal"}


def test_most_steps_skipped_with_the_scale_falling_is_skipping():
    # clean for 30 steps, then 3 skipped of every 4: the scale keeps falling
    skips = {s for s in range(30, 200) if s % 4}
    got = _judge(_scaler_run(skips, interval=2000))
    assert got[:33] == ["normal"] * 33
    assert "skipping" in got[30:45]


def test_a_scale_below_one_is_collapsed_and_every_step_skipped_gets_there():
    got = _judge(_scaler_run(set(range(200))))
    assert got[:17] == ["normal"] * 17          # 65536 halved 16 times is 1: not yet
    assert got[17] == "collapsed"               # then 0.5: a step at a scale of 1 overflowed


@pytest.mark.usefixtures("hooks_clean")
@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_the_scaler_is_observed_in_process_and_unwrapped_after(tmp_path, fused):
    """The Python API watches a GradScaler as the CLI does, and restores GradScaler.step. A
    fused optimizer is handed the scale and the inf check, and steps even when it skips: its
    skipped steps are told by that check, and its gradients read unscaled."""
    from conftest import trace_events
    from neuraldbg_cli import NeuralDbg

    step = torch.amp.GradScaler.step
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 30)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(model, trace=str(trace), stop_on="nonfinite", capture=str(tmp_path / "cap")):
        for _ in range(20):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    assert torch.amp.GradScaler.step is step
    assert not (tmp_path / "cap").exists()     # (the calibration's overflows stop nothing)
    events = trace_events(trace)
    assert run_end(events)["steps"] == 20
    first = transitions(events, layer="(scaler)", to="normal")[0]
    assert first["stats"]["skipped"] is True and first["stats"]["scale"] == pytest.approx(2.0 ** 30, rel=1e-5)
    assert not failures(events), describe(events)
    norms = [t["stats"]["grad_norm"] for t in transitions(events, signal="gradient")]
    assert norms and all(1e-4 < n < 10 for n in norms), norms    # unscaled (2^30 otherwise)
    dtypes = {t.get("dtype") for t in transitions(events, signal="activation")}
    assert "float16" in dtypes


@pytest.mark.e2e
def test_a_run_whose_every_step_the_scaler_skips_is_stopped_from_scaler_step(tmp_path):
    """No optimizer step, no pre-step: the stop comes out of scaler.step() at the step's end,
    the script's finally runs, the weights stay finite."""
    from conftest import REPO
    proc, events = run_neuraldbg(tmp_path, REPO / "tests" / "scripts" / "scaler_inf_batch.py",
                                 options=("--stop-on", "nonfinite"))
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "steps 0 finite True" in proc.stdout
    end = run_end(events)
    assert end["status"] == "stopped" and end["stop"]["state"] == "nonfinite", end


@pytest.mark.parametrize("told,blamed", [
    ({"param_dtype": "float16", "eps": 1e-8}, True),
    ({"param_dtype": "float16", "eps": 1e-4}, False),     # (an eps float16 holds)
    ({"param_dtype": "bfloat16", "eps": 1e-8}, False),    # (float32's range: 1e-8 is held)
    ({"eps": 1e-8}, False),                               # (float32 weights, under autocast)
])
def test_adam_eps_is_blamed_only_where_float16_weights_cannot_hold_it(tmp_path, told, blamed):
    t = TraceMaker()
    t.events.append({"event": "hparams", "step": 0, "optimizer": "Adam", "optimizer_index": 0,
                     "lr": [1e-3], "previous_lr": None, **told})
    t.tr(1, "net.0", "nonfinite", rms=float("nan")).end(40)
    top = analyze([read_trace(t.write(tmp_path / "t.jsonl"))]).hypotheses[0]
    assert (top.cause == "precision") is blamed, (top.cause, top.summary)
    if blamed:
        assert "eps is 0 in float16" in top.summary and top.confidence >= 0.8


def test_a_nan_long_after_the_first_steps_blames_the_eps_less_surely(tmp_path):
    t = TraceMaker()
    t.events.append({"event": "hparams", "step": 0, "optimizer": "Adam", "optimizer_index": 0,
                     "lr": [1e-3], "previous_lr": None, "param_dtype": "float16", "eps": 1e-8})
    t.tr(300, "net.0", "nonfinite", rms=float("nan")).end(400)
    top = analyze([read_trace(t.write(tmp_path / "t.jsonl"))]).hypotheses[0]
    assert top.cause == "precision" and 0.5 <= top.confidence < 0.8, (top.cause, top.confidence)


def test_the_optimizer_tells_the_dtype_of_the_weights_it_steps():
    assert _low_dtype({"params": [nn.Linear(2, 2).half().weight]}) == "float16"
    assert _low_dtype({"params": [nn.Linear(2, 2).to(torch.bfloat16).weight]}) == "bfloat16"
    assert _low_dtype({"params": [nn.Linear(2, 2).weight]}) is None
    assert _low_dtype({"params": []}) is None
