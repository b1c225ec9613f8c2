"""The learning dynamics as observed: the sampled update ratio against the exact one, the
loss as passed to backward() (summed over micro-batches, unscaled under GradScaler), and the
loss, update and loop detectors' verdicts on healthy and broken numbers."""
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conftest import trace_events, train
from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.errors import InputError
from neuraldbg_cli.explain.analysis import analyze, to_json
from neuraldbg_cli.observe.detectors.base import Observation
from neuraldbg_cli.observe.detectors.loss import LossDetector
from neuraldbg_cli.observe.detectors.update import UpdateDetector
from neuraldbg_cli.observe.kinds import LOSS_KIND, PARAM
from neuraldbg_cli.observe.updates import UpdateSampler, ratios
from neuraldbg_cli.thresholds import Thresholds
from neuraldbg_cli.trace import read_trace

TH = Thresholds()


class _Layer:
    """What the sampler needs of a layer record."""
    def __init__(self, module_type="Linear"):
        self.module_type = module_type
        self.in_optimizer = False
        self.on_update = ["watched"]     # (some detector watches its updates)


def sampled_and_exact(model, opt, step_once):
    """(sampled ratio, exact ratio) per layer for one optimizer step."""
    recs = {m: _Layer(type(m).__name__) for m in model.modules()
            if any(True for _ in m.parameters(recurse=False))}
    owners = {id(p): rec for m, rec in recs.items() for p in m.parameters(recurse=False)}
    before = {m: [p.detach().clone() for p in m.parameters(recurse=False)] for m in recs}
    sampler = UpdateSampler(TH.update.sample)
    sampler.before(opt, owners)
    step_once()
    batch = sampler.after(opt)
    norms = [float(torch.linalg.vector_norm(t)) for t in batch.tensors]
    found = ratios(batch, norms)
    out = []
    for m, rec in recs.items():
        du = math.sqrt(sum(float(((p.detach() - b) ** 2).sum())
                           for p, b in zip(m.parameters(recurse=False), before[m])))
        w = math.sqrt(sum(float((p.detach() ** 2).sum()) for p in m.parameters(recurse=False)))
        out.append((found[rec], du / w))
    return out


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_sampled_update_ratio_is_within_a_few_percent_of_the_exact_one(optimizer):
    """256 sampled elements per parameter: the estimate of ||dW|| / ||W|| stays within 15% of
    the exact value on every layer and step, and within 5% in the median."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 6 * 6, 128),
                          nn.ReLU(), nn.Linear(128, 10))
    opt = (torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=1e-3))
    x, y = torch.randn(32, 3, 8, 8), torch.randint(0, 10, (32,))
    errors = []
    for _ in range(8):
        def step_once():
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        for sampled, exact in sampled_and_exact(model, opt, step_once):
            errors.append(abs(sampled - exact) / exact)
    errors.sort()
    assert errors[-1] < 0.15 and errors[len(errors) // 2] < 0.05, errors


def test_an_update_of_a_single_row_is_seen():
    """A coprime stride puts a sample in every row: a step that changes one row of a
    weight (a sparse-like update) is not measured as zero."""
    lin = nn.Linear(64, 64, bias=False)
    opt = torch.optim.SGD(lin.parameters(), lr=1.0)

    def step_once():
        lin.weight.grad = torch.zeros_like(lin.weight)
        lin.weight.grad[17] = 1.0
        opt.step()
    [(sampled, exact)] = sampled_and_exact(lin, opt, step_once)
    assert sampled > 0 and exact > 0


def test_a_1x1_conv_whose_some_inputs_are_dead_is_measured_on_the_others():
    """A 1x1 conv (128, 32) fed by a ReLU whose channels 8 and 24 died: their weights get
    exactly zero gradient. The sample meets every input channel, so the update of the
    others is measured (a stride of 16 met only channels 8 and 24, and read 0: `frozen`)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(32, 128, 1, bias=False)    # (as a residual block's 1x1 conv)
    opt = torch.optim.SGD(conv.parameters(), lr=0.1)
    x = torch.relu(torch.randn(8, 32, 4, 4))
    x[:, [8, 24]] = 0

    def step_once():
        opt.zero_grad()
        conv(x).square().mean().backward()
        opt.step()
    [(sampled, exact)] = sampled_and_exact(conv, opt, step_once)
    assert abs(sampled - exact) / exact < 0.15, (sampled, exact)


def loss_run(losses, detector=None):
    """The loss detector's states over a sequence of losses."""
    d = detector or LossDetector(TH)
    h = d.history()
    out = []
    for v in losses:
        x = Observation(LOSS_KIND, loss=v)
        out.append(d.judge(x, h)[0])
        d.remember(x, h)
    return out


def test_a_converging_loss_is_normal_to_the_end():
    # falls from 2.3 and flattens low: converged, not stalled
    losses = [2.3 * math.exp(-i / 40) + 0.05 + 0.02 * math.sin(i) for i in range(400)]
    assert set(loss_run(losses)) == {"normal"}


