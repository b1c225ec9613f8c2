"""Residual health (the `residual` signal): a stream growing geometrically along the blocks
(`exploding`, named at its first block), a branch adding nothing (`collapsed`); and healthy
residual nets (ResNet with BatchNorm, pre-norm transformers, zero-init) that stay clean."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from blocks import BasicBlock, PreNormBlock
from conftest import (
    FAILURE_STATES,
    MAX_CHANGES,
    SAMPLES,
    describe,
    most_changes,
    observed,
    run_neuraldbg,
    transitions,
)
from neuraldbg_cli.explain.analysis import analyze
from neuraldbg_cli.observe.detectors.base import Observation
from neuraldbg_cli.observe.detectors.residual import ResidualDetector
from neuraldbg_cli.observe.residual import is_sum_of
from neuraldbg_cli.thresholds import Thresholds
from neuraldbg_cli.trace import read_trace
from tracemaker import TraceMaker

pytestmark = pytest.mark.usefixtures("one_thread")


def assert_clean(events, blocks=()):
    """No layer left good health; the `blocks` (and only they) were watched as residual."""
    assert not [t for t in transitions(events) if t["to"] in FAILURE_STATES], describe(events)
    watched = {t["layer"] for t in transitions(events, signal="residual")}
    assert watched == set(blocks), (sorted(watched), describe(events))


def regress(model, steps, opt, x_of, lr_loss=F.mse_loss):
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = x_of(g)
        loss = lr_loss(model(x), x[..., :1].sin())
        opt.zero_grad()
        loss.backward()
        opt.step()


# ---- the judge alone ----------------------------------------------------------------------------
def _facts(branch=0.5, growth=1.7, run=None, rms_in=1.0, nonfinite=False, branch_growth=1.7):
    f = {"branch_ratio": branch, "growth": growth, "rms_in": rms_in, "rms_out": rms_in * growth}
    if run is not None:
        f.update(run_blocks=run, run_index=0, run_growth=growth, run_rms_from=1.0,
                 run_rms_to=growth ** run, run_nonfinite=nonfinite, run_branch_growth=branch_growth)
    return Observation("block", facts=f)


def test_judge_exploding_on_a_run_and_collapsed_after_warm_up_and_window():
    th = Thresholds()
    d = ResidualDetector(th)
    h = d.history()
    assert d.judge(_facts(run=th.residual.blocks - 1), h)[0] == "normal"
    assert d.judge(_facts(run=th.residual.blocks), h) == ("exploding", {})
    assert d.judge(_facts(run=40, nonfinite=True), h) == ("exploding", {"urgent": True})
    # a stream growing along a run whose branches stay the same size: normalised branches
    assert d.judge(_facts(run=40, branch_growth=1.1), h)[0] == "normal"
    for _ in range(th.residual.warmup):             # a zero-init branch: 0 through the warm-up
        assert d.judge(_facts(branch=0.0), h)[0] == "normal"
        d.remember(_facts(branch=0.0), h)
    assert d.judge(_facts(branch=0.0), h)[0] == "collapsed"
    assert d.judge(_facts(branch=1e-3), h)[0] == "normal"
    d.remember(_facts(branch=1e-3), h)      # one step of contribution restarts the window
    for _ in range(th.residual.window - 2):
        d.remember(_facts(branch=0.0), h)
    assert d.judge(_facts(branch=0.0), h)[0] == "normal"
    d.remember(_facts(branch=0.0), h)
    assert d.judge(_facts(branch=0.0), h)[0] == "collapsed"
    d.remember(_facts(branch=0.0), h)
    # a stream already broken before the block keeps the block's last verdict
    assert d.judge(_facts(rms_in=math.nan), h)[0] == "collapsed"


def test_a_block_is_a_sum_with_its_input_on_the_graph():
    x = torch.randn(4, 8, requires_grad=True)
    lin = nn.Linear(8, 8)
    h = x * 1.0
    assert is_sum_of(h + lin(h), h)
    assert is_sum_of(F.relu(lin(h) + h), h)                     # torchvision's BasicBlock
    y = h + lin(h)
    assert is_sum_of(y + lin(y), h)                             # a pre-norm block: two sums
    assert is_sum_of(x + lin(x), x)                             # a leaf input
    assert not is_sum_of(lin(F.relu(lin(h))), h)                # Linear-ReLU-Linear
    assert not is_sum_of(h + lin(x), h.detach())
    assert not is_sum_of(h, h)


# ---- the 40-block case -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deep_residual")
    proc, events = run_neuraldbg(tmp, SAMPLES / "deep_residual.py", "--steps", "20",
                                 options=("--fail-on", "exploding"))
    return proc, events, analyze([read_trace(str(tmp / "trace.jsonl"))])


def test_deep_residual_stream_flagged_from_the_first_block_at_step_0(deep):
    proc, events, _ = deep
    assert proc.returncode == 3, proc.stderr[-2000:]
    first = transitions(events, layer="blocks.0", signal="residual")[0]
    assert (first["step"], first["from"], first["to"]) == (0, None, "exploding"), describe(events)
    s = first["stats"]
    assert s["run_index"] == 0 and s["run_blocks"] >= 30 and 1.4 < s["run_growth"] < 2.2, s
    assert s["run_rms_to"] / s["run_rms_from"] > 1e6, s
    # every block of the run, none of the layers inside the blocks, is a residual block
    blocks = {t["layer"] for t in transitions(events, signal="residual")}
    assert blocks == {f"blocks.{k}" for k in range(40)}, sorted(blocks)
    assert most_changes(events)[0] <= MAX_CHANGES, most_changes(events)


def test_explain_names_the_first_block_not_the_output_layer(deep):
    _, events, analysis = deep
    top = analysis.hypotheses[0]
    assert (top.layer, top.symptom, top.step, top.cause) == \
        ("blocks.0", "exploding", 0, "initialization"), (top.summary, top.evidence)
    assert top.origin is None and top.confidence >= 0.5
    assert any("per block from blocks.0" in line and "over 40 blocks" in line
               for line in top.evidence), top.evidence
    # the gradients that blow up (the output layer's first among them) are its consequences
    head = [h for h in analysis.hypotheses if h.layer == "head" and h.signal == "gradient"]
    assert head and all(h.origin is top for h in head), [(h.layer, h.summary) for h in head]
    others = [h for h in analysis.hypotheses if h.origin is None and h is not top]
    assert all(h.confidence < top.confidence for h in others), [h.summary for h in others]


def test_the_zero_init_twin_stays_clean(tmp_path):
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "deep_residual.py", "--fixed",
                                 options=("--fail-on", "none"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_clean(events, blocks=[f"blocks.{k}" for k in range(40)])
    assert most_changes(events)[0] <= MAX_CHANGES, most_changes(events)


# ---- healthy residual nets --------------------------------------------------------------------


class ResNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU(inplace=True))
        self.layer1 = nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 16), BasicBlock(16, 16))
        self.layer2 = nn.Sequential(BasicBlock(16, 32, 2), BasicBlock(32, 32), BasicBlock(32, 32))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.layer2(self.layer1(self.stem(x))).mean((2, 3)))


def test_resnet_with_batchnorm_stays_clean(tmp_path):
    torch.manual_seed(0)
    model = ResNet()
    g = torch.Generator().manual_seed(0)

    def training():
        opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
        for _ in range(30):
            y = torch.randint(0, 4, (16,), generator=g)
            x = torch.randn(16, 3, 12, 12, generator=g) + y.view(-1, 1, 1, 1) * 0.3
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    # (layer2.0 changes shape: no block; the stages hold blocks: not blocks themselves)
    assert_clean(observed(tmp_path, model, training),
                 ["layer1.0", "layer1.1", "layer1.2", "layer2.1", "layer2.2"])


class TinyLM(nn.Module):
    """GPT-style: small embeddings (std 0.02), so the first block's branch is many times its
    input, as in GPT-2 at init: additive growth, not an explosion."""

    def __init__(self, layer, depth=6, vocab=50, d=32, context=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)
        self.blocks = nn.Sequential(*[layer() for _ in range(depth)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
            x = x[0] if isinstance(x, tuple) else x
        return self.head(self.ln(x))


class TupleBlock(PreNormBlock):
    """As Hugging Face's blocks: (hidden states, cache)."""

    def forward(self, x):
        return super().forward(x), None


