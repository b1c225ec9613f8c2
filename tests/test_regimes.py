"""Classification rules on hand-made numbers: each state, per activation kind, and healthy cases."""
import math

from neuraldbg_cli.observe.detectors.activation import ActivationHistory, activation_state
from neuraldbg_cli.observe.detectors.base import Observation
from neuraldbg_cli.observe.detectors.gradient import GradientDetector, GradientHistory, gradient_state
from neuraldbg_cli.observe.kinds import OTHER, PARAM, RELU, SIGMOID, SMOOTH, TANH
from neuraldbg_cli.thresholds import Thresholds

TH = Thresholds()


def obs(kind, rms=1.0, **shares):
    """activation_state's arguments but the history: (kind, rms, shares)."""
    return kind, rms, shares


def judge(o, hist=None):
    kind, rms, shares = o
    return activation_state(kind, rms, hist or ActivationHistory(), TH, **shares)


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
    h = ActivationHistory()
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
    return gradient_state(norm, top, hist or GradientHistory(20), TH)[0]


def test_gradient_states():
    assert grad(0.5) == "healthy"
    assert grad(math.nan) == "nonfinite"
    assert grad(math.inf) == "nonfinite"
    assert grad(5e3, top=5e3) == "exploding"
    assert grad(0.0) == "vanishing"
    assert grad(1e-7, top=1.0) == "vanishing"
    assert grad(1e-3, top=1.0) == "healthy"
    # every layer's gradient exactly zero (a loss of exactly 0): nothing vanished on the way
    assert grad(0.0, top=0.0) == "healthy"


def test_the_exploding_ceiling_is_in_the_loss_s_scale():
    """Gradients scale with the loss: norms in the thousands are healthy for a loss in the
    hundreds of thousands (summed over a batch of pixels, or targets in the thousands), and
    still an explosion for a loss near 1 or unknown."""
    def judged(norm, loss):
        x = Observation(OTHER, grad_norm=norm, model_max_grad_norm=norm, loss=loss)
        return GradientDetector(TH).judge(x, GradientHistory(20))[0]
    assert judged(5.6e3, loss=7.0e4) == "healthy"
    assert judged(5.6e3, loss=2.3) == "exploding"
    assert judged(5.6e3, loss=0.01) == "exploding"      # (a loss under 1 counts as 1)
    assert judged(5.6e3, loss=None) == "exploding"
    assert judged(5.6e3, loss=math.inf) == "exploding"
    assert judged(1e9, loss=7.0e4) == "exploding"


def test_gradient_exploding_relative_to_own_history():
    h = GradientHistory(20)
    for _ in range(10):
        h.add_gradient(0.01)
    assert grad(5.0, top=5.0, hist=h) == "exploding"
    assert grad(0.05, top=0.05, hist=h) == "healthy"


def test_rolling_median_and_its_bounds_match_the_obvious_reference():
    import random
    from statistics import median

    from neuraldbg_cli.observe.rolling import RollingMedian

    rng = random.Random(0)
    for window in (7, 8):                               # odd and even windows
        rm, values, bounded = RollingMedian(window), [], 0
        for step in range(400):
            v = rng.choice([rng.random(), 0.5, 1.0, rng.random() * 10])     # duplicates too
            rm.append(v)
            values = (values + [v])[-window:]
            assert rm.size == len(values)
            b = rm.bounds()
            if b is not None:                           # the median lies within its bounds
                bounded += 1
                assert b[0] <= median(values) <= b[1]
            if step % 5 == 0:                           # sorted anew now and then only
                assert rm.median() == median(values)
        assert bounded > 200