def test_a_noisy_but_learning_loss_is_normal():
    torch.manual_seed(0)
    losses = [max(0.01, 1.5 - i / 400 + 0.3 * float(torch.randn(()))) for i in range(400)]
    assert set(loss_run(losses)) == {"normal"}


def test_a_loss_that_stays_at_its_starting_level_stalls():
    states = loss_run([2.30 + 0.01 * math.sin(i) for i in range(200)])
    assert "stalled" not in states[:TH.loss.stall_after] and states[-1] == "stalled"


def test_a_loss_spike_and_a_divergence():
    spike = loss_run([1.0 - i / 100 for i in range(40)] + [9.0] + [0.6] * 10)
    assert spike[40] == "spiking" and spike[-1] == "normal"
    diverging = loss_run([1.0] * 10 + [1.0 + i / 5 for i in range(40)])
    assert diverging[-1] == "diverging"


@pytest.mark.parametrize("leap, state", [(5000.0, "diverging"), (50.0, "normal")])
def test_a_loss_that_blew_up_at_once_started_at_its_first_step(leap, state):
    """Udacity's all-ones MLP under Adam: 2.3 at step 0, 12,000 from step 1, falling slowly to
    a few thousand. The median of the first steps is post-explosion, and the run read as
    learning; where that median is 100x the first loss, the start is the first loss. A loss
    that rose less at once keeps the median (a noisy first batch)."""
    losses = [2.3] + [2.3 * leap * (1 - i / 400) for i in range(1, 200)]
    states = loss_run(losses)
    assert states[-1] == state and "diverging" not in states[:TH.loss.window // 2], states


def test_a_network_of_all_ones_weights_diverges_and_names_its_initialization(tmp_path,
                                                                            hooks_clean):
    """End to end: every Linear weight 1 (the Udacity exercise) under Adam: the loss leaps
    from chance to thousands at once. It is `diverging`, and the initialization is the run's
    cause; the default init trains clean."""
    torch.manual_seed(0)
    x, y = torch.rand(256, 784), torch.randint(0, 10, (256,))

    def fit(ones: bool, path):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.2),
                              nn.Linear(256, 128), nn.ReLU(), nn.Dropout(0.2), nn.Linear(128, 10))
        if ones:
            for m in (model[0], model[3], model[6]):
                nn.init.constant_(m.weight, 1.0)
                nn.init.zeros_(m.bias)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        with NeuralDbg(trace=str(path)) as dbg:
            for i in range(60):
                rows = slice(i % 4 * 64, i % 4 * 64 + 64)
                loss = F.cross_entropy(model(x[rows]), y[rows])
                opt.zero_grad()
                loss.backward()
                opt.step()
        return dbg
    assert not fit(False, tmp_path / "fixed.jsonl").failures()
    buggy = fit(True, tmp_path / "t.jsonl")
    assert ("(loss)", "diverging") in {(t["layer"], t["to"]) for t in buggy.failures()}
    top = to_json(analyze([read_trace(str(tmp_path / "t.jsonl"))]))["hypotheses"][0]
    assert top["cause"] == "initialization", top      # (the units copies of one another)


def test_nonfinite_loss_and_a_log_likelihood():
    assert loss_run([1.0, float("nan")])[-1] == "nonfinite"
    # a negative loss (a log-likelihood) has no level to judge: only non-finite values count
    assert set(loss_run([-1.0 - i for i in range(200)])) == {"normal"}


def test_update_detector_verdicts():
    d = UpdateDetector(TH)
    h = d.history()
    states = []
    for ratio in [0.01] * 12 + [0.9, 0.9]:
        x = Observation(PARAM, grad_norm=1.0, update_ratio=ratio)
        states.append(d.judge(x, h)[0])
        d.remember(x, h)
    assert states[:12] == ["normal"] * 12 and states[-1] == "too_large"
    h = d.history()         # a layer that gets gradients but never moves
    frozen = []
    for _ in range(4):
        x = Observation(PARAM, grad_norm=1.0, update_ratio=0.0)
        frozen.append(d.judge(x, h)[0])
        d.remember(x, h)
    assert frozen[0] == "normal" and frozen[-1] == "frozen"
    # early steps with big updates (zero-initialised weights) are not judged
    h = d.history()
    assert d.judge(Observation(PARAM, grad_norm=1.0, update_ratio=5.0), h)[0] == "normal"


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))


def first_loss(dbg) -> float:
    return next(t for t in dbg.transitions if t["signal"] == "loss")["stats"]["loss"]


def test_the_loss_is_what_backward_got_summed_over_micro_batches(tmp_path, hooks_clean):
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    with torch.no_grad():
        expected = sum(float(((model(x[i::2]) - y[i::2]) ** 2).mean() / 2) for i in range(2))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(3):
            opt.zero_grad()
            for i in range(2):          # two micro-batches, each loss divided by 2
                (((model(x[i::2]) - y[i::2]) ** 2).mean() / 2).backward()
            opt.step()
    assert first_loss(dbg) == pytest.approx(expected, rel=1e-5)
    assert not dbg.failures(), dbg.failures()       # accumulation resets once a cycle: fine