def _language(model, steps=40):
    g = torch.Generator().manual_seed(0)
    text = torch.randint(0, 50, (4000,), generator=g).remainder(7)

    def training():
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for _ in range(steps):
            at = torch.randint(0, len(text) - 17, (8,), generator=g)
            seq = torch.stack([text[i:i + 17] for i in at.tolist()])
            loss = F.cross_entropy(model(seq[:, :-1]).reshape(-1, 50), seq[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return training


@pytest.mark.parametrize("which", ["hand_written", "tuple_out", "torch_encoder_layer"])
def test_pre_norm_transformers_stay_clean(tmp_path, which):
    torch.manual_seed(0)
    layer = {"hand_written": PreNormBlock, "tuple_out": TupleBlock}.get(which) or (
        lambda: nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                           norm_first=True))
    model = TinyLM(layer)
    assert_clean(observed(tmp_path, model, _language(model)), [f"blocks.{k}" for k in range(6)])


class ZeroInitBlock(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        nn.init.zeros_(self.f[2].weight)
        nn.init.zeros_(self.f[2].bias)

    def forward(self, x):
        return x + self.f(x)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_zero_init_residual_net_stays_clean_for_200_steps(tmp_path, optimizer):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), *[ZeroInitBlock() for _ in range(8)], nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01) if optimizer == "sgd" \
        else torch.optim.Adam(model.parameters(), lr=1e-3)
    events = observed(tmp_path, model, lambda: regress(
        model, 200, opt, lambda g: torch.randn(128, 8, generator=g)))
    assert_clean(events, [str(k) for k in range(1, 9)])


