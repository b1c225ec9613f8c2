"""The activation anomaly detector's control charts (observe/control.py), on hand-made numbers:
an abrupt shift is caught at its step, a trend, noise and a steady layer's small change are
not, hysteresis holds a state until the evidence to leave it, and a lasting new level is
learnt. Each run goes through the detector (judge, then remember) and the state machine."""
import math
import random

import pytest

from neuraldbg_cli.errors import InputError
from neuraldbg_cli.explain.evidence import _STATS
from neuraldbg_cli.observe.control import ControlChart
from neuraldbg_cli.observe.detectors.activation import ActivationDetector, ActivationHistory, chart_limits
from neuraldbg_cli.observe.detectors.base import Observation
from neuraldbg_cli.observe.kinds import OTHER, RELU
from neuraldbg_cli.observe.tracker import SignalTracker
from neuraldbg_cli.thresholds import AnomalyThresholds, Thresholds, from_mapping

TH = Thresholds()
AN = TH.anomaly
MAX_CHANGES = 8     # as conftest: state changes of a layer and signal in one run


def monitored(rms_values, inactive=None, kind=OTHER):
    """(the state judged at each step, the confirmed transitions): one layer whose output
    has these rms values (and inactive shares), judged then remembered as at each step end."""
    detector, hist = ActivationDetector(TH), ActivationHistory(chart_limits(AN))
    tracker = SignalTracker(TH.debounce_steps, growth=TH.recovery_growth)
    judged, confirmed = [], []
    for step, rms in enumerate(rms_values):
        x = Observation(kind, rms, None if inactive is None else inactive[step])
        state, extra = detector.judge(x, hist)
        detector.remember(x, hist)
        judged.append(state)
        t = tracker.update(step, state, detector.evidence(x, extra))
        if t is not None:
            confirmed.append(t)
    return judged, confirmed


def anomalous_steps(judged) -> list:
    return [step for step, state in enumerate(judged) if state == "anomalous"]


