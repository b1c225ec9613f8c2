"""The pytest plugin, as a project's own test suite uses it: a test that trains under the
`neuraldbg` fixture fails on the listed states, with the explanation as its message; a
healthy training passes; the test's own errors stay its own. Each suite runs in a pytest
subprocess, in a folder of its own, as a user's project would."""
import subprocess
import sys
import textwrap

import pytest

from conftest import ENV

pytestmark = pytest.mark.e2e

# A ReLU MLP whose learning rate is raised 200x at step 20: its first ReLU dies (the
# dying_relu sample, shortened); `lr_after=0.01` keeps it healthy.
TRAINING = '''
import pytest
import torch
from torch import nn


def train(lr_after, steps=50):
    torch.manual_seed(0)
    X = torch.rand(1024, 32)
    y = X @ torch.randn(32, 1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(steps):
        if step == 20:
            for g in opt.param_groups:
                g["lr"] = lr_after
        i = torch.randint(0, 1024, (64,))
        loss = nn.functional.smooth_l1_loss(model(X[i]), y[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
'''


def run_suite(tmp_path, tests: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_training.py").write_text(TRAINING + textwrap.dedent(tests))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-rA", "test_training.py"], capture_output=True, text=True,
                          cwd=tmp_path, env=ENV, timeout=300)


def test_a_dying_training_fails_its_test_with_the_explanation(tmp_path):
    proc = run_suite(tmp_path, '''
        def test_trains(neuraldbg):
            train(lr_after=2.0)
    ''')
    assert proc.returncode == 1, proc.stdout
    out = proc.stdout
    assert "1 failed" in out
    assert "FAILED test_training.py::test_trains" in out
    assert "neuraldbg: dead detected in the training" in out
    # the explanation, as `neuraldbg explain` prints it: the layer, the step, the cause
    assert "dead activation in 1 (ReLU)" in out
    assert "cause learning_rate" in out
    assert "Traceback" not in out


def test_a_healthy_training_passes_and_its_observation_is_at_hand(tmp_path):
    proc = run_suite(tmp_path, '''
        def test_trains(neuraldbg):
            train(lr_after=0.01)
            assert neuraldbg.steps == 50
            assert neuraldbg.failures() == []
    ''')
    assert proc.returncode == 0, proc.stdout
    assert "1 passed" in proc.stdout


def test_the_marker_chooses_the_states(tmp_path):
    """The same dying run passes when only nonfinite fails it."""
    proc = run_suite(tmp_path, '''
        @pytest.mark.neuraldbg(fail_on="nonfinite")
        def test_trains(neuraldbg):
            train(lr_after=2.0)
            assert neuraldbg.failures(["dead"])
    ''')
    assert proc.returncode == 0, proc.stdout
    assert "1 passed" in proc.stdout


def test_the_tests_own_failure_is_reported_as_its_own(tmp_path):
    """An assertion of the test itself is the failure pytest shows, not the training's."""
    proc = run_suite(tmp_path, '''
        def test_trains(neuraldbg):
            train(lr_after=2.0)
            assert 1 + 1 == 3, "the test's own check"
    ''')
    assert proc.returncode == 1, proc.stdout
    assert "the test's own check" in proc.stdout
    assert "neuraldbg: dead detected" not in proc.stdout


def test_hooks_are_gone_after_the_test(tmp_path):
    """A later test in the same session trains unobserved."""
    proc = run_suite(tmp_path, '''
        def test_observed(neuraldbg):
            train(lr_after=2.0, steps=30)

        def test_later():
            from torch.nn.modules import module
            assert not module._global_forward_hooks
            assert not module._global_forward_pre_hooks
            train(lr_after=2.0, steps=30)
    ''')
    assert "PASSED test_training.py::test_later" in proc.stdout, proc.stdout
    assert "FAILED test_training.py::test_observed" in proc.stdout


def test_a_test_whose_monitoring_was_switched_off_passes_with_a_warning_saying_so(tmp_path):
    """A fault in neuraldbg never fails the user's test; the pass then speaks of the steps
    before it only, and the warnings summary says from which step."""
    proc = run_suite(tmp_path, '''
        def test_trains(neuraldbg, monkeypatch):
            import neuraldbg_cli.observe.judge as judge

            def faulty(*args, **kwargs):
                raise RuntimeError("reduction fault")

            monkeypatch.setattr(judge, "collect", faulty)
            train(lr_after=0.01)
            assert neuraldbg.unobserved_from == (0, "RuntimeError: reduction fault")
    ''')
    assert proc.returncode == 0, proc.stdout
    assert "1 passed" in proc.stdout, proc.stdout
    assert ("MonitoringOffWarning: neuraldbg: not observed from step 0 on: monitoring was "
            "switched off (RuntimeError: reduction fault)") in proc.stdout, proc.stdout
