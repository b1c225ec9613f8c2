"""On-device reductions checked against slow, obvious references on hand-made tensors."""
import math

import pytest
import torch
from torch import nn

from neuraldbg_cli.observe.accumulator import Accumulator, first_tensor, unit_dims
from neuraldbg_cli.observe.kinds import OTHER, PARAM, RELU, SIGMOID, SMOOTH, TANH, kind_of
from neuraldbg_cli.observe.stats import LayerNumbers, gather

MIN_GRADS = {SIGMOID: 0.05, TANH: 0.05}


def run(accs, tail=0.0, grads=(), grad_norms=()):
    """gather, re-keyed for the asserts: ("norm", i), ("units", i), ("inputs", i), ("sat", i)
    (shares of units turned back into counts), "grads", "grad_norms"."""
    numbers, normed, read = gather(accs, tail, MIN_GRADS, list(grads), list(grad_norms))
    out = {"grads": normed, "grad_norms": read}
    for i, (acc, n) in enumerate(zip(accs, numbers)):
        assert isinstance(n, LayerNumbers) and n.numel == acc.numel
        out[("norm", i)] = n.norm
        for key, v, vec in (("units", n.inactive, acc.units), ("inputs", n.input_dead, acc.inputs),
                            ("sat", n.saturated, acc.usum)):
            if v is not None:
                out[(key, i)] = round(v * vec.numel())
    return out


def dead_units_reference(y, unit_dim):
    moved = y.movedim(unit_dim, -1).reshape(-1, y.shape[unit_dim])
    return int((moved == 0).all(dim=0).sum())


def test_relu_dead_units_features_and_channels():
    torch.manual_seed(0)
    y = torch.relu(torch.randn(32, 10))
    y[:, :7] = 0
    conv = torch.relu(torch.randn(4, 6, 5, 5))
    conv[:, 2] = 0
    a, b = Accumulator(RELU), Accumulator(RELU, channel_first=True)
    a.add_output(y)
    b.add_output(conv)
    v = run([a, b])
    assert v[("units", 0)] == dead_units_reference(y, 1) == 7
    assert v[("units", 1)] == dead_units_reference(conv, 1) == 1
    assert v[("norm", 0)] == pytest.approx(float(y.norm()), rel=1e-5)


def test_conv_maps_are_read_in_one_pass_with_the_same_numbers():
    """A ReLU conv map's dead channels and norm, and a conv input's dead channels, come from
    per-channel norms (one pass): the same numbers as the per-channel max and the norm, in
    every layout; NaN is neither dead nor lost."""
    torch.manual_seed(1)
    for shape in ((16, 8, 12, 12), (16, 8, 40), (4, 8, 3, 5, 5)):
        y = torch.relu(torch.randn(*shape))
        y[:, 3] = 0
        y[:, 5] = 1e-20          # tiny but alive: not dead
        for layout in (y, y.contiguous(memory_format=torch.channels_last) if y.dim() == 4 else y):
            acc = Accumulator(RELU, channel_first=True)
            acc.add_output(layout)
            v = run([acc])
            assert v[("units", 0)] == dead_units_reference(y, 1) == 1
            assert v[("norm", 0)] == pytest.approx(float(y.norm()), rel=1e-5)
        x = torch.randn(*shape)
        x[:, [0, 6]] = 0
        conv = Accumulator(PARAM, channel_first=True)
        conv.add_output(torch.randn(2, 2))
        conv.add_input(x)
        assert run([conv])[("inputs", 0)] == 2
    y = torch.relu(torch.randn(16, 8, 12, 12))
    y[:, 2] = 0
    y[0, 4, 0, 0] = float("nan")
    acc = Accumulator(RELU, channel_first=True)
    acc.add_output(y)
    v = run([acc])
    assert math.isnan(v[("norm", 0)]) and v[("units", 0)] == 1