class BiasedBlock(nn.Module):
    """A branch that adds something where its input is 0 (Fixup's scalar biases)."""

    def __init__(self):
        super().__init__()
        self.f = nn.Linear(32, 32)

    def forward(self, x):
        return x + self.f(F.relu(x) + 1.0)


def test_blocks_fed_a_stream_of_zeros_keep_monitoring_on(tmp_path):
    """A zero-initialised input projection (or a Fixup ResNet-110 whose ReLUs died) feeds the
    first block a stream of exactly 0: its growth is unbounded, and the run of growing
    blocks it started divided by the zero it grew from, switching monitoring off
    (ZeroDivisionError). Growth from nothing is no multiplication: no run, no `exploding`."""
    torch.manual_seed(0)
    proj = nn.Linear(8, 32)
    nn.init.zeros_(proj.weight)
    nn.init.zeros_(proj.bias)
    model = nn.Sequential(proj, *[BiasedBlock() for _ in range(5)], nn.Linear(32, 1))
    events = observed(tmp_path, model, lambda: regress(
        model, 5, torch.optim.Adam(model.parameters(), lr=1e-3),
        lambda g: torch.randn(32, 8, generator=g)))
    assert not [e for e in events if e["event"] == "warning" and "switched off" in e["message"]]
    assert_clean(events, [str(k) for k in range(1, 6)])


def test_a_sequential_of_equal_shapes_is_not_a_block(tmp_path):
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
    model = nn.Sequential(inner, nn.ReLU(), nn.Linear(16, 1))
    events = observed(tmp_path, model, lambda: regress(
        model, 30, torch.optim.SGD(model.parameters(), lr=0.01),
        lambda g: torch.randn(32, 16, generator=g)))
    assert_clean(events, [])


# ---- collapse -----------------------------------------------------------------------------------
def test_a_branch_that_never_learns_collapses(tmp_path):
    """Zero-initialised branches whose layers are in no optimizer: each block stays the
    identity, so the residual path does nothing."""
    torch.manual_seed(0)
    blocks = [ZeroInitBlock() for _ in range(2)]
    model = nn.Sequential(nn.Linear(8, 32), *blocks, nn.Linear(32, 1))
    opt = torch.optim.Adam([*model[0].parameters(), *model[3].parameters()], lr=1e-3)
    th = Thresholds().residual
    events = observed(tmp_path, model, lambda: regress(
        model, th.warmup + th.window + 5, opt, lambda g: torch.randn(32, 8, generator=g)))
    for name in ("1", "2"):
        seen = transitions(events, layer=name, signal="residual", to="collapsed")
        assert seen and seen[0]["step"] == th.warmup, describe(events)
        assert seen[0]["stats"]["branch_ratio"] == 0.0
    # explain: the branch's layers in no optimizer are the origin, the skipped block follows
    hyps = analyze([read_trace(str(tmp_path / "t.jsonl"))]).hypotheses
    for name in ("1", "2"):
        block = next(h for h in hyps if h.layer == name and h.signal == "residual")
        assert block.origin is not None and block.origin.layer.startswith(name + ".f."), \
            (block.summary, block.origin)
        assert block.origin.cause == "training_loop" and block.origin.symptom == "frozen"


def _collapsing(tmp_path, before=None):
    """A hand-made trace: block "blocks.1" (its branch blocks.1.f.0, .1, .2) collapses at step
    200; `before(maker)` adds what happened first."""
    layers = [("stem", "Linear", "param"), ("blocks.1", "Block", "other"),
              ("blocks.1.f.0", "Linear", "param"), ("blocks.1.f.1", "ReLU", "relu"),
              ("blocks.1.f.2", "Linear", "param"), ("head", "Linear", "param")]
    maker = TraceMaker(layers)
    maker.tr(0, "blocks.1", "normal", signal="residual")
    if before is not None:
        before(maker)
    maker.tr(200, "blocks.1", "collapsed", signal="residual", branch_ratio=0.0, rms_in=1.0,
             rms_out=1.0, growth=1.0)
    maker.end(260)
    return analyze([read_trace(maker.write(tmp_path / "t.jsonl"))]).hypotheses


def test_a_dead_relu_inside_the_branch_is_the_origin_of_its_collapse(tmp_path):
    hyps = _collapsing(tmp_path, lambda m: m.tr(120, "blocks.1.f.1", "dead", dead_ratio=1.0))
    block = next(h for h in hyps if h.layer == "blocks.1")
    assert block.origin is not None and block.origin.layer == "blocks.1.f.1", block.summary
    assert "inside blocks.1's branch, is dead" in block.evidence[0], block.evidence