def test_anomaly_decisions_equal_those_of_the_control_chart_written_out():
    """Every decision of the detector (judge, then remember) is the one the EWMA chart of
    thresholds.yaml gives, written out plainly here, at each step of a long noisy run with
    jumps, drifts and sparsity shifts."""
    import random

    an = TH.anomaly

    def chart(floor):
        return {"n": 0, "m": 0.0, "s": 0.0, "out": False, "floor": floor}

    def judged(c, v):           # (out of control?, the chart after v)
        sigma = max(c["s"] * math.sqrt(math.pi / 2), c["floor"])
        d = v - c["m"]
        out = c["n"] >= an.warmup and abs(d) > (an.exit if c["out"] else an.enter) * sigma
        c["n"] += 1
        if c["n"] == 1:
            c["m"] = v
            return out
        if c["n"] > an.warmup:
            c["out"] = out
            d = max(-an.clip * sigma, min(an.clip * sigma, d))
            w, ws = an.smoothing, an.scale_smoothing
        else:
            w, ws = max(an.smoothing, 1 / c["n"]), max(an.scale_smoothing, 1 / (c["n"] - 1))
        c["m"] += w * d
        c["s"] += ws * (abs(d) - c["s"])
        return out

    rng = random.Random(1)
    hist = ActivationHistory()
    rms_chart = chart(math.log(an.magnitude_factor) / an.enter)
    sparsity_chart = chart(an.sparsity_jump / an.enter)
    level, decided = 0.0, {"anomalous": 0, "normal": 0}
    for step in range(3000):
        if rng.random() < 0.02:
            level += rng.choice([-3.0, 3.0, 1.5, -1.5])          # jumps, some past the limits
        rms = math.exp(level + step * 1e-3 + rng.gauss(0, 0.3))
        inactive = min(0.85, max(0.0, 0.3 + rng.gauss(0, 0.05) + (0.6 if rng.random() < 0.02 else 0)))
        state, extra = activation_state(RELU, rms, hist, TH, inactive=inactive)
        rms_out = judged(rms_chart, math.log(rms + 1e-30))
        sparsity_out = judged(sparsity_chart, inactive)
        assert state == ("anomalous" if rms_out or sparsity_out else "normal"), step
        if rms_out:
            assert abs(extra["rms_sigmas"]) > an.exit and extra["rms_ratio"] > 0, (step, extra)
        elif sparsity_out:
            assert abs(extra["sparsity_shift"]) > an.exit * sparsity_chart["floor"], (step, extra)
        decided[state] += 1
        hist.add_activation(rms, inactive)
    assert decided["anomalous"] > 20 and decided["normal"] > 2000, decided


def test_gradient_decisions_equal_those_taken_with_the_exact_median():
    import random
    from statistics import median

    rng = random.Random(2)
    hist, norms, level, exploded = GradientHistory(20), [], 0.0, 0
    for step in range(3000):
        if rng.random() < 0.02:
            level += rng.choice([-5.0, 5.0, 2.0, -2.0])
        norm = min(math.exp(level + rng.gauss(0, 0.5)), 500.0)
        state = gradient_state(norm, norm, hist, TH)[0]
        expected = "healthy" if norm > TH.gradient.vanishing_norm else "vanishing"
        if len(norms) >= TH.anomaly.warmup:
            base = max(median(norms[-20:]), median(norms[:20]))
            if norm > TH.gradient.exploding_factor * base:
                expected = "exploding"
        assert state == expected, step
        exploded += state == "exploding"
        hist.add_gradient(norm)
        norms.append(norm)
    assert exploded > 10


def test_a_tiny_gradient_growing_far_below_the_largest_is_no_explosion():
    """An attention query's gradient is ~1e-5 of the model's largest until attention starts
    to be used, then jumps x380 its median to 1% of the largest (a healthy BERT run): not an
    explosion. The same jump in a layer carrying the model's largest gradient is."""
    hist = GradientHistory(20)
    for _ in range(20):
        hist.add_gradient(4.5e-5)
    assert gradient_state(0.0171, 1.835, hist, TH)[0] == "healthy"
    assert gradient_state(0.0171, 0.0171, hist, TH)[0] == "exploding"