def noisy(level: float, n: int, sd: float = 0.05, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [level * math.exp(rng.gauss(0, sd)) for _ in range(n)]


@pytest.mark.parametrize("factor", [10.0, 0.1], ids=["up", "down"])
def test_an_abrupt_shift_of_rms_is_caught_at_the_step_it_happens(factor):
    values = noisy(1.0, 40) + noisy(factor, 200, seed=1)
    judged, confirmed = monitored(values)
    assert anomalous_steps(judged)[0] == 40
    shift = [t for t in confirmed if t.state == "anomalous"]
    assert [t.step for t in shift] == [40], confirmed            # dated at its onset
    stats = shift[0].stats
    assert stats["rms_ratio"] == pytest.approx(factor, rel=0.2)  # rms / its expected level
    assert stats["rms_expected"] == pytest.approx(1.0, rel=0.1)
    assert abs(stats["rms_sigmas"]) > AN.enter
    # the lasting new level is learnt: back in control within a few dozen steps, for good
    assert [t.state for t in confirmed] == ["normal", "anomalous", "normal"], confirmed
    assert confirmed[-1].step < 40 + 40


def test_a_slow_steady_trend_never_alarms():
    for rate in (1.01, 0.99):                                   # 1% a step, up or down
        assert not anomalous_steps(monitored([rate ** i for i in range(500)])[0])
        noisy_trend = [r * rate ** i for i, r in enumerate(noisy(1.0, 500, sd=0.1))]
        assert not anomalous_steps(monitored(noisy_trend)[0])


@pytest.mark.parametrize("sd", [0.1, 0.5], ids=["below-floor", "own-sigma"])
def test_gaussian_noise_never_alarms(sd):
    """log rms ~ N(0, sd) for 20k steps: 0.1 (rms within ~±30%) is below the chart's floor,
    0.5 (rms x/÷ 1.65 at one sigma) is judged on the chart's own estimate of sigma."""
    judged, confirmed = monitored(noisy(1.0, 20_000, sd=sd, seed=2))
    assert not anomalous_steps(judged)
    assert [t.state for t in confirmed] == ["normal"]


def test_a_steady_batchnorm_layer_does_not_alarm_on_a_5_percent_change():
    """A perfectly steady rms (after BatchNorm or LayerNorm) has no scatter to speak of: the
    floor keeps the least shift that alarms at magnitude_factor (x3), not 5%."""
    steady = [1.0] * 100
    for change in (1.05, 0.95, 2.0, 0.5):
        assert not anomalous_steps(monitored(steady + [change] + steady)[0]), change
        assert not anomalous_steps(monitored(steady + [change] * 100)[0]), change
    for change in (3.5, 1 / 3.5):
        assert anomalous_steps(monitored(steady + [change] * 100)[0])[0] == 100, change


def test_hysteresis_a_state_needs_evidence_to_enter_and_to_leave():
    chart = ControlChart(chart_limits(AN)[0])
    for v in [0.0] * 50:
        chart.add(v)

    def at(sigmas):                 # the value this many of the chart's sigmas from its centre
        return chart.centre + sigmas * chart.sigma
    between = (AN.exit + AN.enter) / 2
    assert not chart.out_of_control(at(between))        # in control: not enough to enter
    chart.add(at(2 * AN.enter))
    assert chart.out
    for _ in range(3):                                  # out: between the limits keeps it out
        v = at(between)
        assert chart.out_of_control(v)
        chart.add(v)
        assert chart.out
    v = at(AN.exit * 0.5)                               # within exit: back in control
    assert not chart.out_of_control(v)
    chart.add(v)
    assert not chart.out


def test_judge_is_pure():
    detector, hist = ActivationDetector(TH), ActivationHistory()
    for v in noisy(1.0, 30):
        hist.add_activation(v, 0.2)
    def numbers():
        return [(c.centre, c.spread, c.sigma, c.reach, c.n, c.out) for c in (hist.log_rms, hist.sparsity)]
    before = numbers()
    x = Observation(RELU, 50.0, 0.9)
    assert detector.judge(x, hist) == detector.judge(x, hist)
    assert numbers() == before


def test_one_outlier_neither_drags_nor_blinds_the_chart():
    """One batch x1e6 is judged anomalous on its step alone (not confirmed: one step), moves
    the chart by a bounded amount, and a real x10 shift a few steps later is still caught at
    its step."""
    chart = ControlChart(chart_limits(AN)[0])
    for v in noisy(1.0, 50):
        chart.add(math.log(v))
    centre, sigma = chart.centre, chart.sigma
    chart.add(math.log(1e6))
    assert chart.out
    assert abs(chart.centre - centre) <= AN.smoothing * AN.clip * sigma * 1.000001
    assert chart.sigma <= sigma * (1 + AN.scale_smoothing * AN.clip * math.sqrt(math.pi / 2))
    values = noisy(1.0, 50) + [1e6] + noisy(1.0, 4, seed=1) + noisy(10.0, 100, seed=2)
    judged, confirmed = monitored(values)
    assert anomalous_steps(judged)[:2] == [50, 55]
    assert [(t.step, t.state) for t in confirmed][:2] == [(0, "normal"), (55, "anomalous")]


def test_a_sparsity_shift_is_caught_and_dropout_s_steady_share_is_not():
    rng = random.Random(3)
    units = 64
    # Dropout's share of zeros: p = 0.5 of its units, binomial scatter (sd 0.06), for long
    dropout = [sum(rng.random() < 0.5 for _ in range(units)) / units for _ in range(5000)]
    judged, _ = monitored([1.0] * len(dropout), inactive=dropout, kind=RELU)
    assert not anomalous_steps(judged)
    # a ReLU layer whose inactive share jumps from ~0.1 to ~0.7 (below the dead ratio)
    shares = [0.1 + rng.uniform(-0.02, 0.02) for _ in range(60)] + [0.7] * 60
    judged, confirmed = monitored([1.0] * len(shares), inactive=shares, kind=RELU)
    assert anomalous_steps(judged)[0] == 60
    shift = [t for t in confirmed if t.state == "anomalous"]
    assert [t.step for t in shift] == [60]
    assert shift[0].stats["sparsity_shift"] == pytest.approx(0.6, abs=0.05)
    assert shift[0].stats["sparsity_expected"] == pytest.approx(0.1, abs=0.03)


def test_a_layer_shifting_again_and_again_changes_state_a_bounded_number_of_times():
    rng = random.Random(4)
    values, level = [], 1.0
    for _ in range(50):             # a x20 jump every 40 steps, up or down, for 2000 steps
        level *= rng.choice([20.0, 1 / 20.0])
        values += noisy(level, 40, seed=rng.randrange(1 << 30))
    judged, confirmed = monitored(values)
    assert len(anomalous_steps(judged)) > 100
    assert len(confirmed) <= MAX_CHANGES, [(t.step, t.state) for t in confirmed]


def test_the_evidence_of_a_shift_reads_in_words():
    judged, confirmed = monitored([0.5] * 40 + [8.0] * 10)
    stats = [t for t in confirmed if t.state == "anomalous"][0].stats
    words = [label(stats) for key, label in _STATS if key in stats]
    assert "x16 its expected level (0.5)" in words, words
    assert any("sigmas off its control chart" in w for w in words), words


def test_the_chart_numbers_are_validated():
    assert from_mapping({"anomaly": {"enter": 6.0, "exit": 2.0}}).anomaly.exit == 2.0
    for bad in ({"exit": 6.0}, {"smoothing": 0.0}, {"scale_smoothing": 1.5}, {"clip": -1.0},
                {"magnitude_factor": 1.0}, {"sparsity_jump": 2.0}, {"enter": "high"}):
        with pytest.raises(InputError, match="anomaly"):
            from_mapping({"anomaly": bad})
    # the floors: a steady layer's least alarming shift is the one the thresholds name
    rms, sparsity = chart_limits(AnomalyThresholds(magnitude_factor=4.0, sparsity_jump=0.4))
    assert math.exp(rms.floor * rms.enter) == pytest.approx(4.0)
    assert sparsity.floor * sparsity.enter == pytest.approx(0.4)


def test_a_chart_is_a_few_numbers():
    assert not hasattr(ControlChart(chart_limits(AN)[0]), "__dict__")
    assert not hasattr(ActivationHistory(), "__dict__")