def test_the_loss_under_grad_scaler_is_unscaled(tmp_path, hooks_clean):
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    with torch.no_grad():
        expected = float(((model(x) - y) ** 2).mean())
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(3):
            opt.zero_grad()
            scaler.scale(((model(x) - y) ** 2).mean()).backward()
            scaler.step(opt)
            scaler.update()
    assert first_loss(dbg) == pytest.approx(expected, rel=1e-5)


def test_gradients_never_reset_are_a_loop_mistake(tmp_path, hooks_clean):
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(10):
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
    found = [t for t in dbg.failures() if t["signal"] == "loop"]
    assert [(t["layer"], t["to"]) for t in found] == [("(loop)", "no_zero_grad")]
    assert found[0]["step"] <= TH.loop.no_zero_grad_steps


def test_only_the_detectors_named_run_and_the_others_cost_nothing(tmp_path, hooks_clean):
    """NeuralDbg(detectors=...) (`run --detectors`): the same loop mistake is not judged, the
    update sampler copies nothing, the loss is not wrapped; the trace says what was observed."""
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(trace=str(trace), detectors="activation,gradient") as dbg:
        monitor = dbg.session.monitor
        assert monitor.backward is None and monitor.loss_calls is None
        for _ in range(10):
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
        assert not monitor.registry.updates_watched
        assert all(not w.views for _, w in monitor.hooks.updates._watched.values())
    events = trace_events(trace)
    assert events[0]["detectors"] == ["activation", "gradient"]
    signals = {e["signal"] for e in events if e["event"] == "transition"}
    assert signals == {"activation", "gradient"}
    assert not [e for e in events if e["event"] == "summary" and "update_ratio" in e["stats"]]
    with pytest.raises(InputError, match="unknown signal 'loops'"):
        NeuralDbg(trace=str(trace), detectors=["activation", "loops"])


@pytest.mark.parametrize("reset", ["zero_grad", "set_to_none", "model_zero_grad", "zero_"])
def test_every_way_of_resetting_gradients_is_seen(tmp_path, hooks_clean, reset):
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def clear():
        if reset == "zero_grad":
            opt.zero_grad()
        elif reset == "model_zero_grad":
            model.zero_grad()
        else:
            for p in model.parameters():
                if reset == "zero_" and p.grad is not None:
                    p.grad.zero_()
                else:
                    p.grad = None
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=10, opt=opt, before_step=lambda step: clear())
    assert not dbg.failures(), dbg.failures()


def test_a_layer_added_after_the_optimizer_is_frozen(tmp_path, hooks_clean):
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model[2] = nn.Linear(32, 1)         # the head replaced after the optimizer was built
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=8, opt=opt)
    found = {(t["layer"], t["signal"], t["to"]) for t in dbg.failures()}
    assert ("2", "update", "frozen") in found, dbg.transitions
    assert {layer for layer, _, _ in found} == {"2"}


@pytest.mark.parametrize("warmup", [True, False])
def test_a_warm_up_from_a_rate_of_0_is_no_failure_and_a_rate_of_0_for_good_is(tmp_path, hooks_clean,
                                                                               warmup):
    """ViT-CIFAR's GradualWarmupScheduler from 0, stepped per epoch: the whole first epoch at a
    learning rate of 0 leaves every layer unchanged for 16 steps, a blip the rate explains;
    the same schedule held at 0 for good never trains: a failure, the learning rate's."""
    torch.manual_seed(0)
    model, x, y = _mlp(), torch.randn(64, 8), torch.randn(64, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: min(1.0, epoch) if warmup else 0.0)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(trace=str(trace)) as dbg:
        for _ in range(4):
            train(model, x, y, steps=16, opt=opt)
            sched.step()
    frozen = [t for t in dbg.transitions if t["to"] == "frozen"]
    assert {t["layer"] for t in frozen} == {"0", "2"} and frozen[0]["step"] == 2, dbg.transitions
    assert all(t["stats"]["rate_zero"] is True for t in frozen)
    assert bool(dbg.failures()) is not warmup, dbg.failures()
    top = analyze([read_trace(trace)]).hypotheses[0]
    assert (top.symptom, top.cause) == ("frozen", "learning_rate"), top
    assert ("a warm-up from 0" if warmup else "the learning rate is 0") in top.summary


@pytest.mark.parametrize("new_model", [True, False])
def test_a_new_model_trained_after_another_has_a_loss_level_of_its_own(tmp_path, hooks_clean,
                                                                      new_model):
    """Pretraining, then a new model (a copy fine-tuned on another task, LoRA's recipe) with
    an optimizer of its own: its loss starts far above the pretrained one's last, and falls;
    no spike, no divergence. The same model given a new optimizer and the same new labels
    (its data gone wrong mid-run) is still judged against its own level: it spikes."""
    torch.manual_seed(0)
    centres = torch.randn(10, 32)
    y = torch.randint(0, 10, (512,))
    x = centres[y] + 0.5 * torch.randn(512, 32)
    a = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))

    def phase(model, labels, steps, opt):
        for step in range(steps):
            rows = slice(64 * (step % 8), 64 * (step % 8 + 1))
            loss = F.cross_entropy(model(x[rows]), labels[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()

    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        phase(a, y, 60, torch.optim.Adam(a.parameters(), lr=1e-2))
        b = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)) if new_model else a
        b.load_state_dict(a.state_dict())
        phase(b, (y + 1) % 10, 100, torch.optim.Adam(b.parameters(), lr=1e-3))
    loss = {t["to"] for t in dbg.failures() if t["layer"] == "(loss)"}
    assert not loss if new_model else loss & {"diverging", "spiking", "nonfinite"}, dbg.transitions


