"""On-device reductions checked against slow, obvious references on hand-made tensors."""
import math

import pytest
import torch
from torch import nn

from neuraldbg_cli.regimes import OTHER, PARAM, RELU, SIGMOID, SMOOTH, TANH
from neuraldbg_cli.stats import Accumulator, first_tensor, gather, kind_of, unit_dims

MIN_GRADS = {SIGMOID: 0.05, TANH: 0.05}


def run(accs, kinds, tail=0.0, extra=None):
    """gather, re-keyed for the asserts: ("norm", i), ("units", i), ("inputs", i), ("sat", i)."""
    numbers, rest = gather(accs, kinds, tail, MIN_GRADS, extra or [])
    out = {"extra": rest}
    for i, (norms, units, inputs, sat) in enumerate(numbers):
        out[("norm", i)] = norms
        for key, v in (("units", units), ("inputs", inputs), ("sat", sat)):
            if v is not None:
                out[(key, i)] = v
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
    a, b = Accumulator(), Accumulator()
    a.add_output(y, RELU, False)
    b.add_output(conv, RELU, True)
    v = run([a, b], [RELU, RELU])
    assert v[("units", 0)] == dead_units_reference(y, 1) == 7
    assert v[("units", 1)] == dead_units_reference(conv, 1) == 1
    assert v[("norm", 0)][0] == pytest.approx(float(y.norm()), rel=1e-5)


def test_sequence_units_are_the_last_dim():
    y = torch.relu(torch.randn(2, 5, 8))
    y[..., :3] = 0
    acc = Accumulator()
    acc.add_output(y, RELU, False)
    assert acc.units.shape == (8,)
    assert run([acc], [RELU])[("units", 0)] == 3


def test_accumulation_over_calls_needs_a_unit_dead_in_every_call():
    a = Accumulator()
    y1 = torch.zeros(4, 3)
    y1[:, 0] = 1.0
    y2 = torch.zeros(4, 3)
    y2[:, 1] = 1.0
    a.add_output(y1, RELU, False)
    a.add_output(y2, RELU, False)
    v = run([a], [RELU])
    assert v[("units", 0)] == 1            # only unit 2 was zero in both calls
    assert len(v[("norm", 0)]) == 2 and a.numel == 24


def test_smooth_tail_and_saturation_of_squashing_kinds():
    g = nn.functional.gelu(torch.cat([torch.full((16, 9), -6.0), torch.randn(16, 1) + 3], 1))
    s = torch.sigmoid(torch.cat([torch.full((16, 8), 12.0), torch.randn(16, 2) * 0.1], 1))
    t = torch.tanh(torch.cat([torch.full((16, 3), -9.0), torch.randn(16, 7) * 0.1], 1))
    accs = [Accumulator(), Accumulator(), Accumulator()]
    for acc, y, k in zip(accs, (g, s, t), (SMOOTH, SIGMOID, TANH)):
        acc.add_output(y, k, False)
    v = run(accs, [SMOOTH, SIGMOID, TANH])
    assert v[("units", 0)] == 9
    # the tail is a threshold: units whose maximum stays at or below it count as inactive
    assert run(accs[:1], [SMOOTH], tail=-1.0)[("units", 0)] == 0
    assert run(accs[:1], [SMOOTH], tail=100.0)[("units", 0)] == 10
    assert v[("sat", 1)] == 8
    assert v[("sat", 2)] == 3
    # reference: tanh mean derivative per unit
    deriv = (1 - t * t).mean(0)
    assert int((deriv < 0.05).sum()) == 3


def test_input_dead_units_of_linear():
    x = torch.relu(torch.randn(8, 20))
    x[:, :19] = 0
    acc = Accumulator()
    acc.add_output(torch.randn(8, 4), PARAM, False)
    acc.add_input(x, False)
    assert run([acc], [PARAM])[("inputs", 0)] == 19


def test_nonfinite_propagates_through_the_norm():
    y = torch.randn(8, 4)
    y[3, 2] = float("nan")
    acc = Accumulator()
    acc.add_output(y, OTHER, False)
    assert math.isnan(run([acc], [OTHER])[("norm", 0)][0])


def test_half_precision_is_reduced_in_float32():
    y = torch.full((64, 64), 300.0, dtype=torch.float16)   # sum of squares overflows fp16
    acc = Accumulator()
    acc.add_output(y, OTHER, False)
    assert run([acc], [OTHER])[("norm", 0)][0] == pytest.approx(300.0 * 64)


def test_extra_tensors_ride_along_in_the_same_read():
    acc = Accumulator()
    acc.add_output(torch.ones(2, 2), OTHER, False)
    v = run([acc], [OTHER], extra=[torch.tensor(1.0), torch.tensor(2.0)])
    assert v["extra"] == [1.0, 2.0]


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
    now, later = Accumulator(), Accumulator()
    now.add_output(y, PARAM, False)
    later.add_output(y, PARAM, False, defer=True)
    assert later.watch and not now.watch
    grad = torch.randn(16, 4)
    a, b = run([now], [PARAM], extra=[torch.linalg.vector_norm(grad)]), run([later], [PARAM], extra=[grad])
    assert a[("norm", 0)] == pytest.approx(b[("norm", 0)]) and a["extra"] == pytest.approx(b["extra"])


def test_output_changed_in_place_before_the_step_end_stops_deferral():
    y = torch.randn(8, 16)
    acc = Accumulator()
    acc.add_output(y, PARAM, False, defer=True)
    y.relu_()                              # e.g. nn.ReLU(inplace=True) after this layer
    run([acc], [PARAM])
    assert acc.defer_ok is False
    acc.reset()
    acc.add_output(torch.randn(8, 16), PARAM, False, defer=True)
    assert acc.watch == [] and acc.norms[0].dim() == 0, "normed at once from then on"


def test_dead_units_of_a_wide_half_precision_layer_are_counted_exactly():
    torch.manual_seed(0)
    y = (torch.rand(4, 3002) + 0.1).half()     # 3002 units, all active ...
    y[:, 7] = 0                                 # ... but one: 3001 is not a float16 number
    acc = Accumulator()
    acc.add_output(y, RELU, False)
    assert run([acc], [RELU])[("units", 0)] == 1
