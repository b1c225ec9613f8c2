"""Losses written by hand, read off the autograd graph (observe/handwritten.py): the classic
output mistakes are named as they are with torch.nn.functional losses, healthy hand-written
losses are not; models of bare tensors are stepped by backward(); a stall is given its cause."""
import pytest
import torch
from torch import nn

from conftest import run_end, trace_events, train
from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.explain.analysis import analyze, to_json
from neuraldbg_cli.trace import read_trace

EPS = 1e-7


def _bce(p, t):
    """Keras' binary_crossentropy on probabilities, as ported code writes it."""
    return -(t * p.clamp(EPS, 1 - EPS).log() + (1 - t) * (1 - p).clamp(EPS, 1).log()).mean()


def _mlp(*tail, out=1):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, out), *tail)


def _dead_relu_head():
    model = _mlp(nn.ReLU())
    with torch.no_grad():
        model[2].bias.fill_(-10.0)      # the only output unit outputs 0 for every row
    return model


def _softmax(o, dim=1):
    """d2l's softmax from scratch: exp over its sum (makemore's `counts / counts.sum(1)`)."""
    e = o.exp()
    return e / e.sum(dim, keepdim=True)


def _stable_softmax(o, dim=1):
    """The same with the rows' maximum taken off first."""
    e = (o - o.max(dim, keepdim=True).values).exp()
    return e / e.sum(dim).unsqueeze(dim)


X = torch.randn(64, 4)
BINARY = (X[:, :1] > 0).float()
PRICES = 1000 + 300 * X[:, :1]
ONE_HOT = nn.functional.one_hot((X[:, 0] > 0).long(), 2).float()
LABELS = (X[:, 0] > 0).long() + (X[:, 1] > 0).long()      # 3 classes
ROWS = range(len(X))

MISTAKES = {
    "softmax over one unit": (lambda: _mlp(nn.Softmax(dim=1)),
                              lambda o: -(BINARY * torch.log(o)).sum(1).mean(),
                              "constant", "normalised_one_unit"),
    "softmax over one unit, taken in the loop": (
        lambda: _mlp(), lambda o: -(BINARY * torch.softmax(o, 1).clamp(EPS, 1).log()).sum(1).mean(),
        "constant", "normalised_one_unit"),
    "sigmoid output on prices": (lambda: _mlp(nn.Sigmoid()), lambda o: ((o - PRICES) ** 2).mean(),
                                 "unreachable", "bounded_output"),
    "ReLU on the only output unit": (_dead_relu_head, lambda o: ((o - PRICES) ** 2).mean(),
                                     "constant", "relu_output_dead"),
    "linear output into a clamped BCE": (lambda: _mlp(), lambda o: _bce(o, BINARY),
                                         "mismatched", "log_of_non_probabilities"),
    "(N, 1) against (N,)": (lambda: _mlp(), lambda o: ((o - PRICES[:, 0]) ** 2).mean(),
                            "mismatched", "broadcast"),
    "(N,) viewed as (N, 1) against (N,)": (
        lambda: _mlp(), lambda o: ((o.view(-1).view(-1, 1) - PRICES[:, 0]) ** 2).mean(),
        "mismatched", "broadcast"),
    "BCE on 0..255 targets": (lambda: _mlp(nn.Sigmoid()), lambda o: _bce(o, 255 * BINARY),
                              "unreachable", "targets_not_probabilities"),
    # each row's class picked out of log-probabilities: the negative log-likelihood by hand
    "log_softmax over the batch, each row's class picked": (
        lambda: _mlp(out=3), lambda o: -torch.log_softmax(o, 0)[ROWS, LABELS].mean(),
        "mismatched", "normalised_other_dim"),
    "a softmax by hand over the batch, each row's class picked (d2l's sum(0))": (
        lambda: _mlp(out=3), lambda o: -torch.log(_softmax(o, 0)[ROWS, LABELS]).mean(),
        "mismatched", "normalised_other_dim"),
    "a softmax by hand of the output, into cross_entropy": (
        lambda: _mlp(out=3), lambda o: nn.functional.cross_entropy(_stable_softmax(o), LABELS),
        "mismatched", "probabilities_into_cross_entropy"),
    "log_softmax over one unit, each row's class gathered": (
        lambda: _mlp(), lambda o: -o.log_softmax(1).gather(1, 0 * LABELS[:, None]).mean(),
        "constant", "normalised_one_unit"),
}

