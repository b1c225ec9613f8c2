"""Dead channels of conv maps, read as per-channel norms in one pass (accumulator.py): a
ReLU module's, and a functional ReLU's seen at the next conv's input, flagged at their
layer from the step their channels died; the same nets left alone stay clean."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conftest import FAILURE_STATES, describe, observed, train, transitions

pytestmark = pytest.mark.usefixtures("one_thread")

KILL_AT = 12        # the step at which the first conv's channels are pushed below zero


class FunctionalNet(nn.Module):
    """conv - F.relu - conv: the ReLU is seen only as the second conv's input."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        y = self.conv2(F.relu(self.conv1(x)))
        return self.head(y.mean((2, 3)))


def module_net():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 1))


def run(tmp_path, model, first_conv, kill: bool) -> list:
    torch.manual_seed(0)
    x, y = torch.randn(16, 3, 16, 16), torch.randn(16, 1)   # maps of 16x8x16x16: reduced at once

    def before_step(step):
        if kill and step == KILL_AT:
            with torch.no_grad():
                first_conv.bias.fill_(-1e3)     # every channel negative: the ReLU outputs 0

    return observed(tmp_path, model, lambda: train(model, x, y, 30, lr=0.01,
                                                   before_step=before_step))


@pytest.mark.parametrize("make, layer, observed_as", [
    (module_net, "1", None), (FunctionalNet, "conv2", "input")])
def test_dead_conv_channels_are_flagged_at_their_layer_and_step(tmp_path, make, layer,
                                                                 observed_as):
    torch.manual_seed(0)
    model = make()
    first = model[0] if isinstance(model, nn.Sequential) else model.conv1
    events = run(tmp_path, model, first, kill=True)
    dead = transitions(events, signal="activation", to="dead")
    assert dead, describe(events)
    assert dead[0]["layer"] == layer and dead[0]["step"] == KILL_AT, describe(events)
    assert dead[0]["stats"].get("input_dead_ratio" if observed_as else "dead_ratio") == 1.0
    torch.manual_seed(0)
    model = make()
    first = model[0] if isinstance(model, nn.Sequential) else model.conv1
    (tmp_path / "clean").mkdir()
    clean = run(tmp_path / "clean", model, first, kill=False)
    assert not [t for t in transitions(clean) if t["to"] in FAILURE_STATES], describe(clean)


class Chomp1d(nn.Module):
    """locuslab/TCN's crop of the time axis after a causal Conv1d's padding."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def forward(self, x):
        return x[:, :, :-self.size].contiguous()


class Conv1dNet(nn.Module):
    """Conv1d - nn.ReLU over (B, C, T), summed over time: the ReLU module's units are the
    conv's 16 channels, not its T time positions; so too with a Dropout or a TCN's crop
    between them."""

    def __init__(self, bias: bool, between: str | None = None):
        super().__init__()
        self.conv = nn.Conv1d(4, 16, 3, padding=2 if between == "chomp" else 1, bias=bias)
        self.between = nn.Dropout(0.1) if between == "dropout" else \
            Chomp1d(2) if between == "chomp" else None
        self.act = nn.ReLU()
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        y = self.conv(x)
        return self.head(self.act(y if self.between is None else self.between(y)).sum(-1))


# 8x16x100 outputs are held for the step end, 8x16x200 reduced at once (accumulator.py)
@pytest.mark.parametrize("length, between", [(100, None), (200, None), (200, "dropout"),
                                             (200, "chomp")])
def test_a_relu_after_conv1d_over_padded_sequences_is_alive(tmp_path, length, between):
    torch.manual_seed(0)
    padded = torch.zeros(8, 4, length)
    padded[:, :, :8] = torch.randn(8, 4, 8)     # a short signal, then zero padding: >90% of
    model = Conv1dNet(False, between)           # the time positions stay zero, no channel does
    events = observed(tmp_path, model, lambda: train(model, padded, torch.randn(8, 1), 20))
    assert not transitions(events, layer="act", to="dead"), describe(events)


@pytest.mark.parametrize("length, between", [(100, None), (200, None), (200, "dropout"),
                                             (100, "chomp")])
def test_a_relu_after_conv1d_with_dead_channels_is_dead(tmp_path, length, between):
    torch.manual_seed(0)
    model = Conv1dNet(True, between)
    with torch.no_grad():
        model.conv.bias[1:] = -100.0            # 15 of 16 channels never fire, at any position
    x = torch.randn(8, 4, length) / 4
    events = observed(tmp_path, model, lambda: train(model, x, torch.randn(8, 1), 20))
    dead = transitions(events, layer="act", to="dead")
    assert dead and dead[0]["step"] == 0, describe(events)
    assert dead[0]["stats"]["units"] == 16, dead[0]
    assert dead[0]["stats"]["dead_ratio"] == pytest.approx(15 / 16, abs=1e-3)


def test_a_relu_after_a_linear_over_sequences_still_counts_features(tmp_path):
    """Linear on (B, T, F) - nn.ReLU: the units stay the last dimension, the features."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    with torch.no_grad():
        model[0].bias[1:] = -100.0              # 15 of 16 features never fire
    events = observed(tmp_path, model, lambda: train(model, torch.randn(8, 50, 4) / 4,
                                                     torch.randn(8, 50, 1), 20))
    dead = transitions(events, layer="1", to="dead")
    assert dead and dead[0]["stats"]["units"] == 16, describe(events)
    assert dead[0]["stats"]["dead_ratio"] == pytest.approx(15 / 16, abs=1e-3)
