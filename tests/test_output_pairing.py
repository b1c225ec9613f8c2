"""The model's output against the loss and the targets: each classic mismatch is named on the
pseudo-layer (output) with its reason and numbers; the healthy pairings are not flagged; the
observed loss call returns exactly what an unobserved one does."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.observe import pairing

N, FEATURES = 64, 8


def observe(tmp_path, head, loss_of, y, *, steps=12, x=None, lr=0.05):
    """Train a small body + `head` for `steps` steps under NeuralDbg; the (output)
    transitions written."""
    torch.manual_seed(0)
    x = torch.randn(N, FEATURES) if x is None else x
    model = nn.Sequential(nn.Linear(x.shape[1], 16), nn.ReLU(), *head)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(steps):
            loss = loss_of(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return [t for t in dbg.transitions if t["layer"] == "(output)"]


def verdict(found: list) -> tuple:
    """(state, why) of the first failure of (output), or ("normal", None)."""
    bad = [t for t in found if t["to"] != "normal"]
    return (bad[0]["to"], bad[0]["stats"]["why"]) if bad else ("normal", None)


class Mixture(nn.Module):
    """Experts mixed by a softmax gate (a mixture of experts' head); `softmax`: each expert's
    output is a softmax (probabilities mixed, no softmax on the graph just before the loss)."""

    def __init__(self, softmax: bool, experts: int = 3):
        super().__init__()
        self.softmax = softmax
        self.gate = nn.Linear(16, experts)
        self.experts = nn.ModuleList(nn.Linear(16, 4) for _ in range(experts))

    def forward(self, h):
        gates = torch.softmax(self.gate(h), 1).unsqueeze(-1)
        outs = torch.stack([e(h) for e in self.experts], 1)
        return (gates * (torch.softmax(outs, -1) if self.softmax else outs)).sum(1)


classes = torch.arange(N) % 4
one_hot = F.one_hot(classes, 4).float()
binary = (torch.arange(N) % 2).float().unsqueeze(1)
prices = torch.linspace(12, 4310, N).unsqueeze(1)
POS = torch.arange(0, N, 3)     # (a detector's positive anchors)
T, LABELS = 6, 5                # CTC: 6 time steps of 5 classes (0 the blank), 2 labels a row
labels = 1 + torch.arange(2 * N).view(N, 2) % (LABELS - 1)


def ctc(norm):
    """CTCLoss on (T, N, C) rows made of the head's output, normalised by `norm` over the
    classes (the last dimension): log_softmax as CTC expects, or softmax (a known mistake)."""
    def loss(out, y):
        rows = norm(out.view(N, T, LABELS).transpose(0, 1), 2)
        return F.ctc_loss(rows, y, torch.full((N,), T), torch.full((N,), 2))
    return loss


BROKEN = {
    "softmax over one unit into BCELoss": (
        [nn.Linear(16, 1), nn.Softmax(dim=1)], nn.BCELoss(), binary, "constant",
        "normalised_one_unit"),
    "cross-entropy over one unit": (
        [nn.Linear(16, 1)], nn.CrossEntropyLoss(), torch.zeros(N, dtype=torch.long), "constant",
        "one_class_unit"),
    "softmax into CrossEntropyLoss": (
        [nn.Linear(16, 4), nn.Softmax(dim=1)], nn.CrossEntropyLoss(), classes, "mismatched",
        "probabilities_into_cross_entropy"),
    "experts' softmaxes mixed by their gates into CrossEntropyLoss": (
        [Mixture(softmax=True)], nn.CrossEntropyLoss(), classes, "mismatched",
        "probabilities_into_cross_entropy"),
    "functional sigmoid into F.cross_entropy": (
        [nn.Linear(16, 4)], lambda out, y: F.cross_entropy(torch.sigmoid(out), y), classes,
        "mismatched", "probabilities_into_cross_entropy"),
    "sigmoid into BCEWithLogitsLoss": (
        [nn.Linear(16, 1), nn.Sigmoid()], nn.BCEWithLogitsLoss(), binary, "mismatched",
        "probabilities_into_bce_with_logits"),
    "softmax into NLLLoss": (
        [nn.Linear(16, 4), nn.Softmax(dim=1)], nn.NLLLoss(), classes, "mismatched",
        "not_log_probabilities"),
    "logits into NLLLoss": (
        [nn.Linear(16, 4)], nn.NLLLoss(), classes, "mismatched", "not_log_probabilities"),
    "softmax into CTCLoss": (
        [nn.Linear(16, T * LABELS)], ctc(torch.softmax), labels, "mismatched",
        "not_log_probabilities"),
    "log_softmax over the batch into NLLLoss": (
        [nn.Linear(16, 4), nn.LogSoftmax(dim=0)], nn.NLLLoss(), classes, "mismatched",
        "normalised_other_dim"),
    "functional log_softmax over the batch into F.nll_loss": (
        [nn.Linear(16, 4)], lambda out, y: F.nll_loss(F.log_softmax(out, 0), y), classes,
        "mismatched", "normalised_other_dim"),
    "targets of another shape in MSELoss": (
        [nn.Linear(16, 1)], nn.MSELoss(), torch.randn(N), "mismatched", "broadcast"),
    "L1Loss on one-hot classes": (
        [nn.Linear(16, 4), nn.Softmax(dim=1)], nn.L1Loss(), one_hot, "mismatched",
        "regression_loss_on_classes"),
    "independent sigmoids on exclusive classes": (
        [nn.Linear(16, 4), nn.Sigmoid()], nn.BCELoss(), one_hot, "mismatched",
        "exclusive_classes"),
    "sigmoid output regressing on prices": (
        [nn.Linear(16, 1), nn.Sigmoid()], nn.MSELoss(), prices, "unreachable", "bounded_output"),
    "tanh output on targets in the tens": (
        [nn.Linear(16, 1), nn.Tanh()], lambda out, y: F.smooth_l1_loss(out, y), prices / 100, "unreachable",
        "bounded_output"),
    "class labels as BCE targets": (
        [nn.Linear(16, 1)], nn.BCEWithLogitsLoss(), (torch.arange(N) % 4).float().unsqueeze(1),
        "unreachable", "targets_not_probabilities"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_each_mismatch_is_named_at_step_0_with_its_reason(tmp_path, hooks_clean, case):
    head, loss_fn, y, state, why = BROKEN[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # (torch warns of the broadcast)
        found = observe(tmp_path, head, loss_fn, y)
    assert verdict(found) == (state, why), found
    first = next(t for t in found if t["to"] == state)
    assert first["step"] == 0 and first["signal"] == "output"
    assert {"loss_fn", "output_min", "target_max", "output_shape"} <= set(first["stats"])


def test_a_log_softmax_over_a_batch_as_large_as_the_classes_is_told_by_its_rows(tmp_path,
                                                                                hooks_clean):
    """Four rows of four classes: the sizes cannot tell the dimensions apart, the rows'
    logsumexp can (PointNet's log_softmax over dim 0, seen one shape at a time)."""
    found = observe(tmp_path, [nn.Linear(16, 4), nn.LogSoftmax(dim=0)], nn.NLLLoss(),
                    torch.arange(4), x=torch.randn(4, FEATURES))
    assert verdict(found) == ("mismatched", "normalised_other_dim"), found
    assert found[0]["stats"]["normalised"] == found[0]["stats"]["units"] == 4


def test_labels_that_are_all_one_class_are_named_once_it_is_clear(tmp_path, hooks_clean):
    """y / 255 on integer labels: every label 0. Named after 50 steps (a class-ordered,
    unshuffled dataset also starts with one class), not before."""
    y = (classes / 255).long()
    found = observe(tmp_path, [nn.Linear(16, 10)], nn.CrossEntropyLoss(), y, steps=80)
    bad = [t for t in found if t["to"] != "normal"]
    assert [(t["to"], t["stats"]["why"]) for t in bad] == [("one_class", "one_class")], found
    assert 49 <= bad[0]["step"] <= 60
    assert bad[0]["stats"]["target_min"] == bad[0]["stats"]["target_max"] == 0


@pytest.mark.parametrize("sky_only", [False, True])
def test_segmentation_masks_are_read_over_the_whole_batch(tmp_path, hooks_clean, sky_only):
    """Masks whose top rows are all sky (class 4): the targets read are spread over every
    image, so only masks that are wholly one class (a mask divided by 255) are `one_class`."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 16, 16, generator=g)
    y = torch.randint(0, 4, (4, 16, 16), generator=g)
    y[:, :4] = 4                                 # (the first 64 values: image 0's top rows)
    if sky_only:
        y[:] = 4
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 5, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(80):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = [t for t in dbg.transitions if t["layer"] == "(output)"]
    assert verdict(found) == (("one_class", "one_class") if sky_only else ("normal", None)), found


def test_sequence_targets_are_read_along_their_positions(tmp_path, hooks_clean):
    """The copying task (geotorch's example): each sequence's 30 targets are 25 blanks (class
    0), then the 5 digits to copy, flattened for cross_entropy. Read every 30th value, the
    targets were blanks only: `one_class` on a run that learns to copy. The stride is prime
    to a sequence's count of targets, so the reads move along its positions."""
    g = torch.Generator().manual_seed(0)
    y = torch.zeros(64, 30, dtype=torch.long)
    y[:, 25:] = torch.randint(1, 9, (64, 5), generator=g)
    x = torch.randn(64, 30, 8, generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 9))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(61):
            loss = F.cross_entropy(model(x).view(-1, 9), y.view(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = [t for t in dbg.transitions if t["layer"] == "(output)"]
    assert verdict(found) == ("normal", None), found


@pytest.mark.parametrize("scale", [1.0, 0.07])
def test_a_contrastive_loss_whose_positive_is_always_class_0_is_not_one_class(tmp_path,
                                                                               hooks_clean, scale):
    """SimCLR's and MoCo's InfoNCE: `cross_entropy(cat([positives, negatives]) / T, zeros)`.
    Every label is 0 by design; the logits are assembled from the model's output, not its
    output: no `one_class` (it failed sthalles/SimCLR's loop at step 50). The same labels on
    the model's own logits, divided by a temperature or not, still are."""
    def info_nce(out, y):
        f = F.normalize(out, dim=1)
        sim = f @ f.T
        pos, neg = sim.diagonal(1)[::2].repeat_interleave(2)[:N, None], sim[:, :N - 1]
        return F.cross_entropy(torch.cat([pos, neg], 1) / 0.07, y)
    zeros = torch.zeros(N, dtype=torch.long)
    found = observe(tmp_path, [nn.Linear(16, 8)], info_nce, zeros, steps=80)
    assert verdict(found) == ("normal", None), found
    (tmp_path / "b").mkdir()
    found = observe(tmp_path / "b", [nn.Linear(16, 4)],
                    lambda out, y: F.cross_entropy(out / scale, y), zeros, steps=80)
    assert verdict(found) == ("one_class", "one_class"), found


def test_a_discriminator_given_real_and_fake_batches_in_calls_of_their_own_is_not_one_class(
        tmp_path, hooks_clean):
    """A GAN whose discriminator has two logits, trained with cross_entropy on real batches
    (class 1) and fake ones (class 0) in separate calls: each call is one class, both are in
    every step, and only a step's first call is read. With two optimizers, no one_class."""
    torch.manual_seed(0)
    g = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
    d = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 2))
    opt_g, opt_d = (torch.optim.Adam(m.parameters(), 1e-3, betas=(0.5, 0.999)) for m in (g, d))
    ones, zeros = torch.ones(64, dtype=torch.long), torch.zeros(64, dtype=torch.long)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(80):
            real, fake = torch.randn(64, 2) * 0.3 + 2, g(torch.randn(64, 4))
            loss_d = F.cross_entropy(d(real), ones) + F.cross_entropy(d(fake.detach()), zeros)
            opt_d.zero_grad()
            loss_d.backward()
            opt_d.step()
            loss_g = F.cross_entropy(d(fake), ones)
            opt_g.zero_grad()
            loss_g.backward()
            opt_g.step()
    found = [t for t in dbg.transitions if t["layer"] == "(output)"]
    assert found and verdict(found) == ("normal", None), found


def soft(y):
    return torch.softmax(torch.randn(N, 4), dim=1)


def _samples(out):
    """Two samples' log-probabilities written into a zeros tensor, as Bayes by backprop's
    notebook does; their average's rows have a logsumexp below 0."""
    outs = torch.zeros(2, *out.shape)
    outs[0], outs[1] = F.log_softmax(out, 1), F.log_softmax(-3 * out, 1)
    return outs


HEALTHY = {
    "logits into CrossEntropyLoss": ([nn.Linear(16, 4)], nn.CrossEntropyLoss(), classes),
    "label smoothing": ([nn.Linear(16, 4)], nn.CrossEntropyLoss(label_smoothing=0.1), classes),
    "experts' logits mixed by their gates into CrossEntropyLoss": (
        [Mixture(softmax=False)], nn.CrossEntropyLoss(), classes),
    "probability targets": ([nn.Linear(16, 4)], nn.CrossEntropyLoss(), soft(classes)),
    "one-hot targets into cross_entropy": (
        [nn.Linear(16, 4)], lambda out, y: F.cross_entropy(out, y), one_hot),
    "log_softmax into NLLLoss": ([nn.Linear(16, 4), nn.LogSoftmax(dim=1)], nn.NLLLoss(), classes),
    "log_softmax over the classes of (T, N, C) into CTCLoss": (
        [nn.Linear(16, T * LABELS)], ctc(torch.log_softmax), labels),
    "log_softmax over the last dim of (N, L, C), permuted for NLLLoss": (
        [nn.Linear(16, 8), nn.Unflatten(1, (2, 4)), nn.LogSoftmax(dim=-1)],
        lambda out, y: F.nll_loss(out.permute(0, 2, 1), y), torch.stack([classes] * 2, 1)),
    "an average of sampled log_softmax outputs into nll_loss (Bayes by backprop)": (
        [nn.Linear(16, 4)], lambda out, y: F.nll_loss(_samples(out).mean(0), y), classes),
    "log of a softmax into nll_loss": (
        [nn.Linear(16, 4)], lambda out, y: F.nll_loss(torch.log(torch.softmax(out, 1)), y),
        classes),
    "sigmoid into BCELoss on 0/1": ([nn.Linear(16, 1), nn.Sigmoid()], nn.BCELoss(), binary),
    "BCE on one-hot classes of rows picked from the output (YOLOv5's class loss)": (
        [nn.Linear(16, 4)], lambda out, y: F.binary_cross_entropy_with_logits(out[POS], y[POS]),
        one_hot),
    "logits into BCEWithLogitsLoss, multi-label": (
        [nn.Linear(16, 4)], nn.BCEWithLogitsLoss(), (torch.rand(N, 4) > 0.5).float()),
    "a discriminator's targets all ones": (
        [nn.Linear(16, 1), nn.Sigmoid()], nn.BCELoss(), torch.ones(N, 1)),
    "linear head, standardised targets": (
        [nn.Linear(16, 1)], nn.MSELoss(), (prices - prices.mean()) / prices.std()),
    "linear head, raw targets": ([nn.Linear(16, 1)], nn.L1Loss(), prices),
    "sigmoid reconstruction of 0..1 targets": (
        [nn.Linear(16, FEATURES), nn.Sigmoid()], nn.MSELoss(), torch.rand(N, FEATURES)),
    "tanh output on -1..1 targets": ([nn.Linear(16, 1), nn.Tanh()], nn.HuberLoss(),
                                     torch.rand(N, 1) * 2 - 1),
    "MSE between softmax and one-hot": ([nn.Linear(16, 4), nn.Softmax(dim=1)], nn.MSELoss(),
                                        one_hot),
    # multilogue-net's MaskedNLLLoss: padded utterances' rows zeroed before NLLLoss
    "log_softmax times a padding mask into NLLLoss": (
        [nn.Linear(16, 4), nn.LogSoftmax(dim=1)],
        lambda out, y: F.nll_loss(out * (torch.arange(N) % 4 != 0).float()[:, None], y), classes),
}


@pytest.mark.parametrize("case", HEALTHY)
def test_healthy_pairings_are_not_flagged(tmp_path, hooks_clean, case):
    head, loss_fn, y = HEALTHY[case]
    found = observe(tmp_path, head, loss_fn, y, steps=25)
    assert found and verdict(found) == ("normal", None), found


def test_sequence_logits_with_the_class_dimension_second(tmp_path, hooks_clean):
    """CrossEntropyLoss on (batch, classes, length) logits, as for per-token or per-pixel
    classes: the classes are dimension 1."""
    torch.manual_seed(0)
    conv = nn.Conv1d(3, 5, 3, padding=1)
    x, y = torch.randn(8, 3, 40), torch.randint(0, 5, (8, 40))
    opt = torch.optim.SGD(conv.parameters(), lr=0.1)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(5):
            loss = F.cross_entropy(conv(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    found = [t for t in dbg.transitions if t["layer"] == "(output)"]
    assert verdict(found) == ("normal", None), found


def test_an_evaluation_pass_is_not_judged(tmp_path, hooks_clean):
    """Probabilities into a loss under no_grad (a validation metric) are not a training loss."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(FEATURES, 4)), torch.randn(N, FEATURES)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(5):
            with torch.no_grad():
                F.cross_entropy(torch.softmax(model(x), 1), classes)
            loss = F.cross_entropy(model(x), classes)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not dbg.failures(), dbg.failures()


LOSSES = [
    (nn.CrossEntropyLoss(label_smoothing=0.05), lambda: classes, 4),
    (nn.NLLLoss(), lambda: classes, 4),
    (nn.BCEWithLogitsLoss(), lambda: binary, 1),
    (nn.MSELoss(), lambda: prices, 1),
    (nn.SmoothL1Loss(), lambda: prices, 1),
]


@pytest.mark.parametrize("loss_fn,target,units", LOSSES)
def test_the_observed_loss_and_its_gradient_are_exactly_those_of_an_unobserved_run(
        tmp_path, hooks_clean, loss_fn, target, units):
    def once():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(FEATURES, units))
        x = torch.randn(N, FEATURES)
        loss = loss_fn(model(x), target())
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    plain_loss, plain_grads = once()
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        seen_loss, seen_grads = once()
    assert torch.equal(plain_loss, seen_loss)
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, seen_grads))


def test_a_fault_while_reading_the_call_never_breaks_the_loss(tmp_path, hooks_clean,
                                                              monkeypatch, capsys):
    def broken(*args):
        raise RuntimeError("boom")
    monkeypatch.setattr(pairing, "read_call", broken)
    model, x = nn.Linear(FEATURES, 4), torch.randn(N, FEATURES)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(3):
            loss = F.cross_entropy(model(x), classes)
            with torch.no_grad():
                assert loss.item() == F.cross_entropy(model(x), classes).item()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert "loss-call observation switched off: RuntimeError: boom" in capsys.readouterr().err
    assert dbg.steps == 3


def test_the_functional_losses_are_restored_after_the_run(tmp_path, hooks_clean):
    before = {name: getattr(F, name) for name in pairing.LOSSES}
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        assert F.cross_entropy is not before["cross_entropy"]
    assert {name: getattr(F, name) for name in pairing.LOSSES} == before


def test_rows_read_stay_bounded_whatever_the_output_size():
    """The per-step reductions read at most ROWS rows, whatever the batch, the sequence or
    the image size."""
    for shape, class_dim in (((512, 10), 1), ((16, 1024, 50), 2), ((4, 21, 64, 64), 1),
                             ((10,), 0), ((300,), None), ((2, 3, 7, 5), 3)):
        rows = pairing.rows_of(torch.randn(shape), class_dim)
        units = 1 if class_dim is None else shape[class_dim]
        assert rows.dim() == 2 and rows.shape[1] == units and rows.shape[0] <= pairing.ROWS, \
            (shape, rows.shape)


def test_the_activation_is_read_through_reshapes():
    x = torch.randn(6, 3, requires_grad=True)
    assert pairing.activation_of(torch.softmax(x, 1).view(-1, 3).float()) == ("softmax", 3)
    assert pairing.activation_of(torch.sigmoid(x)[:, 0].unsqueeze(1)) == ("sigmoid", None)
    assert pairing.activation_of(torch.softmax(x[:, :1], dim=-1).squeeze(1)) == ("softmax", 1)
    assert pairing.activation_of(x @ x.T) == (None, None)
    assert pairing.activation_of(torch.sigmoid(x) * 2) == (None, None)


def test_torch_s_broadcast_warning_still_names_the_user_s_line(tmp_path, hooks_clean):
    """MSELoss of a (N, 1) output against (N,) targets: torch warns once (the default filter),
    naming the line that called the loss, as under plain python."""
    model, x, y = nn.Linear(FEATURES, 1), torch.randn(N, FEATURES), torch.randn(N)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            for _ in range(3):
                F.mse_loss(model(x), y).backward(); line = _line()  # noqa: E702 - one line
                opt.step()
    broadcast = [w for w in caught if "target size" in str(w.message)]
    assert len(broadcast) == 1, [str(w.message) for w in caught]
    assert (broadcast[0].filename, broadcast[0].lineno) == (__file__, line)


def _line() -> int:
    import inspect
    return inspect.currentframe().f_back.f_lineno


def test_the_distinct_classes_of_a_batch_leave_out_the_ignore_index():
    out = torch.randn(6, 5, requires_grad=True)
    call = pairing.read_call("cross_entropy", out, torch.tensor([0, 3, 3, -100, 4, 0]))
    found = dict(zip(call.names, (float(t) for t in call.tensors)))
    assert found["target_classes"] == 3 and (found["target_min"], found["target_max"]) == (-100, 4)
    assert call.units == 5 and call.rows == 6 and call.target == "index"


def test_the_loss_call_is_read_at_every_early_step_then_ever_more_rarely():
    """The pairing is the script's: after the first 20 steps one step in 10 is read, and half
    as often each time the run doubles past 200 steps (a long run reads a few dozen times per
    doubling, not once every 10 steps)."""
    from types import SimpleNamespace

    from neuraldbg_cli.thresholds import Thresholds

    clock, hooks = SimpleNamespace(step=0), SimpleNamespace(observing=True)
    calls = pairing.LossCalls(clock, hooks, Thresholds().output, lambda *a: None)
    calls.install()
    out, target = torch.randn(4, 3, requires_grad=True), torch.tensor([0, 1, 2, 0])
    read = []
    try:
        for step in range(1000):
            clock.step = step
            F.cross_entropy(out, target)
            if calls.take() is not None:
                read.append(step)
    finally:
        calls.remove()

    def between(lo, hi):
        return [s for s in read if lo <= s < hi]
    assert between(0, 20) == list(range(20))
    assert between(20, 200) == list(range(20, 200, 10))
    assert between(200, 400) == list(range(200, 400, 20))
    assert between(800, 1000) == [800, 880, 960]
    assert len(read) == 20 + 18 + 10 + 10 + 3