def test_sequence_units_are_the_last_dim():
    y = torch.relu(torch.randn(2, 5, 8))
    y[..., :3] = 0
    acc = Accumulator(RELU)
    acc.add_output(y)
    assert acc.units.shape == (8,)
    assert run([acc])[("units", 0)] == 3


def test_accumulation_over_calls_needs_a_unit_dead_in_every_call():
    y1 = torch.zeros(4, 3)
    y1[:, 0] = 1.0
    y2 = torch.zeros(4, 3)
    y2[:, 1] = 2.0
    for defer in (False, True):             # reduced at once, or held for the step end
        a = Accumulator(RELU)
        a.add_output(y1, defer)
        a.add_output(y2, defer)
        v = run([a])
        assert v[("units", 0)] == 1            # only unit 2 was zero in both calls
        assert v[("norm", 0)] == pytest.approx(math.hypot(2.0, 4.0)) and a.numel == 24


def test_smooth_tail_and_saturation_of_squashing_kinds():
    g = nn.functional.gelu(torch.cat([torch.full((16, 9), -6.0), torch.randn(16, 1) + 3], 1))
    s = torch.sigmoid(torch.cat([torch.full((16, 8), 12.0), torch.randn(16, 2) * 0.1], 1))
    t = torch.tanh(torch.cat([torch.full((16, 3), -9.0), torch.randn(16, 7) * 0.1], 1))
    accs = [Accumulator(SMOOTH), Accumulator(SIGMOID), Accumulator(TANH)]
    for acc, y in zip(accs, (g, s, t)):
        acc.add_output(y)
    v = run(accs)
    assert v[("units", 0)] == 9
    # the tail is a threshold: units whose maximum stays at or below it count as inactive
    assert run(accs[:1], tail=-1.0)[("units", 0)] == 0
    assert run(accs[:1], tail=100.0)[("units", 0)] == 10
    assert v[("sat", 1)] == 8
    assert v[("sat", 2)] == 3
    # reference: tanh mean derivative per unit
    deriv = (1 - t * t).mean(0)
    assert int((deriv < 0.05).sum()) == 3


def test_smooth_tails_of_several_layers_in_one_step():
    """Several smooth layers in one step, held and reduced at once, with a ReLU between:
    each counts its own units in the flat tail, and reading the step leaves the maxima kept
    for a later read as they were."""
    def gelu_with(dead: int, width: int = 12):
        x = torch.randn(16, width) + 3
        x[:, :dead] = -2.0      # (gelu: -0.045, below a tail of 0)
        return nn.functional.gelu(x)
    relu = torch.relu(torch.randn(16, 5))
    relu[:, :2] = 0
    accs = [Accumulator(SMOOTH), Accumulator(RELU), Accumulator(SMOOTH), Accumulator(SMOOTH)]
    for acc, y, defer in zip(accs, (gelu_with(3), relu, gelu_with(7), gelu_with(0)),
                             (False, False, True, False)):
        acc.add_output(y, defer)
    kept = accs[0].units.clone()
    for tail in (0.0, 0.01):
        v = run(accs, tail=tail)
        assert [v[("units", i)] for i in range(4)] == [3, 2, 7, 0]
    assert run(accs[:1], tail=-1.0)[("units", 0)] == 0
    assert torch.equal(accs[0].units, kept)


def test_input_dead_units_of_linear():
    x = torch.relu(torch.randn(8, 20))
    x[:, :19] = 0
    acc = Accumulator(PARAM)
    acc.add_output(torch.randn(8, 4))
    acc.add_input(x)
    assert run([acc])[("inputs", 0)] == 19


def test_nonfinite_propagates_through_the_norm():
    y = torch.randn(8, 4)
    y[3, 2] = float("nan")
    for defer in (False, True):
        acc = Accumulator(OTHER)
        acc.add_output(y, defer)
        assert math.isnan(run([acc])[("norm", 0)])


