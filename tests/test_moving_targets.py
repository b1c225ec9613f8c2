"""Losses against targets that move with training (a DQN's target network, PPO's old policy)
and a model's output layer seen through a view: correct programs that must stay clean, and
the look-alikes whose loss is still judged."""
import contextlib
import copy
import weakref

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import failures, trace_events, transitions
from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.observe.copies import ModelCopies, shapes


def td_learning(trace, targets: str, steps: int = 120) -> None:
    """A Q-network regressed on r + 0.9 max Q'(s'), Q' computed without gradients by
    `targets`: "copy" (a target network, soft-updated), "frozen copy" (the same, its parameters
    frozen and called with gradients on), "itself" (the Q-network), "eval copy"
    (a copy left in eval()), "teacher" (another architecture). The reward grows each step, so
    the loss climbs well past 1.5x its start: what a bootstrapped loss does as returns grow."""
    torch.manual_seed(0)
    q = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    other = {"copy": lambda: copy.deepcopy(q), "itself": lambda: q,
             "frozen copy": lambda: copy.deepcopy(q).requires_grad_(False),
             "eval copy": lambda: copy.deepcopy(q).eval(),
             "teacher": lambda: nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))}
    target = other[targets]()
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    s, s2, a = torch.randn(64, 4), torch.randn(64, 4), torch.randint(0, 2, (64, 1))
    with NeuralDbg(trace=str(trace)):
        for step in range(steps):
            with torch.no_grad() if targets != "frozen copy" else contextlib.nullcontext():
                y = 1.0 + step / 10 + 0.9 * target(s2).max(1).values
            loss = F.smooth_l1_loss(q(s).gather(1, a).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if targets.endswith("copy"):        # (soft updates, as the DQN tutorial's)
                with torch.no_grad():
                    for tp, p in zip(target.parameters(), q.parameters()):
                        tp.mul_(0.99).add_(p, alpha=0.01)


@pytest.mark.parametrize("targets", ["copy", "frozen copy"])
def test_a_loss_against_a_target_network_is_not_judged_by_its_level(tmp_path, targets):
    """A copy called without gradients, or with them and every parameter frozen (DINO's
    EMA teacher, whose loss rises by design as its temperature warms up: `stalled` at 6.97
    against a start of 5.29, a failed run)."""
    trace = tmp_path / "t.jsonl"
    td_learning(trace, targets)
    events = trace_events(trace)
    assert [t["to"] for t in transitions(events, layer="(loss)")] == ["normal"]
    assert not failures(events)


@pytest.mark.parametrize("act_rows,judged", [(1, False), (64, True)])
def test_a_policy_acting_then_learning_from_its_rollouts_is_not_judged_by_its_level(
        tmp_path, act_rows, judged):
    """CleanRL's PPO: one agent acts, one observation at a time, under no_grad in training
    mode, then learns from its rollout on minibatches; its value targets are the returns it
    reaches, which grow as it improves (`diverging` at step 51 in a run whose return rose
    from -70 to -7). Called under no_grad on batches as large as its training ones, the
    model is validated, not acting: the same climb is a divergence."""
    torch.manual_seed(0)
    agent = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.Adam(agent.parameters(), lr=1e-3)
    s = torch.randn(64, 4)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(trace=str(trace)):
        for iteration in range(15):
            with torch.no_grad():
                for _ in range(8):          # (the rollout)
                    agent(torch.randn(act_rows, 4))
            returns = (1.0 + iteration) * (1 + s[:, :1])    # (better returns each rollout)
            for _ in range(8):
                loss = 0.5 * ((agent(s).view(-1) - returns.view(-1)) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    states = [t["to"] for t in transitions(trace_events(trace), layer="(loss)")]
    assert ("diverging" in states) == judged, states


@pytest.mark.parametrize("targets", ["itself", "eval copy", "teacher"])
def test_targets_not_from_a_copy_leave_the_loss_judged(tmp_path, targets):
    """The same climbing loss, its targets computed by the model itself under no_grad (a
    policy choosing actions, a validation pass), by a copy in eval() (an EMA model being
    evaluated) or by a model of another architecture (a distillation teacher): its level is
    judged, and the climb is a divergence."""
    trace = tmp_path / "t.jsonl"
    td_learning(trace, targets)
    states = [t["to"] for t in transitions(trace_events(trace), layer="(loss)")]
    assert "diverging" in states


def test_a_copy_is_found_however_the_calls_are_ordered():
    """PPO runs its old policy for a whole rollout before the policy's first forward with
    gradients: a copy seen before its model is found once the model is."""
    class Registry:
        roots, owners = {}, {}
    policy = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    old = copy.deepcopy(policy)
    reg = Registry()
    copies = ModelCopies(reg)
    copies.saw(old)
    assert not copies.check()                           # no model trained yet
    reg.roots = {id(policy): weakref.ref(policy)}
    reg.owners = {id(p): "layer" for p in policy.parameters()}
    assert copies.check()
    # the model itself, called without gradients, is not a copy of itself
    alone = ModelCopies(reg)
    alone.saw(policy)
    assert not alone.check()
    # a model trained wrapped (DataParallel, DDP, torch.compile) is compared by what it wraps
    assert shapes(nn.DataParallel(policy)) == shapes(old)


class Generator(nn.Module):
    """pytorch-GAN's generators: the image is the output Tanh's, viewed as (N, 1, 28, 28)."""

    def __init__(self, returns: str = "view"):
        super().__init__()
        self.returns = returns
        self.model = nn.Sequential(nn.Linear(16, 64), nn.LeakyReLU(0.2), nn.Linear(64, 784), nn.Tanh())

    def forward(self, z):
        y = self.model(z)
        if self.returns == "copy":      # (a detection head's permute, contiguous, view)
            return y.view(-1, 28, 28, 1).permute(0, 3, 2, 1).contiguous().view(-1, 1, 28, 28)
        image = y.view(z.shape[0], 1, 28, 28)
        return (z.norm(dim=1), image) if self.returns == "second" else image   # (CapsNet's)


@pytest.mark.parametrize("returns", ["view", "copy", "second"])
def test_an_output_tanh_seen_through_a_view_is_the_output_layer(tmp_path, returns):
    """Most pixels of MNIST are background: a generator's output Tanh learns to sit at -1
    there. Its output reaches the loss as a view in image shape, a copy in another layout, or
    the second of the tensors returned; it is still the model's output layer, whose
    saturation is the aim, not a failure."""
    torch.manual_seed(0)
    g = Generator(returns)
    with torch.no_grad():
        g.model[2].bias[:700] = -8.0        # 700 of 784 pixels: background
    target = -torch.ones(32, 1, 28, 28)
    opt = torch.optim.Adam(g.parameters(), lr=1e-4)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(trace=str(trace)):
        for _ in range(30):
            out = g(torch.randn(32, 16))
            loss = F.mse_loss(out[1] if returns == "second" else out, target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    events = trace_events(trace)
    assert not transitions(events, to="saturated"), transitions(events, to="saturated")


class PixelLoss(nn.Module):
    """A loss written as a module of its own, as yhenon's RetinaNet writes its FocalLoss."""

    def forward(self, out, target):
        return ((out - target) ** 2).mean()


class WithLoss(nn.Module):
    """A model that computes its loss in `forward` and returns it (yhenon's RetinaNet)."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body, self.loss = body, PixelLoss()

    def forward(self, z, target):
        return self.loss(self.body(z), target)


@pytest.mark.parametrize("hidden", [False, True])
def test_the_layer_before_a_loss_the_model_returns_is_its_output_layer(tmp_path, hidden):
    """RetinaNet's classification Sigmoid at its prior of 0.01, its focal loss computed in
    `forward` by a module: no output is returned, the loss is. The layer called just before
    that loss is the output layer, whose saturation is the aim (the generator's Tanh here,
    reached through a copy); a Tanh saturated inside the body, a Linear after it, is still
    a failure."""
    torch.manual_seed(0)
    if hidden:
        body = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 784))
        with torch.no_grad():
            body[0].bias.fill_(8.0)         # every hidden unit saturated
        target = torch.zeros(32, 784)
    else:
        body = Generator("copy")
        with torch.no_grad():
            body.model[2].bias[:700] = -8.0
        target = -torch.ones(32, 1, 28, 28)
    model = WithLoss(body)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(trace=str(trace)):
        for _ in range(30):
            loss = model(torch.randn(32, 16), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = [t["layer"] for t in transitions(trace_events(trace), to="saturated")]
    assert found == (["body.1"] if hidden else []), found


def test_a_hidden_tanh_before_a_value_of_one_state_still_saturates(tmp_path):
    """A critic called on one state a step returns a single value, as a loss is: the layer
    before its value head is no output layer for that (the head holds parameters: it is a
    layer, no loss module), and its saturation is still a failure."""
    torch.manual_seed(0)
    critic = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 1))
    with torch.no_grad():
        critic[0].bias.fill_(8.0)
    opt = torch.optim.SGD(critic.parameters(), lr=1e-3)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(trace=str(trace)):
        for _ in range(30):
            loss = (critic(torch.randn(1, 4)) - 1.0).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = [t["layer"] for t in transitions(trace_events(trace), to="saturated")]
    assert found == ["1"], found


def policy_gradient(trace, how: str, steps: int = 150) -> None:
    """A policy trained on episodes that grow from 5 to about 80 time steps, as an agent
    learning to balance does, its loss summed over the episode: "batched" runs the episode's
    states as one batch and sums -log p(a) * return (a REINFORCE loop), "per step" calls the
    policy at each time step with gradients and sums the stacked losses (pytorch/examples'
    actor-critic), "mean" averages instead (the loss's level then is comparable)."""
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2), nn.Softmax(dim=-1))
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    with NeuralDbg(trace=str(trace)):
        for step in range(steps):
            length = 5 + step // 2 + (step % 3)     # (grows, and differs from step to step)
            states, actions = torch.randn(length, 4), torch.randint(0, 2, (length,))
            returns = torch.linspace(1.0, 0.1, length)
            if how == "per step":
                probs = torch.stack([policy(s) for s in states])
            else:
                probs = policy(states)
            terms = -torch.log(probs.gather(1, actions[:, None]).squeeze(1)) * returns
            loss = terms.mean() if how == "mean" else terms.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()


@pytest.mark.parametrize("how", ["batched", "per step"])
def test_a_loss_summed_over_episodes_that_grow_is_not_diverging(tmp_path, how):
    """Summed over episodes that grow, the loss climbs 15x with nothing wrong (it read
    `diverging`, counted, on a REINFORCE that learned CartPole)."""
    trace = tmp_path / "t.jsonl"
    policy_gradient(trace, how)
    events = trace_events(trace)
    assert not failures(events), [t for t in transitions(events) if t["signal"] == "loss"]


def test_a_loss_averaged_over_episodes_is_still_judged_by_its_level(tmp_path):
    """Averaged, the same loss's level is comparable: judged, it stalls (random actions are
    no signal to learn from)."""
    trace = tmp_path / "t.jsonl"
    policy_gradient(trace, "mean")
    assert "stalled" in {t["to"] for t in transitions(trace_events(trace)) if t["signal"] == "loss"}


def test_an_evaluation_pass_now_and_then_does_not_make_steps_uneven():
    """Supervised steps of one forward, with an evaluation pass under gradients every 10
    steps: the size changes on 2 steps in 10, not on most."""
    from neuraldbg_cli.observe.uneven import UnevenSteps

    steady, episodes = UnevenSteps(), UnevenSteps()
    assert not any(steady.step(2 if i % 10 == 9 else 1, 0) for i in range(200))
    assert any(episodes.step(1, 10 + 7 * (i % 5)) for i in range(30))
