"""A Linear's or a conv's input is read for dead units (a functional ReLU's) only where no
layer judged them already: not after a ReLU module, pooled and reshaped, nor a ResNet block's
input read again after its downsample, nor attention's joined heads, which mix features. A
functional ReLU's dead units are still found at the next layer, through a pool module or a
reshape, and an output changed in place after its layer is read again."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conftest import train
from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.observe.accumulator import Accumulator

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def reads(monkeypatch) -> list:
    """The shapes of the inputs read for dead units, in call order."""
    seen = []
    add_input = Accumulator.add_input
    monkeypatch.setattr(Accumulator, "add_input",
                        lambda acc, x: seen.append(tuple(x.shape)) or add_input(acc, x))
    return seen


def monitored(tmp_path, net, x, y, steps=3):
    with NeuralDbg(net, trace=str(tmp_path / "t.jsonl")) as dbg:
        train(net, x, y, steps)
    return dbg


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(8, 24), nn.Linear(8, 6)
        self.fc, self.out = nn.Linear(6, 12), nn.Linear(12, 1)

    def forward(self, x):
        q, k, v = (z.view(4, 5, 2, 4).transpose(1, 2) for z in self.qkv(x).split(8, dim=2))
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(4, 5, 8)
        hand = (q @ k.transpose(-1, -2)).softmax(-1) @ v    # attention written out
        y = self.proj(y) + self.proj(hand.transpose(1, 2).reshape(4, 5, 8))
        return self.out(F.relu(self.fc(y))).mean(1)


def test_attention_heads_are_not_read_but_a_sum_and_a_functional_relu_are(tmp_path, reads):
    torch.manual_seed(0)
    monitored(tmp_path, Attention(), torch.randn(4, 5, 8), torch.randn(4, 1))
    assert reads == [(4, 5, 6), (4, 5, 12)] * 3, "fc's input (a sum) and out's (F.relu); never proj's"


def test_a_relu_modules_map_pooled_and_flattened_is_not_read_again(tmp_path, reads):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 1))
    monitored(tmp_path, net, torch.randn(4, 3, 8, 8), torch.randn(4, 1))
    assert reads == []


class Block(nn.Module):
    """torchvision's BasicBlock with a downsample: the block's input goes to the downsample
    first, then to conv1, after two other layers ran."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(4, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = nn.Sequential(nn.Conv2d(4, 8, 1, 2, bias=False), nn.BatchNorm2d(8))

    def forward(self, x):
        identity = self.downsample(x)
        out = self.bn1(self.conv1(x))
        out += identity
        return self.relu(out)


def test_a_blocks_input_read_again_after_its_downsample_is_not_read(tmp_path, reads):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), Block(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 1))
    monitored(tmp_path, net, torch.randn(4, 3, 8, 8), torch.randn(4, 1))
    assert reads == []


class FunctionalPooled(nn.Module):
    """F.relu, then a MaxPool2d module, then a conv: only the conv's input shows the ReLU's
    channels; and LeNet's F.relu(...).view(-1, n) into a Linear."""

    def __init__(self):
        super().__init__()
        self.conv1, self.pool = nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(2)
        self.conv2, self.fc = nn.Conv2d(8, 4, 3, padding=1), nn.Linear(4 * 4 * 4, 1)
        with torch.no_grad():
            self.conv1.bias.fill_(-1e3)     # every channel dead from the start

    def forward(self, x):
        return self.fc(F.relu(self.conv2(self.pool(F.relu(self.conv1(x))))).view(-1, 4 * 4 * 4))


def test_a_functional_relus_dead_channels_are_read_through_a_pool_module(tmp_path, reads):
    torch.manual_seed(0)
    dbg = monitored(tmp_path, FunctionalPooled(), torch.randn(4, 3, 8, 8), torch.randn(4, 1))
    assert reads == [(4, 8, 4, 4), (4, 64)] * 3
    dead = [(e["layer"], e["step"], e["stats"].get("observed"), e["stats"].get("input_dead_ratio"))
            for e in dbg.failures(("dead",))]
    assert dead[0] == ("conv2", 0, "input", 1.0)


class MaskedAfter(nn.Module):
    """A layer's output masked in place before the next layer: what that layer is fed is not
    what the first one was judged on."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 16), nn.Linear(16, 1)

    def forward(self, x):
        h = self.fc1(x)
        h[:, :15] = 0   # 15 of its 16 units
        return self.fc2(h)


def test_an_output_changed_in_place_after_its_layer_is_read(tmp_path, reads):
    torch.manual_seed(0)
    dbg = monitored(tmp_path, MaskedAfter(), torch.randn(8, 6), torch.randn(8, 1))
    assert reads == [(8, 16)] * 3
    assert [(e["layer"], e["stats"].get("observed")) for e in dbg.failures(("dead",))] == [("fc2", "input")]
