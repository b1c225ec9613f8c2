"""Units that are copies of one another (update `symmetric`): weights initialised to zeros or
a constant on both sides of a layer give its units equal gradients for ever. Flagged at the
layers whose units are copies, at the first reading (the 5th step), cause initialization;
never where random weights around a zero-initialised layer break the tie at the first step."""
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.explain.analysis import analyze
from neuraldbg_cli.observe.symmetry import due
from neuraldbg_cli.trace import read_trace


def _classify(model, steps, lr=0.5, shape=(20,), schedule=None, before_step=None):
    """Cross-entropy on a learnable 5-class problem, SGD at `lr` (times `schedule(step)`);
    `before_step(step)` runs at the start of each step."""
    torch.manual_seed(1)
    x = torch.randn(256, *shape)
    y = (x.flatten(1) @ torch.randn(x[0].numel(), 5)).argmax(1)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)
    for step in range(steps):
        if before_step is not None:
            before_step(step)
        if schedule is not None:
            for group in opt.param_groups:
                group["lr"] = lr * schedule(step)
        idx = torch.randint(0, 256, (32,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()


def _run(tmp_path, model, steps=12, every=1, **kw):
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(trace=str(trace), every=every) as dbg:
        _classify(model, steps, **kw)
    found = [t for t in dbg.transitions if t["to"] == "symmetric"]
    return found, dbg, trace


def _mlp(act=nn.Sigmoid):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), act(), nn.Linear(64, 64), act(), nn.Linear(64, 5))


def test_readings_are_taken_at_the_5th_observed_step_and_every_100_after():
    assert [n for n in range(1, 320) if due(n, 5, 100)] == [5, 105, 205, 305]


@pytest.mark.parametrize("init,every", [("zeros", 1), ("constant", 1), ("zeros", 2)])
def test_a_model_initialised_to_zeros_or_a_constant_has_units_that_are_copies(tmp_path, hooks_clean,
                                                                               init, every):
    """The classic mistake: every weight 0 (or 0.05). The hidden layers' units get equal
    gradients and stay copies; the head's rows (one per class) do not. Read at the 5th
    observed step: step 4, or step 8 when every 2nd step is observed."""
    model = _mlp()
    for p in model.parameters():
        nn.init.zeros_(p) if init == "zeros" else nn.init.constant_(p, 0.05)
    found, dbg, trace = _run(tmp_path, model, every=every)
    assert {t["layer"] for t in found} == {"0", "2"}, dbg.transitions
    assert all(t["step"] == 4 * every and t["stats"]["spread"] <= 1e-4 for t in found), found
    assert {t["layer"] for t in dbg.failures() if t["to"] == "symmetric"} == {"0", "2"}
    top = analyze([read_trace(trace)]).hypotheses[0]
    assert (top.symptom, top.cause) == ("symmetric", "initialization"), top
    assert "copies" in top.summary and "zeros" in top.fix


@pytest.mark.parametrize("apart,fails", [(2e-3, True), (0.3, False)])
def test_copies_that_rounding_sets_apart_before_the_end_are_a_blip(tmp_path, hooks_clean, apart,
                                                                    fails):
    """Rounding sets copies apart in time (a sigmoid MLP of 100 units so initialised learns
    after a few hundred steps): they stay copies until 100x further apart than it takes to be
    read as copies, and fail the run only if they still are when it ends. Here the weights
    are set apart by hand at step 50, by 2e-3 (still copies at the reading of step 104) or
    by 0.3 (a blip from step 4 to 104) of their largest magnitude."""
    model = _mlp()
    for p in model.parameters():
        nn.init.zeros_(p)

    def set_apart(step):
        if step == 50:
            with torch.no_grad():
                for layer in (model[0], model[2]):
                    w = layer.weight
                    w.add_(apart * w.abs().max() * torch.rand_like(w))
    found, dbg, _ = _run(tmp_path, model, steps=110, before_step=set_apart)
    assert {(t["layer"], t["step"]) for t in found} == {("0", 4), ("2", 4)}, dbg.transitions
    back = {t["layer"] for t in dbg.transitions if t["from"] == "symmetric"}
    assert back == (set() if fails else {"0", "2"}), dbg.transitions
    copies = {t["layer"] for t in dbg.failures() if t["to"] == "symmetric"}
    assert copies == ({"0", "2"} if fails else set()), dbg.failures()