def test_a_generator_whose_optimizer_has_not_stepped_yet_is_held_by_it(tmp_path, hooks_clean):
    """An SN-GAN's loop: 15 critic steps before the generator's first, the generated batch not
    detached in the critic's loss, so the generator gets gradients from the start. Its
    optimizer was built before training: no layer of it is `frozen` "in no optimizer"."""
    torch.manual_seed(0)
    g = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    d = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.1), nn.Linear(32, 1))
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.0, 0.9))
        opt_g = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.0, 0.9))
        for _ in range(4):
            for _ in range(15):
                opt_d.zero_grad()
                opt_g.zero_grad()
                real, z = torch.randn(64, 2) * 0.5 + 2.0, torch.randn(64, 8)
                (F.relu(1.0 - d(real)).mean() + F.relu(1.0 + d(g(z))).mean()).backward()
                opt_d.step()
            opt_d.zero_grad()
            opt_g.zero_grad()
            (-d(g(torch.randn(64, 8))).mean()).backward()
            opt_g.step()
    assert not [t for t in dbg.transitions if t["to"] == "frozen"], dbg.transitions


class Wrapper(torch.optim.Optimizer):
    """SAM's or Lookahead's shape: an optimizer that steps a base one over the same groups."""

    def __init__(self, params):
        self.base = torch.optim.SGD(params, lr=0.01)
        super().__init__(self.base.param_groups, {})
        self.param_groups = self.base.param_groups

    def step(self, closure=None):
        self.base.step()


@pytest.mark.parametrize("g_opt_over", ["discriminator", "generator", "wrapped"])
def test_a_generator_whose_optimizer_holds_the_discriminators_parameters_is_frozen(
        tmp_path, hooks_clean, g_opt_over):
    """A GAN port's bug, `optimizerG = Adam(netD.parameters())`: the discriminator steps
    twice an iteration and the generator never changes, its layers getting gradients every
    step; they come before the discriminator's in the forward, where a backbone left out of
    a fine-tune on purpose would. Two optimizers stepping the same parameters tell them apart.
    Not so an optimizer wrapping another over the same groups (SAM, Lookahead)."""
    torch.manual_seed(0)
    g = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    d = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        opt_d = torch.optim.Adam(d.parameters(), lr=2e-4)
        opt_g = Wrapper(g.parameters()) if g_opt_over == "wrapped" else \
            torch.optim.Adam((d if g_opt_over == "discriminator" else g).parameters(), lr=2e-4)
        for _ in range(20):
            real, z = torch.randn(64, 2) + 2.0, torch.randn(64, 8)
            loss_d = F.softplus(-d(real)).mean() + F.softplus(d(g(z).detach())).mean()
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            loss_g = F.softplus(-d(g(torch.randn(64, 8)))).mean()
            opt_g.zero_grad()
            g.zero_grad()
            loss_g.backward()
            opt_g.step()
    frozen = [t for t in dbg.failures() if t["to"] == "frozen"]
    if g_opt_over != "discriminator":
        assert not frozen, frozen
        return
    assert {t["layer"] for t in frozen} == {"g.0", "g.2"}, dbg.transitions
    assert all(t["stats"].get("shared_optimizers") for t in frozen)


def test_a_backbone_unfrozen_later_has_its_updates_watched(tmp_path, hooks_clean):
    """Gradual unfreezing (ULMFiT, a fine-tune's second phase): the backbone, frozen when
    first called, joins the optimizer later; its steps are judged from then on (they were
    not: its layers were registered while frozen, and never watched for updates)."""
    torch.manual_seed(0)
    model, x, y = _mlp(), torch.randn(64, 8), torch.randn(64, 1)
    backbone = model[0]
    backbone.requires_grad_(False)
    opt = torch.optim.SGD(model[2].parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=15, opt=opt)
        backbone.requires_grad_(True)
        opt.add_param_group({"params": backbone.parameters(), "lr": 0.01})
        train(model, x, y, steps=15, opt=opt)
    told = [t for t in dbg.transitions if t["layer"] == "0" and t["signal"] == "update"]
    assert told and told[0]["step"] == 15 and told[0]["stats"]["update_ratio"] > 0, dbg.transitions


def test_intentionally_frozen_layers_are_not_findings(tmp_path, hooks_clean):
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    for p in model[0].parameters():
        p.requires_grad_(False)         # a frozen backbone, fine-tuning the head
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=8)
    assert not dbg.failures(), dbg.failures()


