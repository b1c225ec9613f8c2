"""BatchNorm at momentum 0 whose running statistics are still their initial 0 and 1 (Cadene's
Inception-v4, trained on new data): `stale` on each such layer from its first training call,
told as one story with cause `architecture`; at momentum 0 with statistics of its own (a
fine-tune that keeps pretrained ones), at the default momentum, in eval() mode (a frozen
BatchNorm) and at momentum None, nothing."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conftest import describe, failures, observed, transitions
from neuraldbg_cli.explain.analysis import analyze
from neuraldbg_cli.trace import read_trace

pytestmark = pytest.mark.usefixtures("one_thread")


def model(momentum, *, pretrained=False):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8, momentum=momentum),
                      nn.ReLU(), nn.Conv2d(8, 8, 3, bias=False),
                      nn.BatchNorm2d(8, momentum=momentum), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    if pretrained:      # statistics of data seen before (ImageNet's, for a fine-tune)
        for bn in (m[1], m[4]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
    return m


def train(m, steps=12, frozen_bn=False):
    g = torch.Generator().manual_seed(1)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)

    def run():
        for _ in range(steps):
            m.train()
            if frozen_bn:
                for bn in (m[1], m[4]):
                    bn.eval()
            x, y = torch.randn(16, 3, 12, 12, generator=g), torch.randint(0, 4, (16,), generator=g)
            loss = F.cross_entropy(m(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return run


def test_momentum_0_from_scratch_is_stale_in_each_batchnorm_as_one_story(tmp_path):
    m = model(0.0)
    events = observed(tmp_path, m, train(m))
    stale = transitions(events, signal="norm", to="stale")
    assert [(t["layer"], t["step"]) for t in stale] == [("1", 0), ("4", 0)], describe(events)
    assert stale[0]["stats"]["momentum"] == 0
    assert {t["to"] for t in failures(events)} == {"stale"}, describe(events)
    analysis = analyze([read_trace(tmp_path / "t.jsonl")])
    top = analysis.hypotheses[0]
    assert (top.layer, top.cause) == ("1", "architecture")
    assert "momentum" in top.fix
    # the second BatchNorm is the same setting, an echo of the first, not a story of its own
    assert [h.layer for h in analysis.hypotheses if h.origin is None
            and h.signal == "norm"] == ["1"]


@pytest.mark.parametrize("case", ["momentum 0, pretrained statistics", "default momentum",
                                  "momentum None", "frozen in eval()"])
def test_batchnorm_that_keeps_statistics_of_the_data_is_not_stale(tmp_path, case):
    m = {"momentum 0, pretrained statistics": lambda: model(0.0, pretrained=True),
         "default momentum": lambda: model(0.1), "momentum None": lambda: model(None),
         "frozen in eval()": lambda: model(0.0)}[case]()
    events = observed(tmp_path, m, train(m, frozen_bn=case == "frozen in eval()"))
    assert not transitions(events, to="stale"), describe(events)