@pytest.mark.parametrize("transposed", [False, True])
def test_conv_channels_initialised_to_a_constant_are_copies(tmp_path, hooks_clean, transposed):
    """Output channels are the units: a conv's weight rows, a transposed conv's columns (its
    weight is (in, out, k, k): here (1, 6, 3, 3), one row)."""
    torch.manual_seed(0)
    if transposed:
        model = nn.Sequential(nn.ConvTranspose2d(1, 6, 3, padding=1), nn.Tanh(), nn.Flatten(),
                              nn.Linear(6 * 6 * 6, 5))
        convs, shape, expected = [model[0]], (1, 6, 6), {"0"}
    else:
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Tanh(),
                              nn.Conv2d(8, 8, 3, padding=1), nn.Tanh(), nn.Flatten(),
                              nn.Linear(8 * 6 * 6, 5))
        convs, shape, expected = [model[0], model[2]], (3, 6, 6), {"0", "2"}
    for m in convs:
        nn.init.constant_(m.weight, 0.02)
        nn.init.zeros_(m.bias)
    nn.init.zeros_(model[-1].weight)
    found, dbg, _ = _run(tmp_path, model, lr=0.1, shape=shape)
    assert {t["layer"] for t in found} == expected, dbg.transitions


class _LoRA(nn.Module):
    """A frozen random layer plus B @ A, B initialised to zero (as LoRA does)."""
    def __init__(self, base: nn.Linear, r=4):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.A = nn.Linear(base.in_features, r, bias=False)
        self.B = nn.Linear(r, base.out_features, bias=False)
        nn.init.zeros_(self.B.weight)

    def forward(self, x):
        return self.base(x) + self.B(self.A(x))


def _zero_hidden_random_head():
    model = _mlp()                  # (data_mnist_zero_init's fix: W zero, W2 random)
    nn.init.zeros_(model[0].weight)
    nn.init.zeros_(model[0].bias)
    return model


def _zero_head():
    model = _mlp(nn.ReLU)           # (a classifier head initialised to zero, as timm's ViT's)
    nn.init.zeros_(model[4].weight)
    return model


def _lora():
    torch.manual_seed(0)
    return nn.Sequential(_LoRA(nn.Linear(20, 64)), nn.GELU(), _LoRA(nn.Linear(64, 5)))


def _fixed_blur():
    """A frozen conv whose every channel has the same kernel (a blur), trained layers after."""
    torch.manual_seed(0)
    blur = nn.Conv2d(3, 3, 3, padding=1, groups=3, bias=False)
    nn.init.constant_(blur.weight, 1 / 9)
    blur.requires_grad_(False)
    return nn.Sequential(blur, nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 6 * 6, 5))


def _zero_branch_end():
    """A residual block whose branch ends in a zero-initialised conv (zero_init_residual)."""
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(3, 3, 3, padding=1), nn.Conv2d(3, 3, 3, padding=1)
            nn.init.zeros_(self.conv2.weight)

        def forward(self, x):
            return x + self.conv2(F.relu(self.conv1(x)))
    torch.manual_seed(0)
    return nn.Sequential(Block(), nn.Flatten(), nn.Linear(3 * 6 * 6, 5))


@pytest.mark.parametrize("make", [_zero_hidden_random_head, _zero_head, _lora, _fixed_blur,
                                  _zero_branch_end])
def test_zero_or_constant_weights_beside_random_ones_are_not_copies(tmp_path, hooks_clean, make):
    shape = (3, 6, 6) if make in (_fixed_blur, _zero_branch_end) else (20,)
    found, dbg, _ = _run(tmp_path, make(), steps=110, lr=0.1, shape=shape)
    assert found == [], found
    assert dbg.failures() == [], dbg.failures()


def test_equal_weights_not_moved_yet_by_a_warm_up_from_0_are_not_copies(tmp_path, hooks_clean):
    """A hidden layer set to a constant, a random head: at the first reading a warm-up has
    kept the rate at 0, so the rows are still the initial ones; once trained, the head has
    told them apart."""
    model = _mlp(nn.ReLU)
    nn.init.constant_(model[0].weight, 0.05)
    found, dbg, _ = _run(tmp_path, model, steps=110, lr=0.1,
                         schedule=lambda step: 0.0 if step < 8 else 1.0)
    assert found == [], dbg.transitions