def test_a_detach_that_cuts_the_graph(tmp_path, hooks_clean):
    class Cut(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 32), nn.Linear(32, 1)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)).detach())
    torch.manual_seed(0)
    model, x, y = Cut(), torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=8, opt=opt)
    found = {(t["layer"], t["signal"], t["to"]) for t in dbg.failures()}
    assert found == {("a", "update", "detached")}, dbg.transitions


def test_a_layer_whose_output_the_loss_does_not_use_is_not_cut_off(tmp_path, hooks_clean):
    """BYOL reads its encoder's hidden layer through a hook and never uses the encoder's
    last Linear, which an optimizer over all parameters still holds, before the projector's:
    a dead end, not a graph cut; the layers before it get their gradients."""
    class Learner(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 10))
            self.projector = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1))
            self.hidden = None
            self.encoder[1].register_forward_hook(lambda m, i, o: setattr(self, "hidden", o))

        def forward(self, x):
            self.encoder(x)                 # (its output, the last Linear's, is not used)
            return self.projector(self.hidden)
    torch.manual_seed(0)
    model, x, y = Learner(), torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=8, opt=opt)
    assert model.encoder[2].weight.grad is None
    assert not dbg.failures(), dbg.failures()


class GraphAttention(nn.Module):
    """As pytorch/examples' gat: parameters of its own and a module of its own (LeakyReLU),
    so a container, which makes no output record of its own."""
    def __init__(self, i, o):
        super().__init__()
        self.W = nn.Parameter(torch.randn(i, o) * 0.1)
        self.a = nn.Parameter(torch.randn(2 * o, 1) * 0.1)
        self.leakyrelu = nn.LeakyReLU(0.2)

    def forward(self, h):
        wh = h @ self.W
        n = wh.shape[1]
        return torch.softmax(self.leakyrelu(wh @ self.a[:n] + (wh @ self.a[n:]).T), dim=1) @ wh


@pytest.mark.parametrize("lr, frozen", [(0.0, {"0", "2"}), (0.01, set())])
def test_a_layer_with_parameters_and_modules_of_its_own_is_judged_by_its_updates(
        tmp_path, hooks_clean, lr, frozen):
    """Its gradient says it was used: at lr 0 it is `frozen`, as a Linear would be (it was
    never judged); trained, it is not."""
    torch.manual_seed(0)
    model = nn.Sequential(GraphAttention(8, 16), nn.ELU(), GraphAttention(16, 3))
    x, y = torch.randn(50, 8), torch.randint(0, 3, (50,))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=30, opt=opt, loss_of=lambda out: F.cross_entropy(out, y))
    assert {t["layer"] for t in dbg.failures() if t["to"] == "frozen"} == frozen, dbg.failures()


def test_a_coefficient_held_by_the_model_itself_has_no_vanishing_gradient(tmp_path, hooks_clean):
    """A physics-informed net identifying a PDE's coefficient, registered on the model: while
    the net is still flat the coefficient's gradient is ~1e-9 of the largest, and grows as the
    net fits. A container's own parameters are no layer of the stack: not `vanishing` (it
    failed the run, "(root) gradient vanishing at step 0, held 13 steps")."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 20), nn.Tanh(), nn.Linear(20, 20), nn.Tanh(), nn.Linear(20, 1))
    model.register_parameter("coef", nn.Parameter(torch.ones(1)))
    x, y = torch.randn(64, 2), torch.randn(64, 1)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=30, opt=torch.optim.Adam(model.parameters()),
              loss_of=lambda out: F.mse_loss(out, y)
              + 1e-6 * (model.coef * out.detach().mean()).pow(2).sum())
    events = trace_events(tmp_path / "t.jsonl")
    root = [e for e in events if e.get("layer") == "(root)" and e.get("signal") == "gradient"]
    assert root and root[0]["stats"]["grad_norm"] < 1e-6 * root[0]["stats"]["model_max_grad_norm"]
    assert [e["to"] for e in root] == ["healthy"] and not dbg.failures()


@pytest.mark.parametrize("loss,state", [(1e-6, "healthy"), (0.3, "vanishing")])
def test_a_gradient_small_beside_the_others_once_the_data_is_fit_is_not_vanishing(loss, state):
    """ReZero's 64 residual blocks fit separable data to a loss of 1e-6 by step 50: every
    gradient fades (the largest 6e-5), and one block's, 3e-6 of the largest, read
    `vanishing` for the last 38 steps (a failed run). A loss at 1e-4 of where it started
    has nothing left to learn; the same ratio while it is still learning is vanishing."""
    from neuraldbg_cli.observe.detectors.gradient import GradientDetector
    d = GradientDetector(Thresholds())
    h = d.history()
    first = Observation(PARAM, grad_norm=0.1, model_max_grad_norm=0.2, loss=1.3)
    d.remember(first, h)
    x = Observation(PARAM, grad_norm=1.7e-10, model_max_grad_norm=5.9e-5, loss=loss)
    assert d.judge(x, h)[0] == state


@pytest.mark.parametrize("held", ["image", "stale"])
def test_an_image_optimised_through_a_fixed_model_leaves_its_layers_alone(tmp_path, hooks_clean, held):
    """Style transfer as pytorch/tutorials first wrote it: the feature net's parameters keep
    requires_grad and get gradients, while the optimizer holds only the image (it failed:
    every conv `frozen`, "in no optimizer"). An optimizer holding parameters that the model
    no longer has (a model rebuilt after its optimizer) is still the loop's mistake."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3))
    target = torch.randn(1, 8, 12, 12)
    image = torch.rand(1, 3, 16, 16, requires_grad=True)
    stale = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3))
    opt = torch.optim.Adam([image] if held == "image" else stale.parameters(), lr=0.05)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(10):
            opt.zero_grad()
            F.mse_loss(net(image if held == "image" else image.detach()), target).backward()
            opt.step()
    frozen = {t["layer"] for t in dbg.failures() if t["to"] == "frozen"}
    assert frozen == (set() if held == "image" else {"0", "2"}), dbg.failures()


