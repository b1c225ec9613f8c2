"""End to end: each bundled sample script under `neuraldbg run` produces the transition it is
meant to show (layer, signal, to-state, step window), and the healthy one produces none."""
from __future__ import annotations

import pytest

from conftest import (
    FAILURE_STATES,
    FIXTURES,
    MAX_CHANGES,
    SAMPLES,
    describe,
    failures,
    most_changes,
    run_end,
    run_neuraldbg,
    run_python,
    transitions,
)

pytestmark = pytest.mark.e2e

ALL_STATES = ",".join(FAILURE_STATES)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """run(name, *args, options=...) -> (proc, events); each distinct run happens once."""
    cache = {}

    def run(name, *args, options=("--fail-on", "none")):
        key = (name, args, tuple(options))
        if key not in cache:
            tmp = tmp_path_factory.mktemp(name)
            cache[key] = run_neuraldbg(tmp, SAMPLES / f"{name}.py", *args, options=options)
        return cache[key]
    return run


def _ok(proc, events, code=0):
    assert proc.returncode == code, f"exit {proc.returncode}\nstderr:\n{proc.stderr[-3000:]}"
    end = run_end(events)
    assert end["status"] == "completed" and end["error"] is None, end
    return end


def _one(events, layer, signal, to, lo, hi, *, frm="any"):
    """The first transition of `layer`/`signal` into `to` (from `frm`, unless "any");
    asserts lo <= step <= hi."""
    found = [t for t in transitions(events, layer=layer, signal=signal, to=to)
             if frm == "any" or t["from"] == frm]
    assert found, f"no {layer} {signal} {frm} -> {to}; transitions:\n{describe(events)}"
    t = found[0]
    assert lo <= t["step"] <= hi, f"{layer} {signal} -> {to} at step {t['step']}, " \
        f"expected {lo}..{hi}; transitions:\n{describe(events)}"
    return t


# ---- healthy ---------------------------------------------------------------------------------

def test_healthy_has_no_failure_and_passes_fail_on_dead(traced):
    proc, events = traced("healthy", options=("--fail-on", "dead"))
    end = _ok(proc, events, 0)
    assert end["steps"] == 150
    assert not failures(events), describe(events)
    # every layer was observed, from its first step, as normal / healthy
    first = transitions(events)
    assert first and all(t["from"] is None and t["step"] == 0 for t in first), describe(events)
    assert {t["layer"] for t in transitions(events, signal="activation")} == \
        {"(input)", "0", "1", "2", "3", "4"}
    assert {t["layer"] for t in transitions(events, signal="gradient")} == {"0", "2", "4"}


def test_healthy_passes_every_gate(traced):
    proc, events = traced("healthy", options=("--fail-on", ALL_STATES))
    _ok(proc, events, 0)


def test_healthy_stdout_same_as_python(traced):
    proc, _ = traced("healthy", options=("--fail-on", "dead"))
    plain = run_python(SAMPLES / "healthy.py")
    assert plain.returncode == 0, plain.stderr
    assert proc.stdout == plain.stdout
    assert "final loss" in proc.stdout


# ---- dying ReLU after a learning-rate increase ---------------------------------------------

def test_dying_relu_dead_after_lr_increase_and_fail_on_dead_exits_3(traced):
    proc, events = traced("dying_relu", options=("--fail-on", "dead"))
    _ok(proc, events, 3)
    hparams = [e for e in events if e["event"] == "hparams"]      # an optional event kind
    if hparams:
        assert [e["lr"] for e in hparams if e["step"] == 40] == [[2.0]], hparams
    t = _one(events, "1", "activation", "dead", 41, 50)
    assert t["module_type"] == "ReLU" and t["from"] in ("normal", "anomalous"), t
    assert t["stats"]["dead_ratio"] >= 0.9
    # healthy before the increase, and the layer stays dead once dead
    assert all(f["step"] >= 40 for f in failures(events)), describe(events)
    later = [e for e in transitions(events, layer="1", signal="activation")
             if e["step"] > t["step"]]
    assert not later, describe(events)


def test_dying_relu_stdout_same_as_python(traced):
    proc, _ = traced("dying_relu", options=("--fail-on", "dead"))
    plain = run_python(SAMPLES / "dying_relu.py")
    assert plain.returncode == 0, plain.stderr
    assert proc.stdout == plain.stdout


def test_dying_relu_without_the_increase_stays_healthy(traced):
    proc, events = traced("dying_relu", "--lr-after", "0.01", options=("--fail-on", "dead"))
    _ok(proc, events, 0)
    assert not failures(events), describe(events)


# ---- the other faults ---------------------------------------------------------------------