HEALTHY = {
    "MSE, linear output": (lambda: _mlp(), lambda o: ((o - PRICES / 1000) ** 2).mean()),
    "clamped BCE on a sigmoid": (lambda: _mlp(nn.Sigmoid()), lambda o: _bce(o, BINARY)),
    "cross-entropy by hand": (lambda: _mlp(out=2),
                              lambda o: -(ONE_HOT * torch.log_softmax(o, 1)).sum(1).mean()),
    "L1 on a tanh within its range": (lambda: _mlp(nn.Tanh()), lambda o: (o - BINARY).abs().mean()),
    # CleanRL's PPO value loss: the (N, 1) output reshaped to the (N,) returns first
    "MSE of the output viewed as (N,) against (N,) targets": (
        lambda: _mlp(), lambda o: 0.5 * ((o.view(-1) - PRICES[:, 0] / 1000) ** 2).mean()),
    "MSE of the output squeezed, targets first": (
        lambda: _mlp(), lambda o: ((PRICES[:, 0] / 1000 - o.squeeze(1)) ** 2).mean()),
    "MSE of one column of a wider output": (
        lambda: _mlp(out=3), lambda o: ((o[:, 0] - PRICES[:, 0] / 1000) ** 2).mean()),
    "NLL by hand: each row's class picked out of log_softmax": (
        lambda: _mlp(out=3), lambda o: -o.log_softmax(1)[ROWS, LABELS].mean()),
    "NLL by hand, gathered, with label smoothing (timm, fairseq)": (
        lambda: _mlp(out=3), lambda o: 0.9 * -o.log_softmax(-1).gather(-1, LABELS[:, None]).mean()
        + 0.1 * -o.log_softmax(-1).mean()),
    "d2l's cross-entropy: the log of each row's picked softmax probability": (
        lambda: _mlp(out=3), lambda o: -torch.log(torch.softmax(o, 1)[ROWS, LABELS]).mean()),
    "d2l's softmax from scratch, each row's class probability picked and logged": (
        lambda: _mlp(out=3), lambda o: -torch.log(_softmax(o)[ROWS, LABELS]).mean()),
    "makemore's bigram loss, the stable softmax by hand": (
        lambda: _mlp(out=3), lambda o: -_stable_softmax(o)[ROWS, LABELS].log().mean()),
}


def _output_states(tmp_path, model, loss_of, steps=30):
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, X, None, steps, lr=0.01, loss_of=loss_of)
    return [(t["to"], t["stats"].get("why")) for t in dbg.transitions if t["layer"] == "(output)"]


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_classic_output_mistake_is_named_with_a_hand_written_loss(tmp_path, name):
    build, loss_of, state, why = MISTAKES[name]
    found = _output_states(tmp_path, build(), loss_of)
    assert (state, why) in found, found


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_hand_written_losses_are_not_findings(tmp_path, name):
    build, loss_of = HEALTHY[name]
    assert all(state == "normal" for state, _ in _output_states(tmp_path, build(), loss_of))


ONE_LABEL = torch.zeros(len(X), dtype=torch.long)       # every row class 0 (labels / 255)
# (the model, the loss of its output, whether every target being one class is named)
PICKED = {
    "NLL by hand on labels all class 0": (
        lambda o: -o.log_softmax(1)[ROWS, ONE_LABEL].mean(), True),
    "d2l's cross-entropy on labels all class 0": (
        lambda o: -torch.log(torch.softmax(o, 1)[ROWS, ONE_LABEL]).mean(), True),
    "d2l's softmax from scratch on labels all class 0": (
        lambda o: -torch.log(_softmax(o)[ROWS, ONE_LABEL]).mean(), True),
    "one example a step, its class picked by an int (sorted data, per-example SGD)": (
        lambda o: -o[0].log_softmax(0)[0], True),
    # not class losses: the log-probability of the action taken weighted by its advantage
    # (REINFORCE, the actor of A2C), a contrastive loss's positive kept in column 0
    "REINFORCE: the actions' log-probabilities times their advantages": (
        lambda o: -(o.log_softmax(1)[ROWS, ONE_LABEL] * (X[:, 2] - 0.1)).mean(), False),
    "a gradient bandit: one action a step, its log-probability times the reward's advantage": (
        lambda o: -(0.5 - 0.2) * o[0].log_softmax(0)[0], False),
    "REINFORCE by hand: the log of the actions' probabilities times their returns": (
        lambda o: -(torch.log(torch.softmax(o, 1)[ROWS, ONE_LABEL]) * (X[:, 2] + 3)).mean(),
        False),
    "a contrastive loss by hand, the log of the positive's softmax gathered from column 0": (
        lambda o: -torch.log(torch.softmax(o @ o.T, 1).gather(1, ONE_LABEL[:, None])).mean(),
        False),
    "a contrastive loss by hand, its softmax by hand too, the positive in column 0": (
        lambda o: -torch.log(_softmax(o @ o.T)[ROWS, ONE_LABEL]).mean(), False),
    "a contrastive loss whose positive is column 0": (
        lambda o: -o.log_softmax(1)[:, 0].mean(), False),
}