class _Bottleneck(nn.Module):
    """A path whose gradient is 5e-6 of the model's largest, as a U-Net's deepest convs
    (SfMLearner's DispNet: 1e-7 of the largest at its first step, with Adam)."""

    def __init__(self):
        super().__init__()
        self.head, self.deep = nn.Linear(8, 1), nn.Linear(8, 1)

    def forward(self, x):
        return self.head(x) + 5e-6 * self.deep(x)


@pytest.mark.parametrize("make,vanishing", [
    (lambda p: torch.optim.Adam(p, lr=1e-3), False),
    (lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1), False),
    (lambda p: torch.optim.SGD(p, lr=0.05), True),
    # Adam's L2 decay is added to the gradient: its steps follow the decay, not the loss
    (lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=0.1), True),
    # ... unless the decay is a sliver of the gradient (milesial's U-Net: RMSprop, 1e-8)
    (lambda p: torch.optim.RMSprop(p, lr=1e-5, momentum=0.999, weight_decay=1e-8), False),
    # ... or a quarter of it (the U-Net's deepest BatchNorm: its gradient 9e-7, its decay 1.6e-7)
    (lambda p: torch.optim.RMSprop(p, lr=1e-5, momentum=0.999, weight_decay=1.5e-5), False),
], ids=["adam", "adamw", "sgd", "adam-l2", "rmsprop-tiny-l2", "rmsprop-l2-quarter"])
def test_a_tiny_gradient_that_an_adaptive_optimizer_turns_into_full_steps_is_not_vanishing(
        tmp_path, hooks_clean, make, vanishing):
    """What a vanishing gradient harms is the layer's learning: a layer that Adam moves at
    the model's pace is learning (SfMLearner's fixed version failed, "conv6.0 gradient
    vanishing at step 0, held 37 steps"). Under SGD the same gradient moves it 1e-5 as far."""
    torch.manual_seed(0)
    model, x = _Bottleneck(), torch.randn(64, 8)
    y = x.sum(1, keepdim=True)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=30, opt=make(model.parameters()),
              loss_of=lambda out: F.mse_loss(out, y))
    events = trace_events(tmp_path / "t.jsonl")
    first = next(e for e in events if e.get("layer") == "deep" and e.get("signal") == "gradient")
    assert first["stats"]["grad_norm"] < 1e-5 * first["stats"]["model_max_grad_norm"]
    found = {(t["layer"], t["signal"], t["to"]) for t in dbg.failures()}
    assert found == ({("deep", "gradient", "vanishing")} if vanishing else set()), found


def test_eval_mode_left_on_while_training_is_seen_and_layers_stay_observed(tmp_path, hooks_clean):
    """Once a model is found training in eval(), its eval() calls are training: a NaN batch
    two steps later is placed at its layers."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
    x, y = torch.randn(16, 8), torch.randn(16, 1)

    def before(step):
        if step == 2:
            model.eval()
        if step == 4:
            x[0, 0] = float("nan")
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=6, before_step=before)
    found = [t for t in dbg.failures() if t["signal"] == "loop"]
    assert [(t["to"], t["stats"]["models"]) for t in found] == [("eval_mode", ["Sequential"])]
    assert dbg.steps == 6
    nonfinite = {(t["layer"], t["step"]) for t in dbg.failures(["nonfinite"])
                 if t["signal"] == "activation"}
    assert {("(input)", 4), ("0", 4)} <= nonfinite, nonfinite


def test_a_validation_pass_in_eval_with_gradients_on_is_not_read(tmp_path, hooks_clean):
    """A validation loop that forgets no_grad but calls model.eval() (pytorch/examples'
    language_translation): its batches are not the training's, so its numbers are not merged
    into the next step's; here they are NaN, and nothing is flagged."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
    x, y = torch.randn(16, 8), torch.randn(16, 1)

    def validate(step):
        model.eval()
        model(torch.full_like(x, float("nan")))
        model.train()
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=6, before_step=validate)
    assert not dbg.transitions or all(t["to"] in ("normal", "healthy") for t in dbg.transitions), \
        dbg.transitions


