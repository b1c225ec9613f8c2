"""A large BatchNorm output's norm taken from its statistics instead of a pass over it
(observe/norms.py): the same number as the read, the same verdicts, and the output read
again wherever the statistics cannot stand for it."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conftest import describe, observed, transitions
from neuraldbg_cli.observe import accumulator
from neuraldbg_cli.observe.norms import KNOWN_MIN, output_norm


@pytest.fixture
def known(monkeypatch):
    """[(norm from statistics, norm of the output read)] for each output whose norm was
    known without a read, in call order."""
    seen = []
    add = accumulator.Accumulator.add_output

    def spy(self, y, defer=False, known=None):
        if known is not None:
            seen.append((float(known), float(y.detach().double().norm())))
        return add(self, y, defer, known)
    monkeypatch.setattr(accumulator.Accumulator, "add_output", spy)
    return seen


def conv_bn(bn=nn.BatchNorm2d, **kw):
    """Two conv-BatchNorm-ReLU stages on 16x32x32x32 maps (above KNOWN_MIN values), the second
    BatchNorm without affine parameters."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), bn(32, **kw), nn.ReLU(),
                          nn.Conv2d(32, 32, 3, padding=1), bn(32, affine=False, **kw), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))
    assert 16 * 32 * 32 * 32 >= KNOWN_MIN
    return model


def train(model, steps, *, nan_at=None, drop_bad=False):
    """Cross-entropy on noise; a NaN pixel in the batch of step `nan_at`. drop_bad: the
    gradients of a loss that is not finite dropped before the optimizer steps, so that only
    the BatchNorms' running statistics keep the NaN."""
    g = torch.Generator().manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x = 2 * torch.randn(16, 3, 32, 32, generator=g) + 0.5
        if step == nan_at:
            x[3, 1, 4, 4] = float("nan")
        loss = F.cross_entropy(model(x), torch.randint(0, 4, (16,), generator=g))
        opt.zero_grad()
        loss.backward()
        if drop_bad and not math.isfinite(loss.item()):
            opt.zero_grad()
        opt.step()


@pytest.mark.parametrize("momentum", [0.1, 0.01])
def test_the_norm_from_statistics_is_the_read_norm(tmp_path, known, momentum):
    model = conv_bn(momentum=momentum)
    events = observed(tmp_path, model, lambda: train(model, 8))
    # every call from the second step on (the first trusts no statistics yet): 2 a step
    assert len(known) == 2 * 7
    for mine, read in known:
        assert mine == pytest.approx(read, rel=1e-4)
    assert not [t for t in transitions(events, signal="activation")
                if t["to"] != "normal"], describe(events)


def test_float64_and_a_constant_channel():
    bn = nn.BatchNorm1d(3, momentum=0.1).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([0.5, 2.0, 1.0], dtype=torch.float64))
        bn.bias.copy_(torch.tensor([0.0, 0.3, -1.0], dtype=torch.float64))
    x = torch.randn(4096, 3, dtype=torch.float64)
    x[:, 0] = 7.0                   # a constant channel: its variance is 0, its output 0
    old = bn.running_var.clone()
    y = bn(x)
    mine = output_norm(bn, old, 0.1, 4096)
    assert mine.dtype == torch.float32 and not mine.shape
    assert float(mine) == pytest.approx(float(y.detach().norm()), rel=1e-5)


def test_statistics_poisoned_by_a_nan_batch_are_not_trusted(tmp_path, known):
    """The NaN batch's step is NaN everywhere; its optimizer step skipped, the weights stay
    finite, and the next batches' outputs are finite again while the running statistics stay
    NaN: the BatchNorms are read again, and come back with every other layer."""
    model = conv_bn()
    events = observed(tmp_path, model, lambda: train(model, 10, nan_at=4, drop_bad=True))
    assert all(math.isfinite(b.running_var.sum().item()) is False
               for b in (model[1], model[4]))
    for layer in ("0", "1", "4"):
        went = [(t["step"], t["to"]) for t in transitions(events, layer=layer, signal="activation")]
        assert went[1:] == [(4, "nonfinite"), (5, "normal")], describe(events)
    # steps 1-4 from statistics (step 4's NaN, as the read would be), none after
    assert len(known) == 2 * 4 and math.isnan(known[-1][0]) and math.isnan(known[-1][1])


class BatchNormReLU(nn.BatchNorm2d):
    """A BatchNorm with its activation in its forward (as timm's BatchNormAct2d)."""

    def forward(self, x):
        return F.relu(super().forward(x))


def test_what_the_statistics_cannot_stand_for_is_read(tmp_path, known):
    for i, model in enumerate((conv_bn(BatchNormReLU), conv_bn(momentum=None))):
        (tmp_path / str(i)).mkdir()
        events = observed(tmp_path / str(i), model, lambda m=model: train(m, 5))
        assert known == [], describe(events)
    small = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 2))
    (tmp_path / "s").mkdir()
    observed(tmp_path / "s", small, lambda: [F.mse_loss(small(torch.randn(64, 8)),
                                                        torch.zeros(64, 2)).backward()
                                             for _ in range(4)])
    assert known == []