def test_dead_init_relu_dead_from_step_0(traced):
    proc, events = traced("dead_init")
    _ok(proc, events)
    for layer in ("body.1", "body.3"):
        t = _one(events, layer, "activation", "dead", 0, 0, frm=None)
        assert t["module_type"] == "ReLU" and t["stats"]["dead_ratio"] == 1.0
        assert len(transitions(events, layer=layer, signal="activation")) == 1, describe(events)
    # no gradient reaches the layers below the dead ReLUs
    for layer in ("body.0", "body.2"):
        _one(events, layer, "gradient", "vanishing", 0, 0, frm=None)


def test_tanh_saturation_from_step_0(traced):
    proc, events = traced("tanh_saturation")
    _ok(proc, events)
    t = _one(events, "act1", "activation", "saturated", 0, 0, frm=None)
    assert t["module_type"] == "Tanh" and t["stats"]["saturated_ratio"] >= 0.7
    assert len(transitions(events, layer="act1", signal="activation")) == 1, describe(events)


def test_vanishing_sigmoid_first_layers(traced):
    proc, events = traced("vanishing_sigmoid")
    _ok(proc, events)
    for layer in ("0", "2", "4"):
        t = _one(events, layer, "gradient", "vanishing", 0, 0, frm=None)
        assert t["module_type"] == "Linear"
    # the last layers still learn: their gradient is healthy throughout
    for layer in ("38", "40"):
        grad = transitions(events, layer=layer, signal="gradient")
        assert [t["to"] for t in grad] == ["healthy"], describe(events)
    # the sigmoids themselves are not saturated
    assert not [t for t in failures(events) if t["signal"] == "activation"], describe(events)


def test_exploding_gradient_then_nonfinite(traced):
    proc, events = traced("exploding")
    _ok(proc, events)
    exploding = [t for t in transitions(events, signal="gradient", to="exploding")
                 if t["from"] == "healthy"]
    assert exploding, describe(events)
    first = min(exploding, key=lambda t: t["step"])
    assert 20 <= first["step"] <= 38, describe(events)
    assert first["module_type"] == "Linear"
    # healthy layers before: no activation or gradient failure in the first steps; what comes
    # earlier is the warning of the learning dynamics, updates too large for the weights
    assert min(f["step"] for f in failures(events)
               if f["signal"] in ("activation", "gradient")) >= first["step"], describe(events)
    early = [f for f in failures(events) if f["step"] < first["step"]]
    assert {f["signal"] for f in early} <= {"update", "loss"}, describe(events)
    assert any(f["signal"] == "update" and f["to"] == "too_large" for f in early), describe(events)
    nonfinite = transitions(events, signal="gradient", to="nonfinite")
    assert nonfinite and min(t["step"] for t in nonfinite) > first["step"], describe(events)


def test_nan_batch_input_and_layers_nonfinite_at_step_30(traced):
    proc, events = traced("nan_batch")
    _ok(proc, events)
    _one(events, "(input)", "activation", "nonfinite", 30, 30, frm="normal")
    _one(events, "(input)", "activation", "normal", 31, 31, frm="nonfinite")
    for layer in ("0", "1", "2", "3", "4"):
        _one(events, layer, "activation", "nonfinite", 30, 30, frm="normal")
    for layer in ("0", "2", "4"):
        _one(events, layer, "gradient", "nonfinite", 30, 30, frm="healthy")
    assert min(f["step"] for f in failures(events)) == 30, describe(events)


# ---- faults the detector misses (tests/fixtures) -------------------------------------------

@pytest.fixture(scope="module")
def rnn_spike(tmp_path_factory):
    return run_neuraldbg(tmp_path_factory.mktemp("rnn_spike"), FIXTURES / "rnn_spike.py",
                         options=("--fail-on", "none"))


def test_rnn_spike_scenario(rnn_spike):
    proc, events = rnn_spike
    _ok(proc, events)
    spike = float(proc.stdout.split("grad norm ")[1].split(",")[0])
    assert spike > 1e5                  # one step far above exploding_norm (1e3)


def test_rnn_single_gradient_spike_is_reported(rnn_spike):
    _, events = rnn_spike
    _one(events, "rnn", "gradient", "exploding", 0, 0, frm=None)


@pytest.mark.parametrize("name", ["healthy", "dying_relu", "dead_init", "tanh_saturation",
                                  "vanishing_sigmoid", "exploding", "nan_batch"])
def test_no_layer_changes_state_more_than_a_few_times(traced, name):
    """Hysteresis: a layer that keeps falling back stays in its failure state."""
    _, events = traced(name)
    assert most_changes(events)[0] <= MAX_CHANGES, most_changes(events)