def test_an_evaluation_pass_between_training_steps_is_fine(tmp_path, hooks_clean):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
    x, y = torch.randn(16, 8), torch.randn(16, 1)

    def evaluate(step):
        model.eval()
        with torch.no_grad():
            model(x)
        model.train()
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=6, before_step=evaluate)
    assert not dbg.failures(), dbg.failures()


@pytest.mark.parametrize("left_in_eval", [False, True])
def test_a_decoder_sampled_layer_by_layer_in_eval_then_trained_in_train_mode_is_fine(
        tmp_path, hooks_clean, left_in_eval):
    """A Gumbel-softmax VAE samples after each epoch with `model.decode(z)`: its decoder's
    Linear layers are called one by one, in eval() with gradients on, then trained inside
    the model after `model.train()`. They were `eval_mode` from the next epoch on (a failed
    run); a model left in eval() while it trains still is."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))
    x = torch.randn(16, 8)

    def sample(step):
        model.eval()
        model[2](model[1](model[0](torch.randn(4, 8))))     # decode(z), gradients on
        if not left_in_eval:
            model.train()
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, x, steps=6, before_step=sample)
    found = [t["to"] for t in dbg.failures() if t["signal"] == "loop"]
    assert found == (["eval_mode"] if left_in_eval else []), dbg.failures()


def test_the_weight_scale_at_first_sight_is_in_the_model_event(tmp_path, hooks_clean):
    """Each weight layer's rms, with the fan-in rule of what follows it: He before a ReLU,
    Xavier before a tanh or nothing (the output layer)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 1))
    nn.init.normal_(model[2].weight, std=2.5)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(trace=str(trace)):
        train(model, x, y, steps=2)
    events = trace_events(trace)
    assert events[0]["schema"] >= 2
    layers = {l["name"]: l for e in events if e["event"] == "model" for l in e["layers"]}
    assert (layers["0"]["init_rule"], layers["2"]["init_rule"], layers["4"]["init_rule"]) == \
        ("he", "xavier", "xavier")
    assert layers["0"]["init_rms"] == pytest.approx(math.sqrt(2 / 8))
    assert layers["2"]["init_rms"] == pytest.approx(math.sqrt(2 / (32 + 16)))
    assert layers["2"]["weight_rms"] == pytest.approx(2.5, rel=0.1)
    assert "weight_rms" not in layers["1"]


def test_a_loss_summed_over_the_batch_is_no_explosion(tmp_path, hooks_clean):
    """The VAE recipe of pytorch/examples: binary cross-entropy summed over 128 x 784 pixels,
    Adam. Its gradient norms are in the thousands at every step, and healthy."""
    torch.manual_seed(0)
    x = torch.rand(128, 784)
    model = nn.Sequential(nn.Linear(784, 400), nn.ReLU(), nn.Linear(400, 20), nn.ReLU(),
                          nn.Linear(20, 400), nn.ReLU(), nn.Linear(400, 784), nn.Sigmoid())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(15):
            loss = nn.functional.binary_cross_entropy(model(x), x, reduction="sum")
            opt.zero_grad()
            loss.backward()
            big = max(float(p.grad.norm()) for p in model.parameters())
            opt.step()
    assert big > 1000          # (the old absolute ceiling)
    assert not dbg.failures(), dbg.failures()


def test_an_optimizer_stepped_without_backward_is_a_loop_mistake(tmp_path, hooks_clean):
    """loss.backward() forgotten: the optimizer steps on no gradient, the model never learns."""
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(8):
            opt.zero_grad()
            ((model(x) - y) ** 2).mean()        # computed, never backpropagated
            opt.step()
    found = [(t["layer"], t["to"]) for t in dbg.failures()]
    assert found == [("(loop)", "no_backward")], dbg.transitions


@pytest.mark.parametrize("every", [1, 4])
def test_a_loss_that_reaches_no_parameter_is_a_loop_mistake(tmp_path, hooks_clean, every):
    """The model run under no_grad (a frozen-module wrapper) and `loss.requires_grad = True`
    to silence the error: backward() runs and no parameter ever gets a gradient. A batch now
    and then with nothing to learn, its loss a fresh zero (every 4th), is no mistake."""
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for step in range(16):
            if every == 1:
                with torch.no_grad():
                    loss = ((model(x) - y) ** 2).mean()
                loss.requires_grad = True
            else:
                loss = torch.zeros((), requires_grad=True) if step % every == 3 \
                    else ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = [(t["layer"], t["to"]) for t in dbg.failures()]
    assert found == ([("(loop)", "no_gradient")] if every == 1 else []), dbg.transitions
    if every == 1:
        top = to_json(analyze([read_trace(str(tmp_path / "t.jsonl"))]))["hypotheses"][0]
        assert (top["symptom"], top["cause"]) == ("no_gradient", "training_loop"), top


