"""A class loss's `weight` that weighs the frequent classes most (weights in the wrong order,
or class counts where their inverse was meant) is named on (output) as `mismatched`, with the
targets' mean weight it rests on; inverse-frequency weights, even weights, balanced classes,
an ignored padding class and a discriminator fed one class a call are not flagged."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.explain.analysis import analyze
from neuraldbg_cli.observe.pairing import _weight_share
from neuraldbg_cli.trace import read_trace

N = 64


def imbalanced(rare: float, classes: int = 2) -> torch.Tensor:
    """N class indices, class 0 the frequent one, the others `rare` of the rows each, spread
    through the batch."""
    y = torch.zeros(N, dtype=torch.long)
    per = round(rare * N)
    for c in range(1, classes):
        y[c::classes * 2][:per] = c
    return y


def inverse(y: torch.Tensor, classes: int) -> torch.Tensor:
    """The usual class weights: total / (classes x count)."""
    counts = torch.bincount(y, minlength=classes).float()
    return len(y) / (classes * counts)


def observe(tmp_path, y, loss_of, steps=12):
    """A small classifier trained on targets `y` with `loss_of(logits, y)`; the (output)
    transitions and the trace's path."""
    torch.manual_seed(0)
    classes = int(y.max()) + 1
    x = torch.randn(N, 8)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, max(classes, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(trace=str(trace)) as dbg:
        for _ in range(steps):
            loss = loss_of(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return [t for t in dbg.transitions if t["layer"] == "(output)"], trace


def failures(found):
    return [t for t in found if t["to"] != "normal"]


def test_swapped_weights_of_two_imbalanced_classes_are_named_with_the_targets_weight(
        tmp_path, hooks_clean):
    y = imbalanced(0.125)           # 87.5% class 0, as multilogue-net's emotions
    swapped = inverse(y, 2).flip(0)
    found, trace = observe(tmp_path, y, nn.CrossEntropyLoss(weight=swapped))
    bad = failures(found)
    assert bad and bad[0]["to"] == "mismatched"
    stats = bad[0]["stats"]
    assert stats["why"] == "class_weights_favour_frequent"
    # weights proportional to the frequencies: 2 x (0.875^2 + 0.125^2) their classes' mean
    assert stats["class_weight_share"] == pytest.approx(1.5625, rel=1e-4)
    assert stats["targets_weighted"] >= 256
    assert bad[0]["step"] == 3      # (64 targets a step: 256 read by the fourth)
    top = analyze([read_trace(trace)]).hypotheses[0]
    assert top.cause == "architecture" and "frequent classes" in top.summary


@pytest.mark.parametrize("weights", ["inverse", "even", "none", "sqrt-inverse"])
def test_weights_that_lift_the_rare_class_or_none_are_not_flagged(tmp_path, hooks_clean,
                                                                  weights):
    y = imbalanced(0.125)
    w = {"inverse": inverse(y, 2), "even": torch.ones(2), "none": None,
         "sqrt-inverse": inverse(y, 2).sqrt()}[weights]
    found, _ = observe(tmp_path, y, nn.CrossEntropyLoss(weight=w))
    assert failures(found) == []


def test_balanced_classes_with_uneven_weights_are_not_flagged(tmp_path, hooks_clean):
    y = torch.arange(N) % 4
    found, _ = observe(tmp_path, y, nn.CrossEntropyLoss(weight=torch.tensor([8.0, 1, 1, 1])))
    assert failures(found) == []


def test_class_counts_given_as_weights_are_named_with_weights_given_positionally(
        tmp_path, hooks_clean):
    y = imbalanced(0.05, classes=5)     # 80% class 0, 5% each other class
    counts = torch.bincount(y, minlength=5).float()

    def loss(out, y):
        return F.cross_entropy(out, y, counts)      # (the weight is the third argument)
    bad = failures(observe(tmp_path, y, loss)[0])
    assert bad and bad[0]["stats"]["why"] == "class_weights_favour_frequent"


def test_an_ignored_padding_class_is_left_out_of_the_targets_weight(tmp_path, hooks_clean):
    # class 0 is padding, most of the targets, ignored; its weight, whatever it is, is unused
    y = imbalanced(0.2, classes=3)
    w = torch.tensor([50.0, 1.0, 1.0])
    found, _ = observe(tmp_path, y, nn.CrossEntropyLoss(weight=w, ignore_index=0))
    assert failures(found) == []


def test_a_discriminator_fed_one_class_a_call_is_not_judged_by_its_weights(tmp_path,
                                                                           hooks_clean):
    real = torch.ones(N, dtype=torch.long)
    w = torch.tensor([1.0, 3.0])        # the real class weighted most, every call of one class
    found, _ = observe(tmp_path, real, lambda out, y: F.cross_entropy(out, y, weight=w))
    assert not [t for t in found if t["stats"].get("why") == "class_weights_favour_frequent"]


def test_the_targets_weight_is_their_mean_class_weight_over_the_classes_mean():
    index = torch.tensor([0, 0, 0, 1, -100, 7])     # an ignore_index and a class out of range
    n, share = _weight_share(index, torch.tensor([1.0, 3.0]), -100)
    assert n.item() == 4 and share.item() == pytest.approx(1.5 / 2.0)
    n, share = _weight_share(torch.tensor([-100, -100]), torch.tensor([1.0, 3.0]), -100)
    assert n.item() == 0    # (no target with a class: NaN, never judged)


def test_a_class_never_in_the_targets_weighted_0_does_not_count():
    # (a padding class weighted 0 in place of an ignore_index, absent from these targets)
    index = torch.arange(N) % 3
    n, share = _weight_share(index, torch.tensor([1.0, 1.0, 1.0, 0.0]), -100)
    assert n.item() == N and share.item() == pytest.approx(1.0)


def test_padding_masked_by_a_weight_of_0_is_left_out_like_an_ignore_index(tmp_path,
                                                                          hooks_clean):
    # a tagger's padding class 0, weighted 0 in place of ignore_index, 10% of the targets
    y = 1 + torch.arange(N) % 2
    y[::10] = 0
    w = torch.tensor([0.0, 1.0, 1.0])
    n, share = _weight_share(y, w, -100)
    assert n.item() == N - 7 and share.item() == pytest.approx(1.0)
    found, _ = observe(tmp_path, y, nn.CrossEntropyLoss(weight=w))
    assert failures(found) == []
