"""Classification rules on hand-made numbers: each state, per activation kind, and healthy cases."""
import math

from neuraldbg_cli.regimes import (OTHER, PARAM, RELU, SIGMOID, SMOOTH, TANH, History,
                                   activation_state, gradient_state)
from neuraldbg_cli.thresholds import Thresholds

TH = Thresholds()


def obs(kind, rms=1.0, **shares):
    """activation_state's arguments but the history: (kind, rms, shares)."""
    return kind, rms, shares


def judge(o, hist=None):
    kind, rms, shares = o
    return activation_state(kind, rms, hist or History(20), TH, **shares)


def state(o, hist=None):
    return judge(o, hist)[0]


def test_relu_dead_only_above_threshold():
    assert state(obs(RELU, inactive=0.95)) == "dead"
    assert state(obs(RELU, inactive=0.9)) == "dead"
    assert state(obs(RELU, inactive=0.5)) == "normal"


def test_dead_ratio_means_nothing_for_other_kinds():
    # LeakyReLU/ELU/GELU are not "dead" for negative outputs: only ReLU kinds die.
    assert state(obs(OTHER, inactive=1.0)) == "normal"
    assert state(obs(SMOOTH, inactive=0.5)) == "normal"
    assert state(obs(OTHER, saturated=1.0)) == "normal"


def test_functional_relu_input_dead():
    s, extra = judge(obs(PARAM, input_dead=1.0))
    assert s == "dead" and extra == {"observed": "input"}
    assert state(obs(PARAM, input_dead=0.3)) == "normal"


def test_saturation_per_kind():
    assert state(obs(SIGMOID, saturated=0.8)) == "saturated"
    assert state(obs(TANH, saturated=0.75)) == "saturated"
    assert state(obs(TANH, saturated=0.2)) == "normal"
    assert state(obs(SMOOTH, inactive=0.95)) == "saturated"     # stuck in the flat tail


def test_nonfinite_wins():
    assert state(obs(RELU, rms=math.nan, inactive=1.0)) == "nonfinite"
    assert state(obs(OTHER, rms=math.inf)) == "nonfinite"


def _hist(values, sparsity=None):
    h = History(20)
    for v in values:
        h.add_activation(v, sparsity)
    return h


def test_anomaly_needs_warmup_then_flags_a_jump():
    assert state(obs(OTHER, rms=100.0), _hist([1.0] * 3)) == "normal"
    s, extra = judge(obs(OTHER, rms=100.0), _hist([1.0] * 10))
    assert s == "anomalous" and extra["rms_ratio"] > 50


def test_anomaly_is_relative_to_the_layer_itself():
    # A layer with a large but steady scale, or one wandering by 2x (BatchNorm, Dropout), is normal.
    assert state(obs(OTHER, rms=1000.0), _hist([900.0, 1100.0] * 6)) == "normal"
    assert state(obs(OTHER, rms=2.0), _hist([1.0, 1.5, 0.8] * 4)) == "normal"


def test_anomaly_on_sparsity_shift():
    h = _hist([1.0] * 10, sparsity=0.1)
    assert state(obs(RELU, rms=1.0, inactive=0.7), h) == "anomalous"
    assert state(obs(RELU, rms=1.0, inactive=0.2), h) == "normal"


def grad(norm, top=1.0, hist=None):
    return gradient_state(norm, top, hist or History(20), TH)[0]


def test_gradient_states():
    assert grad(0.5) == "healthy"
    assert grad(math.nan) == "nonfinite"
    assert grad(math.inf) == "nonfinite"
    assert grad(5e3, top=5e3) == "exploding"
    assert grad(0.0) == "vanishing"
    assert grad(1e-7, top=1.0) == "vanishing"
    assert grad(1e-3, top=1.0) == "healthy"


def test_gradient_exploding_relative_to_own_history():
    h = History(20)
    for _ in range(10):
        h.add_gradient(0.01)
    assert grad(5.0, top=5.0, hist=h) == "exploding"
    assert grad(0.05, top=0.05, hist=h) == "healthy"


def test_rolling_median_matches_the_obvious_reference():
    import random
    from statistics import median

    from neuraldbg_cli.regimes import RollingMedian

    rng = random.Random(0)
    rm, window = RollingMedian(7), []
    for _ in range(200):
        v = rng.choice([rng.random(), 0.5, 1.0])       # duplicates too
        rm.append(v)
        window = (window + [v])[-7:]
        assert rm.size == len(window)
        assert rm.median == median(window)