def test_an_optimizer_over_an_earlier_model_is_the_layers_story_not_the_loops(tmp_path,
                                                                             hooks_clean):
    """The char-RNN tutorial's bug: the optimizer built over a first instance of the model, the
    model trained a second one. The optimizer's parameters get no gradient, as when the loss
    reaches none, but the trained layers get theirs: they are `frozen`, in no optimizer."""
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.SGD(_mlp().parameters(), lr=0.01)
    model = _mlp()
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(16):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            model.zero_grad()
            loss.backward()
            opt.step()
    found = {(t["signal"], t["to"]) for t in dbg.failures()}
    assert ("update", "frozen") in found and ("loop", "no_gradient") not in found, found


def test_a_local_net_loaded_from_the_global_one_it_steps_is_not_frozen(tmp_path, hooks_clean):
    """A3C's worker: the local net's gradients handed to the global net, which the optimizer
    steps, and the local net loaded from it again. No optimizer holds the local net, but its
    weights change at every step: it is not `frozen` "in no optimizer" (it was, for the
    whole run), and the loss falls."""
    torch.manual_seed(0)
    shared, local = _mlp(), _mlp()
    local.load_state_dict(shared.state_dict())
    opt = torch.optim.Adam(shared.parameters(), lr=1e-2)
    x = torch.randn(64, 8)
    y = x @ torch.randn(8, 1)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(60):
            loss = ((local(x) - y) ** 2).mean()
            opt.zero_grad()
            local.zero_grad()
            loss.backward()
            for lp, gp in zip(local.parameters(), shared.parameters()):
                gp._grad = lp.grad
            opt.step()
            local.load_state_dict(shared.state_dict())
    assert not dbg.failures(), dbg.failures()


@pytest.mark.parametrize("steps", [0, 1])
def test_an_optimizer_never_stepped_is_a_loop_mistake(tmp_path, hooks_clean, steps):
    """SfmLearner's bug: scheduler.step() where optimizer.step() belongs. Every iteration is
    one step that never ends, so nothing was judged and the run read "0 steps, no failure";
    it is `no_step`, told at the run's end (a run that stepped at all is judged step by step,
    as before)."""
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for i in range(20):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            (opt if i < steps else sched).step()
    found = [(t["layer"], t["to"], t["stats"].get("backwards")) for t in dbg.failures()]
    assert found == ([("(loop)", "no_step", 20)] if steps == 0 else []), dbg.transitions


def test_a_backbone_left_out_of_a_head_only_optimizer_is_not_frozen(tmp_path, hooks_clean):
    """Fine-tuning the head alone while the backbone still requires grad (a common, correct
    pattern) is no finding; a head replaced after the optimizer was built still is."""
    model, x, y = _mlp(), torch.randn(16, 8), torch.randn(16, 1)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, x, y, steps=12, opt=torch.optim.SGD(model[2].parameters(), lr=0.01))
    assert not dbg.failures(), dbg.failures()


def test_a_prelu_slope_learning_its_way_to_zero_takes_no_step_too_large(tmp_path, hooks_clean):
    """The data is relu(x . w): the PReLU's one slope learns its best value, 0, then hovers
    there under SGD's noise, each step of ~1e-3 large beside the slope itself (ArcFace's
    backbone failed "prelu too_large at step 70"). A few scalars' relative step is not a
    learning rate too high; the Linear of 8 weights is not judged by it either."""
    torch.manual_seed(0)
    w = torch.randn(8)
    x = torch.randn(4096, 8)
    y = torch.relu(x @ w).unsqueeze(1) + 0.1 * torch.randn(4096, 1)
    model = nn.Sequential(nn.Linear(8, 1), nn.PReLU(), nn.Linear(1, 1))
    with torch.no_grad():
        model[0].weight.copy_(0.5 * w.unsqueeze(0))
        model[0].bias.zero_()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(200):
            idx = torch.randint(0, 4096, (32,))
            loss = F.mse_loss(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert abs(model[1].weight.item()) < 0.05       # (the slope did reach 0)
    assert not dbg.failures(), dbg.failures()


@pytest.mark.parametrize("drift", [False, True])
def test_a_loss_of_one_sample_a_step_is_judged_on_a_long_window(tmp_path, hooks_clean, drift):
    """The widely copied LSTM-on-airline-passengers loop trains on one window a step: each
    step's loss is one sample's error, a quarter of them 3x the median by chance, and the
    first five a poor start (it read `diverging` at step 10 and `spiking` most of the run,
    while the mean loss fell every epoch). Judged on 100 steps, it passes; a loss whose level
    really climbs (targets scaled up 4x over the run) still reads `diverging`."""
    torch.manual_seed(0)
    w = torch.randn(8, 1)
    x = torch.randn(2000, 8)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for i in range(400):
            scale = 1 + 3 * i / 400 if drift else 1.0
            loss = F.mse_loss(model(x[i:i + 1]), scale * x[i:i + 1] @ w)
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = {t["to"] for t in dbg.failures() if t["layer"] == "(loss)"}
    assert found == ({"diverging"} if drift else set()), dbg.failures()
