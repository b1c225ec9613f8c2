"""Normalisation health (the `norm` signal): BatchNorm batch statistics drifting from the
running ones, norm gains collapsing; and the healthy models with normalisation that must stay
clean (a ResNet, a pre-norm transformer, evaluation passes, accumulation, momentum=None, ...)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from blocks import BasicBlock, PreNormBlock
from conftest import (
    ENV,
    FAILURE_STATES,
    MAX_CHANGES,
    SAMPLES,
    describe,
    failures,
    most_changes,
    observed,
    run_neuraldbg,
    transitions,
)
from neuraldbg_cli.observe.detectors.base import Observation
from neuraldbg_cli.observe.detectors.norm import NormDetector
from neuraldbg_cli.thresholds import Thresholds

pytestmark = pytest.mark.usefixtures("one_thread")


def assert_clean(events, *, norm_layers=()):
    """No layer left good health; the layers `norm_layers` were watched by the norm signal."""
    assert not [t for t in transitions(events) if t["to"] in FAILURE_STATES], describe(events)
    watched = {t["layer"] for t in transitions(events, signal="norm")}
    assert set(norm_layers) <= watched, describe(events)


def classify(model, make_batch, steps, opt=None, *, every=None, evaluate=None):
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x, y = make_batch()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if evaluate is not None and step % every == every - 1:
            evaluate()


def clusters(n_classes=10, features=32, batch=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    protos = 1.5 * torch.randn(n_classes, features, generator=g)

    def batch_of():
        y = torch.randint(0, n_classes, (batch,), generator=g)
        return protos[y] + torch.randn(batch, features, generator=g), y
    return batch_of


def bn_mlp(**bn):
    return nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64, **bn), nn.ReLU(),
                         nn.Linear(64, 64), nn.BatchNorm1d(64, **bn), nn.ReLU(), nn.Linear(64, 10))


# ---- the detector on hand-made numbers ---------------------------------------------------------

def _drift(v, momentum=0.1, n=64):
    return Observation("other", facts={"drift": v, "per_channel": n, "batch": n,
                                       "momentum": momentum, "calls": 1})


def judged(detector, values, **kw):
    h, out = detector.history(), []
    for v in values:
        x = _drift(v, **kw)
        out.append(detector.judge(x, h)[0])
        detector.remember(x, h)
    return out


def test_drift_judged_after_the_warm_up_on_the_recent_median():
    d = NormDetector(Thresholds())
    states = judged(d, [1.0] * 30)
    assert states[:20] == ["normal"] * 20 and states[20:] == ["drift"] * 10
    # one odd batch among fair ones is not a drift; a momentum of 0.01 waits 10x longer
    assert set(judged(d, [0.1] * 25 + [3.0] + [0.1] * 5)) == {"normal"}
    assert set(judged(d, [1.0] * 150, momentum=0.01)) == {"normal"}
    # a cumulative average (momentum None) waits the plain warm-up
    assert judged(d, [1.0] * 25, momentum=None)[-1] == "drift"


def test_drift_needs_batches_apart_from_one_another_too():
    """Batches far from the running mean but close to one another are a running average that
    lags fast-moving weights: not a drift. A trace without the jump is judged as before."""
    d = NormDetector(Thresholds())

    def run(drift, jump, steps=30):
        h, out = d.history(), []
        for _ in range(steps):
            x = Observation("other", facts={"drift": drift, "jump": jump, "per_channel": 64,
                                            "batch": 64, "momentum": 0.1, "calls": 1})
            out.append(d.judge(x, h))
            d.remember(x, h)
        return out
    assert {s for s, _ in run(0.9, 0.1)} == {"normal"}
    lagging_then_apart = run(0.9, 1.2)
    assert lagging_then_apart[-1] == ("drift", {"drift_median": 0.9, "jump_median": 1.2})
    assert judged(d, [1.0] * 30)[-1] == "drift"      # (no jump read: the drift alone)


@pytest.mark.parametrize("moved,state", [(None, "drift"), (1e-3, "drift"), (0.03, "normal")])
def test_batches_apart_while_the_weights_move_fast_are_no_drift(moved, state):
    """d2l's LeNet with BatchNorm at lr 1.0 (a correct program): the conv before the second
    BatchNorm moves 3-19% of its weights a step, so consecutive batches of 16k values a
    channel lie 0.7 running standard deviations apart, read as `drift` for 10 steps (a
    failed run). The weights, not the batches, make each step's distribution; at the usual
    pace (1e-3 a step) the same numbers are a drift."""
    d = NormDetector(Thresholds())
    h = d.history()
    for _ in range(30):
        facts = {"drift": 0.7, "jump": 0.75, "per_channel": 16384, "batch": 256,
                 "momentum": 0.1, "calls": 1, **({} if moved is None else {"moved": moved})}
        x = Observation("other", facts=facts)
        last = d.judge(x, h)[0]
        d.remember(x, h)
    assert last == state


def test_batches_of_one_sample_are_not_judged_for_drift():
    """A U-Net trained on one image a batch (milesial/Pytorch-UNet's default), pix2pix's
    BatchNorm at batch 1: each image is normalised by its own channel statistics, 0.6-0.7
    running deviations from the running mean, however well shuffled. Two samples a batch
    drifting as far still are a drift (the CNTK MNIST bug at batch 2)."""
    d = NormDetector(Thresholds())
    for batch, state in ((1, "normal"), (2, "drift")):
        h = d.history()
        for _ in range(30):
            x = Observation("other", facts={"drift": 0.68, "jump": 0.9, "per_channel": 4096,
                                            "batch": batch, "momentum": 0.1, "calls": 1})
            last = d.judge(x, h)[0]
            d.remember(x, h)
        assert last == state, batch


def test_gain_collapse_against_first_sight():
    d = NormDetector(Thresholds())
    h = d.history()
    out = []
    for g in (1.0, 0.5, 0.2, 0.09):
        x = Observation("other", facts={"gain_rms": g})
        out.append(d.judge(x, h))
        d.remember(x, h)
    assert [s for s, _ in out] == ["normal", "normal", "normal", "collapsed"]
    assert out[-1][1]["gain_ratio"] == pytest.approx(0.09)


# ---- in-process: a real BatchNorm -------------------------------------------------------------

def test_class_ordered_batches_drift_and_shuffled_ones_do_not(tmp_path):
    torch.manual_seed(0)
    protos = 1.5 * torch.randn(10, 32)
    step = iter(range(10_000))

    def one_class():                # every batch a single class, classes in turn
        c = next(step) % 10
        return protos[c] + torch.randn(64, 32), torch.full((64,), c)
    model = bn_mlp()
    events = observed(tmp_path, model, lambda: classify(model, one_class, 40))
    drift = transitions(events, layer="1", signal="norm", to="drift")
    assert drift and 20 <= drift[0]["step"] <= 25, describe(events)
    assert drift[0]["stats"]["drift"] > 0.5 and drift[0]["stats"]["per_channel"] == 64

    model = bn_mlp()
    (tmp_path / "b").mkdir()
    assert_clean(observed(tmp_path / "b", model, lambda: classify(model, clusters(), 40)),
                 norm_layers=("1", "4"))


def test_fair_batches_ahead_of_a_lagging_running_mean_are_not_a_drift(tmp_path):
    """The first Linear's bias pushed 0.1 a step, in one direction (weights moving fast, as at
    lr 0.1 on a fresh ResNet): the batches stay fair samples of one another while BatchNorm's
    running mean, following them with momentum 0.1, lags ~9 steps behind."""
    torch.manual_seed(0)
    model = bn_mlp()
    push = torch.randn(64).sign() * 0.1

    def move():
        with torch.no_grad():
            model[0].bias += push
    make = clusters()
    events = observed(tmp_path, model, lambda: classify(model, make, 40, every=1, evaluate=move))
    assert_clean(events, norm_layers=("1", "4"))
    # the lag is there: the next batch's mean lies far from the running mean
    with torch.no_grad():
        mu, bn = model[0](make()[0]).mean(0), model[1]
        lag = ((mu - bn.running_mean).abs() / (bn.running_var + bn.eps).sqrt()).mean()
    assert lag > 0.5, float(lag)


class ResNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU())
        self.layers = nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 32, 2), BasicBlock(32, 32))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.layers(self.stem(x)).mean((2, 3)))


def images(batch=32, seed=0):
    """4 classes of 3x16x16 images: which quadrant is brightest."""
    g = torch.Generator().manual_seed(seed)

    def batch_of():
        y = torch.randint(0, 4, (batch,), generator=g)
        x = torch.randn(batch, 3, 16, 16, generator=g)
        for i, c in enumerate(y.tolist()):
            r, q = divmod(c, 2)
            x[i, :, 8 * r:8 * r + 8, 8 * q:8 * q + 8] += 1.0
        return x, y
    return batch_of


def test_resnet_with_batchnorm_and_evaluation_passes_stays_clean(tmp_path):
    torch.manual_seed(0)
    model = ResNet()
    held_out = images(64, seed=1)()

    def evaluate():                 # eval() under no_grad, then back to train()
        model.eval()
        with torch.no_grad():
            model(held_out[0])
        model.train()
    events = observed(tmp_path, model, lambda: classify(
        model, images(), 40, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
        every=5, evaluate=evaluate))
    assert_clean(events, norm_layers=("stem.1", "layers.0.bn1", "layers.1.downsample.1"))


def test_batchnorm_in_train_mode_under_no_grad_between_steps_stays_clean(tmp_path):
    """A forward under no_grad in train() mode moves the running statistics too (no drift
    told for it: the copy is taken before each observed call)."""
    torch.manual_seed(0)
    model = bn_mlp()
    batches = clusters()

    def training():
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for _ in range(40):
            with torch.no_grad():
                model(batches()[0])
            x, y = batches()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert_clean(observed(tmp_path, model, training), norm_layers=("1", "4"))


def test_gradient_accumulation_with_batchnorm_stays_clean(tmp_path):
    torch.manual_seed(0)
    model = bn_mlp()
    batches = clusters(batch=16)

    def training():
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for _ in range(40):
            opt.zero_grad()
            for _ in range(4):
                x, y = batches()
                (F.cross_entropy(model(x), y) / 4).backward()
            opt.step()
    assert_clean(observed(tmp_path, model, training), norm_layers=("1", "4"))


def test_a_gans_discriminator_normalising_real_and_generated_images_stays_clean(tmp_path):
    """pytorch/examples' DCGAN: each step its discriminator's BatchNorm normalises a real
    batch, the generated one (detached) and the generated one again: three kinds of batch,
    each a fair sample of its own kind. Each call is compared with the same call of the
    step before, not with the call just before it (a batch of the other kind): it read
    `drift` from step 34 of 200, held to the end, and failed the run."""
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh())
    D = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 32),
                      nn.BatchNorm1d(32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    real = clusters(features=16, batch=32)

    def training():
        opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
        opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
        ones, zeros = torch.ones(32, 1), torch.zeros(32, 1)
        for _ in range(120):
            x = torch.tanh(real()[0] + 3.0)     # (real images: far from the generated ones)
            fake = G(torch.randn(32, 8))
            loss_d = F.binary_cross_entropy_with_logits(D(x), ones) + \
                F.binary_cross_entropy_with_logits(D(fake.detach()), zeros)
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            loss_g = F.binary_cross_entropy_with_logits(D(fake), ones)
            opt_g.zero_grad()
            loss_g.backward()
            opt_g.step()
    events = observed(tmp_path, None, training)
    assert not [t for t in transitions(events, signal="norm") if t["to"] == "drift"], describe(events)


def test_momentum_none_and_untracked_statistics_stay_clean(tmp_path):
    torch.manual_seed(0)
    model = bn_mlp(momentum=None)
    assert_clean(observed(tmp_path, model, lambda: classify(model, clusters(), 40)),
                 norm_layers=("1", "4"))
    model = bn_mlp(track_running_stats=False)
    (tmp_path / "b").mkdir()
    events = observed(tmp_path / "b", model, lambda: classify(model, clusters(), 30))
    assert_clean(events)
    assert not transitions(events, signal="norm"), describe(events)     # nothing to compare


class TinyLM(nn.Module):
    def __init__(self, vocab=50, d=32, context=16):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.Sequential(PreNormBlock(d), PreNormBlock(d))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


@pytest.mark.parametrize("batch", [16, 1])
def test_pre_norm_transformer_stays_clean(tmp_path, batch):
    torch.manual_seed(0)
    model = TinyLM()
    g = torch.Generator().manual_seed(0)
    text = torch.randint(0, 50, (4000,), generator=g).remainder(7)   # a learnable pattern

    def training():
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for _ in range(40):
            at = torch.randint(0, len(text) - 17, (batch,), generator=g)
            seq = torch.stack([text[i:i + 17] for i in at.tolist()])
            logits = model(seq[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 50), seq[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert_clean(observed(tmp_path, model, training),
                 norm_layers=("blocks.0.ln1", "blocks.1.ln2", "ln"))


def test_a_layernorm_gain_decayed_to_nothing_collapses(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 1))
    x, y = torch.randn(32, 8), torch.randn(32, 1)

    def training():
        # weight decay on the gain, huge: it shrinks 0.5x a step
        opt = torch.optim.SGD([{"params": model[1].parameters(), "weight_decay": 5.0},
                               {"params": [*model[0].parameters(), *model[3].parameters()]}],
                              lr=0.1)
        for _ in range(12):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    events = observed(tmp_path, model, training)
    t = transitions(events, layer="1", signal="norm", to="collapsed")
    assert t and t[0]["stats"]["gain_ratio"] < 0.1, describe(events)


# ---- end to end: the bundled sample and its healthy twin --------------------------------------

@pytest.mark.e2e
def test_unshuffled_sample_drifts_and_explain_blames_the_batches(tmp_path):
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "bn_unshuffled.py",
                                 options=("--fail-on", "drift"))
    assert proc.returncode == 3, proc.stderr[-3000:]
    drift = transitions(events, layer="1", signal="norm", to="drift")
    assert drift and drift[0]["step"] <= 30 and drift[0]["module_type"] == "BatchNorm1d", \
        describe(events)
    assert most_changes(events)[0] <= MAX_CHANGES
    out = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "explain", "--json",
                          str(tmp_path / "trace.jsonl")], capture_output=True, text=True,
                         env=ENV, timeout=60)
    top = json.loads(out.stdout)["hypotheses"][0]
    assert (top["symptom"], top["layer"], top["signal"], top["cause"]) == \
        ("drift", "1", "norm", "input_data"), top
    assert top["confidence"] >= 0.5 and "shuffle" in top["fix"].lower(), top
    assert any("running standard deviations" in e and "from the same call's batch the step before" in e
               for e in top["evidence"]), top
    # the targets the loss call saw say why: every batch is of one class
    assert any("every batch sampled held a single class" in e for e in top["evidence"]), top


@pytest.mark.e2e
def test_shuffled_twin_has_no_norm_transition(tmp_path):
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "bn_unshuffled.py", "--shuffle",
                                 options=("--fail-on", ",".join(FAILURE_STATES)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not failures(events), describe(events)
    norm = transitions(events, signal="norm")
    assert {t["layer"] for t in norm} == {"1", "4"}
    assert all(t["from"] is None and t["to"] == "normal" for t in norm), describe(events)
    assert "evaluation accuracy 1.000" in proc.stdout
    classes = [e["stats"]["target_classes"] for e in events
               if e["event"] == "summary" and e["layer"] == "(output)"]
    assert classes and min(classes) >= 8, classes          # mixed batches: most of the 10


# ---- explain on hand-made traces --------------------------------------------------------------

BN_MLP = [("net.0", "Linear", "param"), ("net.1", "BatchNorm1d", "other"),
          ("net.2", "ReLU", "relu"), ("net.3", "Linear", "param"),
          ("net.4", "BatchNorm1d", "other"), ("net.5", "ReLU", "relu")]


def explained(tmp_path, maker):
    from neuraldbg_cli.explain.analysis import analyze
    from neuraldbg_cli.trace import read_trace
    return analyze([read_trace(maker.write(tmp_path / "t.jsonl"))]).hypotheses


def test_drift_first_then_a_dead_relu_is_one_story(tmp_path):
    from tracemaker import TraceMaker
    t = TraceMaker(BN_MLP)
    for layer in ("net.1", "net.4"):
        t.tr(0, layer, "normal", signal="norm")
    t.tr(20, "net.1", "drift", signal="norm", drift=1.1, per_channel=64, batch=64)
    t.tr(21, "net.4", "drift", signal="norm", drift=0.6, per_channel=64, batch=64)
    t.tr(40, "net.5", "dead", dead_ratio=0.95).end(80)
    top, *rest = explained(tmp_path, t)
    assert (top.layer, top.symptom, top.cause) == ("net.1", "drift", "input_data"), top
    assert "shuffle" in top.fix.lower()
    assert any("2 drift (net.1, net.4)" in e for e in top.evidence), top.evidence
    assert {(h.layer, h.cause) for h in rest} == {("net.4", "upstream"), ("net.5", "upstream")}


def test_drift_of_tiny_batches_says_so_and_deeper_drift_alone_is_not_the_data(tmp_path):
    from tracemaker import TraceMaker
    t = TraceMaker(BN_MLP)
    t.tr(20, "net.1", "drift", signal="norm", drift=0.64, per_channel=3, batch=3).end(60)
    top = explained(tmp_path, t)[0]
    assert top.cause == "input_data" and "batches of 3 are too small" in top.summary, top
    assert "GroupNorm" in top.fix
    (tmp_path / "b").mkdir()
    t = TraceMaker(BN_MLP)
    t.tr(20, "net.4", "drift", signal="norm", drift=0.7, per_channel=64, batch=64).end(60)
    assert explained(tmp_path / "b", t)[0].cause == "unknown"
    # a deeper BatchNorm after a Linear (2 values a channel) drifting alone: the batch is tiny
    # all the same (the first, after a conv, has 2 x 28 x 28 values a channel)
    (tmp_path / "c").mkdir()
    t = TraceMaker(BN_MLP)
    t.tr(20, "net.4", "drift", signal="norm", drift=1.25, per_channel=2, batch=2).end(60)
    top = explained(tmp_path / "c", t)[0]
    assert top.cause == "input_data" and "batches of 2 are too small" in top.summary, top