@pytest.mark.parametrize("name", sorted(PICKED))
def test_targets_of_one_class_picked_by_hand_are_named_only_in_a_class_loss(tmp_path, name):
    loss_of, named = PICKED[name]
    found = _output_states(tmp_path, _mlp(out=3), loss_of, steps=80)
    assert (("one_class", "one_class") in found) == named, found


def test_a_model_of_bare_tensors_is_stepped_by_backward(tmp_path):
    """w = torch.randn(..., requires_grad=True), updated by hand, no module, no optimizer:
    each backward() is a step; gradients never zeroed are the loop's mistake."""
    def fit(zero: bool, path):
        torch.manual_seed(0)
        x, y = torch.rand(20, 1) * 10, None
        y = 2 * x + 5
        w, b = torch.randn(1, requires_grad=True), torch.zeros(1, requires_grad=True)
        with NeuralDbg(trace=str(path)) as dbg:
            for _ in range(40):
                loss = (0.5 * (y - (w * x + b)) ** 2).mean()
                loss.backward()
                with torch.no_grad():
                    w -= 0.001 * w.grad
                    b -= 0.001 * b.grad
                if zero:
                    w.grad.zero_()
                    b.grad.zero_()
        return dbg
    buggy = fit(False, tmp_path / "buggy.jsonl")
    assert buggy.steps == 40
    assert [(t["layer"], t["to"]) for t in buggy.failures()] == [("(loop)", "no_zero_grad")]
    fixed = fit(True, tmp_path / "fixed.jsonl")
    assert fixed.steps == 40 and fixed.failures() == []
    assert run_end(trace_events(tmp_path / "fixed.jsonl"))["steps"] == 40


def test_every_gradient_exactly_zero_is_a_failure(tmp_path):
    """A loss that does not depend on the weights (an argmax between them and the loss)."""
    model = _mlp(out=2)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(model, X, None, 15, loss_of=lambda o: (o * 0).sum() + 1.0 * (o.argmax(1) == 0).sum())
    vanishing = [t for t in dbg.failures() if t["to"] == "vanishing"]
    assert {t["layer"] for t in vanishing} == {"0", "2"}
    assert all(t["stats"]["all_zero"] for t in vanishing)


def _stall(tmp_path, lr: float, noise: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.randn(256, 8), torch.randn(256, 8).sum(1, keepdim=True)
    trace = tmp_path / f"stall{lr}.jsonl"
    with NeuralDbg(trace=str(trace)):
        for _ in range(160):
            # (noise: fresh random targets each batch; else the full batch)
            idx = torch.randint(0, 256, (64,)) if noise else torch.arange(256)
            target = torch.randn(64, 1) if noise else y
            loss = ((model(x[idx]) - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return to_json(analyze([read_trace(str(trace))]))


def test_a_stall_with_steps_too_small_is_a_learning_rate_too_low(tmp_path):
    doc = _stall(tmp_path, lr=1e-5, noise=False)
    assert doc["verdict"]["failed"]
    top = doc["hypotheses"][0]
    assert (top["symptom"], top["cause"]) == ("stalled", "learning_rate")
    assert "too low" in top["summary"] and top["confidence"] >= 0.5


def test_a_flat_loss_on_targets_with_no_signal_is_stated_not_failed(tmp_path):
    doc = _stall(tmp_path, lr=0.05, noise=True)
    assert not doc["verdict"]["failed"]
    stalled = [h for h in doc["hypotheses"] if h["symptom"] == "stalled"]
    assert stalled and stalled[0]["cause"] == "input_data" and stalled[0]["confidence"] < 0.5
    assert "no signal" in stalled[0]["summary"]