def test_half_precision_is_reduced_in_float32():
    y = torch.full((64, 64), 300.0, dtype=torch.float16)   # sum of squares overflows fp16
    acc = Accumulator(OTHER)
    acc.add_output(y, defer=True)
    assert not acc.held, "half precision is reduced at once, into float32"
    assert run([acc])[("norm", 0)] == pytest.approx(300.0 * 64)


def test_gradients_ride_along_in_the_same_read():
    acc = Accumulator(OTHER)
    acc.add_output(torch.ones(2, 2), defer=True)
    grads = [torch.full((3, 4), 2.0), torch.tensor(-3.0)]       # a scalar parameter's, negative
    v = run([acc], grads=grads, grad_norms=[torch.tensor(1.5)])
    assert v["grads"] == pytest.approx([2.0 * math.sqrt(12), 3.0]) and v["grad_norms"] == [1.5]
    assert v[("norm", 0)] == pytest.approx(2.0)


def test_a_scalar_output_is_normed_not_read_as_it_is():
    """A module returning a 0-d tensor (a custom penalty, x.mean()): its norm is |x|."""
    for defer in (False, True):
        acc = Accumulator(OTHER)
        acc.add_output(torch.tensor(-4.0), defer)
        assert run([acc])[("norm", 0)] == 4.0


def test_kinds_units_and_outputs():
    assert kind_of(nn.ReLU()) == RELU and kind_of(nn.SiLU()) == SMOOTH
    assert kind_of(nn.LeakyReLU()) == OTHER and kind_of(nn.Conv2d(1, 1, 1)) == PARAM
    assert unit_dims(torch.zeros(3), False) is None
    assert unit_dims(torch.zeros(2, 3, 4), True) == (0, 2)
    t = torch.ones(2)
    assert first_tensor((None, torch.ones(2, dtype=torch.long), t)) is t
    assert first_tensor({"logits": t}) is t
    assert first_tensor(torch.empty(0)) is None
    assert first_tensor(None) is None


def test_small_outputs_normed_at_step_end_equal_immediate_norms():
    torch.manual_seed(0)
    y = torch.randn(8, 16)
    now, later = Accumulator(RELU), Accumulator(RELU)
    now.add_output(y)
    later.add_output(y, defer=True)
    assert later.held and not now.held and later.units is None
    grad = torch.randn(16, 4)
    a, b = run([now], grad_norms=[torch.linalg.vector_norm(grad)]), run([later], grads=[grad])
    assert a[("norm", 0)] == pytest.approx(b[("norm", 0)]) and a["grad_norms"] == pytest.approx(b["grads"])
    assert a[("units", 0)] == b[("units", 0)]


def test_a_held_output_keeps_no_graph_alive_and_adds_nothing_to_it():
    """Held until the step end, an output must not keep its autograd graph (and the
    activations saved there) alive: a forward without a backward would pin them."""
    y = torch.randn(8, 16, requires_grad=True) * 1.0
    acc = Accumulator(RELU)
    acc.add_output(y, defer=True)
    held = acc.held[0][0]
    assert held.grad_fn is None and not held.requires_grad
    run([acc])
    assert acc.units is not None and acc.units.grad_fn is None and not acc.units.requires_grad


def test_output_changed_in_place_before_the_step_end_stops_deferral():
    y = torch.randn(8, 16)
    acc = Accumulator(PARAM)
    acc.add_output(y, defer=True)
    y.relu_()                              # e.g. nn.ReLU(inplace=True) after this layer
    run([acc])
    assert acc.defer_ok is False
    acc.reset()
    acc.add_output(torch.randn(8, 16), defer=True)
    assert acc.held == [] and acc.norms[0].dim() == 0, "normed at once from then on"


def test_dead_units_of_a_wide_half_precision_layer_are_counted_exactly():
    torch.manual_seed(0)
    y = (torch.rand(4, 3002) + 0.1).half()     # 3002 units, all active ...
    y[:, 7] = 0                                 # ... but one: 3001 is not a float16 number
    acc = Accumulator(RELU)
    acc.add_output(y)
    assert run([acc])[("units", 0)] == 1
