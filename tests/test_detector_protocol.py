"""A detector is one file: a toy one, defined in tests/toy_detector.py alone, produces
transitions in a real monitored run; the built-in ones run on the same protocol."""
import importlib
import sys

import pytest
import torch
from torch import nn

from neuraldbg_cli import NeuralDbg, states
from neuraldbg_cli.observe import detectors
from neuraldbg_cli.observe.detectors.activation import ActivationDetector
from neuraldbg_cli.observe.detectors.gradient import GradientDetector
from neuraldbg_cli.thresholds import Thresholds

BUILT_IN = {"activation", "gradient", "update", "loss", "loop", "output"}   # of a plain run


@pytest.fixture
def toy():
    module = importlib.import_module("toy_detector")     # (tests/ is on sys.path)
    try:
        yield module
    finally:    # the registries are global: leave them as the other tests expect
        detectors.unregister(module.LoudLinear)
        states.SIGNALS.pop("toy", None)
        sys.modules.pop("toy_detector", None)


def train(model, steps, scale_at=None):
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for step in range(steps):
        if step == scale_at:
            with torch.no_grad():
                model[0].weight.mul_(50.0)      # the first layer gets loud from here on
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_a_detector_in_one_file_writes_transitions(toy, tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    with NeuralDbg(model, trace=str(tmp_path / "t.jsonl"), fail_on="loud") as dbg:
        train(model, 8, scale_at=4)
    assert dbg.failed                   # the new state gates like any other
    toy_events = [(t["layer"], t["step"], t["from"], t["to"]) for t in dbg.transitions
                  if t["signal"] == "toy"]
    # loud from the step the first layer's weights grew, and the layer after it with it
    assert toy_events == [("0", 0, None, "quiet"), ("2", 0, None, "quiet"),
                          ("0", 4, "quiet", "loud"), ("2", 4, "quiet", "loud")], toy_events
    loud = [t for t in dbg.transitions if t["to"] == "loud"]
    assert all(t["stats"]["limit"] == toy.LIMIT and t["stats"]["rms"] > toy.LIMIT for t in loud)
    assert dbg.failures(["loud"]) == loud and states.lookup("toy", "loud").failure
    # the built-in detectors still see the same run
    assert {t["signal"] for t in dbg.transitions} == {*BUILT_IN, "toy"}


def test_a_detector_in_one_file_can_be_chosen_alone(toy, tmp_path):
    """`detectors=` (`run --detectors`) knows a signal registered by a detector's own file."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    with NeuralDbg(model, trace=str(tmp_path / "t.jsonl"), detectors="toy") as dbg:
        train(model, 8, scale_at=4)
    assert {t["signal"] for t in dbg.transitions} == {"toy"}
    assert [t["layer"] for t in dbg.failures()] == ["0", "2"]


def test_without_the_toy_no_toy_signal(tmp_path):
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    with NeuralDbg(model, trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, 3)
    assert {t["signal"] for t in dbg.transitions} == BUILT_IN


def test_the_built_in_detectors_are_registered_in_order():
    built = detectors.build(Thresholds())
    assert [type(d) for d in built][:2] == [ActivationDetector, GradientDetector]
    assert [d.signal for d in built][:2] == [states.ACTIVATION, states.GRADIENT]


def test_a_faulty_detector_is_switched_off_alone(toy, tmp_path, capsys, monkeypatch):
    def broken(self, x, history):
        raise ValueError("toy fault")

    monkeypatch.setattr(toy.LoudLinear, "judge", broken)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    with NeuralDbg(model, trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, 4)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "toy detector switched off" in err[0] and "toy fault" in err[0], err
    assert dbg.steps == 4
    assert {t["signal"] for t in dbg.transitions} == BUILT_IN
