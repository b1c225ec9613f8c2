"""Healthy training runs of common shapes must produce no failure transition at all, and pass
a `--fail-on` gate of every state. Scripts: tests/fixtures/*.py."""
from __future__ import annotations

import re

import pytest

from conftest import FAILURE_STATES, FIXTURES, describe, failures, run_end, run_neuraldbg, transitions

pytestmark = pytest.mark.e2e

ALL_STATES = ",".join(FAILURE_STATES)

HEALTHY = {
    # fixture script: expected optimizer steps
    "cnn_bn_dropout": 60,
    "gelu_transformer": 60,
    "eval_loop": 60,
    "grad_accum": 25,
    "adam_schedule": 100,
    "sigmoid_output": 100,
    "curriculum": 160,
    # mixed precision: a scaler calibrating and probing, bfloat16, accumulation under a scaler
    "amp_fp16_scaler": 160,
    "amp_bf16_transformer": 60,
    "amp_grad_accum": 40,
}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    cache = {}

    def run(name):
        if name not in cache:
            tmp = tmp_path_factory.mktemp(name)
            cache[name] = run_neuraldbg(tmp, FIXTURES / f"{name}.py",
                                        options=("--fail-on", ALL_STATES))
        return cache[name]
    return run


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_runs_to_completion(traced, name):
    proc, events = traced(name)
    end = run_end(events)
    assert end["status"] == "completed" and end["error"] is None, (end, proc.stderr[-3000:])
    assert end["steps"] == HEALTHY[name]
    # the --fail-on gate of every state: exit 3 exactly when a failure was reported
    assert proc.returncode == (3 if failures(events) else 0), proc.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_no_failure_transition(traced, name):
    proc, events = traced(name)
    assert not failures(events), f"false alarm in {name}:\n{describe(events)}"
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    # every observed layer starts normal/healthy at step 0, and nothing changes afterwards
    assert transitions(events), "nothing observed"
    # (a scaler's calibration skips its first steps: no update is measured until one goes through)
    first_step = {"amp_fp16_scaler": 9}.get(name, 0)
    assert all(t["step"] <= first_step and t["from"] is None for t in transitions(events)), \
        describe(events)


def _printed_steps(stdout: str) -> int:
    m = re.search(r"optimizer steps: (\d+)", stdout)
    assert m, stdout
    return int(m.group(1))


def test_gradient_accumulation_one_step_per_optimizer_step(traced):
    proc, events = traced("grad_accum")
    n = _printed_steps(proc.stdout)
    assert n == 25
    assert run_end(events)["steps"] == n            # 100 forwards, 25 optimizer steps
    assert max(e["step"] for e in events if "step" in e) < n


def test_evaluation_forwards_create_no_steps(traced):
    proc, events = traced("eval_loop")
    n = _printed_steps(proc.stdout)
    assert n == 60
    assert run_end(events)["steps"] == n            # 6 x 5 evaluation forwards not counted
    # nothing observed after the last training step (the script ends with an evaluation)
    assert max(e["step"] for e in events if "step" in e) < n


def test_transformer_layers_observed(traced):
    _, events = traced("gelu_transformer")
    act = {t["layer"]: t for t in transitions(events, signal="activation")}
    for layer in ("blocks.0.mlp.1", "blocks.1.mlp.1"):
        assert act[layer]["module_type"] == "GELU" and act[layer]["to"] == "normal"
    assert act["blocks.0.ln1"]["module_type"] == "LayerNorm"
    grad = {t["layer"] for t in transitions(events, signal="gradient")}
    assert {"embed", "blocks.0.attn", "blocks.1.mlp.0", "head"} <= grad