def test_a_dead_relu_outside_the_block_or_recovered_does_not_explain_it(tmp_path):
    def before(m):
        m.tr(120, "head", "dead", dead_ratio=1.0)          # (not inside the block)
        m.tr(30, "blocks.1.f.1", "dead", dead_ratio=1.0)
        m.tr(60, "blocks.1.f.1", "normal")                  # (recovered long before)
    hyps = _collapsing(tmp_path, before)
    block = next(h for h in hyps if h.layer == "blocks.1")
    assert block.origin is None and block.cause == "architecture", (block.summary, block.origin)
    assert any("adds 0 x its input" in line for line in block.evidence), block.evidence


def test_a_chain_of_blocks_takes_each_stream_norm_once_and_gets_the_same_numbers():
    """The stream entering a block is the one the block before left: its norm is taken
    once, and each block's three sums of squares are still those of its own tensors; not
    where the stream was changed in place in between."""
    from neuraldbg_cli.observe.residual import Block

    torch.manual_seed(0)
    x0 = torch.randn(4, 8)
    x1 = x0 + torch.randn(4, 8)
    x2 = x1 + 2 * torch.randn(4, 8)
    a, b = Block(nn.Identity(), [], 3, 2.0), Block(nn.Identity(), [], 3, 2.0)
    a.add(x0, x1, None)
    b.add(x1, x2, (a, x1))
    for block, (x, y) in ((a, (x0, x1)), (b, (x1, x2))):
        got = [float(v) for v in block.take()[0]]
        want = [float((y - x).norm()) ** 2, float(x.norm()) ** 2, float(x.norm()) ** 2,
                float(y.norm()) ** 2]
        assert got == pytest.approx(want, rel=1e-5)
    a.add(x0, x1, None)
    x1.mul_(3)                  # changed in place after block a saw it
    b.add(x1, x2, (a, x1))
    assert float(b.take()[0][2]) == pytest.approx(float(x1.norm()) ** 2, rel=1e-5)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_a_large_blocks_branch_is_read_on_rows_that_cover_the_map_within_the_window(layout):
    """Past SAMPLE values, the branch is read on every k-th row (k at most the window), the
    rows moving by one a call: the stream's norms stay those of the whole tensors (a NaN
    anywhere shows), and a branch adding something on a single row is seen within the
    window's calls, which a collapse verdict needs all of."""
    from neuraldbg_cli.observe.residual import SAMPLE, Block

    window = Thresholds().residual.window
    torch.manual_seed(0)
    x = torch.randn(8, 16, 64, 64)          # 524288 values: 2 x SAMPLE
    assert x.numel() > SAMPLE
    branch = torch.zeros_like(x)
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    if layout == "channels_last":
        branch[3, :, 7, 9] = 1.0            # one row in memory: one pixel's channels
    else:
        branch[3, 5, 7, :] = 1.0            # one row of one channel of one sample
    x, branch = x.to(memory_format=fmt), branch.to(memory_format=fmt)
    y = x + branch
    block = Block(nn.Identity(), [], 3, 2.0, cover=window)
    seen = []
    for _ in range(window):
        block.add(x, y, None)
        (d2, s2, i2, o2), numel, sampled = block.take()
        assert numel == x.numel() and x.numel() // window <= sampled < x.numel()
        assert float(i2) == pytest.approx(float(x.norm()) ** 2, rel=1e-5)
        assert float(o2) == pytest.approx(float(y.norm()) ** 2, rel=1e-5)
        seen.append(float(d2))
    assert 0 < sum(v > 0 for v in seen) < window, seen
    y[0, 0, 0, 0] = float("nan")            # (rows read or not, the output's norm shows it)
    for _ in range(window):
        block.add(x, y, None)
        assert math.isnan(float(block.take()[0][3]))


def test_a_sampled_branch_ratio_estimates_the_whole_ones():
    from neuraldbg_cli.observe.residual import Block, residual_facts

    torch.manual_seed(0)
    x = torch.randn(64, 64, 128)
    y = x + 0.01 * torch.randn_like(x)
    block = Block(nn.Identity(), [], 3, 2.0, cover=20)
    block.add(x, y, None)
    four, numel, sampled = block.take()
    assert sampled < numel
    (_, facts), = residual_facts([(block, numel, sampled)], [float(v) for v in four], 1.25)
    assert facts["branch_ratio"] == pytest.approx(0.01, rel=0.05)
    assert facts["rms_in"] == pytest.approx(float(x.pow(2).mean().sqrt()), rel=1e-5)
    assert facts["growth"] == pytest.approx(float(y.norm() / x.norm()), rel=1e-5)
