"""explain on the learning dynamics and the loop: a learning rate too high (constant, long at
its peak, no warm-up), weights off their fan-in scale, and the loop's own mistakes, each
named as the origin of the failures it causes, with the numbers quoted."""
import pytest

from neuraldbg_cli.explain import echoes
from neuraldbg_cli.explain.analysis import analyze
from neuraldbg_cli.explain.episodes import Episode
from neuraldbg_cli.trace import read_trace
from tracemaker import TraceMaker

TANH3 = [("fc1", "Linear", "param"), ("act1", "Tanh", "tanh"), ("fc2", "Linear", "param"),
         ("act2", "Tanh", "tanh"), ("fc3", "Linear", "param"), ("act3", "Tanh", "tanh"),
         ("out", "Linear", "param")]


def explain(tmp_path, maker):
    return analyze([read_trace(maker.write(tmp_path / "t.jsonl"))])


def origins(analysis):
    return [h for h in analysis.hypotheses if h.origin is None]


def big_update(t, step, layer, ratio):
    return t.tr(step, layer, "too_large", signal="update", update_ratio=ratio, grad_norm=2.0)


def test_constant_learning_rate_too_high_outranks_the_deaths_it_causes(tmp_path):
    t = TraceMaker(lr=0.5)
    big_update(big_update(t, 12, "net.0", 0.8), 12, "net.2", 0.6)
    t.tr(20, "net.1", "dead", dead_ratio=0.95).tr(26, "net.3", "dead", dead_ratio=0.9)
    a = explain(tmp_path, t.end(100))
    top = a.hypotheses[0]
    assert (top.symptom, top.signal, top.step, top.cause) == ("too_large", "update", 12, "learning_rate")
    assert top.layer in ("net.0", "net.2")
    assert top.confidence >= 0.7 and len(origins(a)) == 1
    assert any("0.8 of its weights' norm" in e and "800x the healthy" in e for e in top.evidence)
    assert any("SGD learning rate 0.5, constant from step 0" in e for e in top.evidence)
    dead = [h for h in a.hypotheses if h.symptom == "dead"]
    assert {h.layer for h in dead} == {"net.1", "net.3"}
    assert all(h.cause == "upstream" and h.origin is top for h in dead)


def spike(t, step, loss=6.0, median=1.3, **stats):
    t.tr(step, "(loss)", "spiking", signal="loss", loss=loss, loss_median=median, loss_start=1.6,
         **stats)
    return t.tr(step + 1, "(loss)", "normal", signal="loss", loss=median)


def test_a_loss_that_keeps_spiking_at_a_constant_rate_is_the_learning_rate(tmp_path):
    """SGD at a constant rate too high: the loss spikes again and again, an update is too
    large now and then; the ReLUs die later, long after any single one of them."""
    t = TraceMaker(lr=0.08)
    big_update(t, 23, "net.4", 0.52).tr(26, "net.4", "normal", signal="update", update_ratio=0.2)
    for step in (23, 46, 59):
        spike(t, step)
    t.tr(63, "net.3", "dead", dead_ratio=0.91)
    top = explain(tmp_path, t.end(200)).hypotheses[0]
    assert (top.symptom, top.step, top.cause) == ("dead", 63, "learning_rate")
    assert top.confidence >= 0.7
    assert "the learning rate (0.08) is too high for this model" in top.summary
    assert any("the loss spiked 3 times before the onset (step 23, 46, 59), up to 4.62x" in e
               for e in top.evidence)


def test_a_loss_swinging_all_run_is_one_instability_of_the_rate(tmp_path):
    """Adam at 0.3: the loss spikes, settles and spikes again for the whole run, with gaps
    longer than a relapse; nothing else fails. One story, the learning rate, likely."""
    t = TraceMaker(lr=0.3, optimizer="Adam")
    for step in (9, 15, 24, 30, 35, 57, 61, 100, 140):
        spike(t, step, loss=20.0, median=1.0)
    a = explain(tmp_path, t.end(200))
    top = a.hypotheses[0]
    assert (top.symptom, top.step, top.cause) == ("spiking", 9, "learning_rate")
    assert len(origins(a)) == 1 and top.confidence >= 0.5
    assert "the loss spiked 8 more times" in top.summary


@pytest.mark.parametrize("moved, blamed", [(1.5, True), (0.03, True), (1.8e-3, False)])
def test_spikes_while_the_weights_moved_at_a_healthy_pace_do_not_blame_the_rate(
        tmp_path, moved, blamed):
    """The same swinging loss, told the median update ratio of its steps (the loss detector's
    `update_median`): steps far above 1e-3 of the weights are the rate's; steps of 1.8e-3
    (a DQN's, whose targets moved) are not, whatever the loss did."""
    t = TraceMaker(lr=1e-3, optimizer="Adam")
    for step in (9, 15, 24, 30, 35, 57, 61, 100, 140):
        spike(t, step, loss=20.0, median=1.0, update_median=moved)
    causes = {h.cause for h in explain(tmp_path, t.end(200)).hypotheses}
    assert ("learning_rate" in causes) == blamed, causes


@pytest.mark.parametrize("moved, cause", [(0.2, "learning_rate"), (1e-3, None)])
def test_one_spike_while_the_weights_moved_wildly_is_the_rate(tmp_path, moved, cause):
    """A lone spike that lasts: with every layer moving 0.2 of its weights a step it is the
    rate's, however few spikes came before; at 1e-3 a step nothing says so."""
    t = TraceMaker(lr=1e-3, optimizer="Adam")
    t.tr(57, "(loss)", "spiking", signal="loss", loss=27.7, loss_median=0.01, loss_start=2.0,
         update_median=moved)
    t.tr(189, "(loss)", "normal", signal="loss", loss=0.0)
    top = explain(tmp_path, t.end(200)).hypotheses[0]
    assert top.cause == cause or cause is None and top.cause != "learning_rate", top
    if cause:
        assert "0.2 of their norm a step" in top.summary and top.confidence >= 0.5


@pytest.mark.parametrize("moved, cause", [(1.1, "learning_rate"), (1e-3, None)])
def test_a_loss_diverging_while_the_weights_moved_wildly_is_the_rate(tmp_path, moved, cause):
    """A course's linear regression, SGD at 0.01 on inputs of scale 10: the loss grows from
    step 11 to the end, the layer moving 110% of its weights a step (a Linear(1, 1), too small
    to be judged by its relative step). At 1e-3 a step nothing says it is the rate."""
    t = TraceMaker(lr=0.01)
    t.tr(11, "(loss)", "diverging", signal="loss", loss=189.0, loss_median=64.9,
         loss_start=40.0, update_median=moved)
    top = explain(tmp_path, t.end(100)).hypotheses[0]
    assert top.symptom == "diverging"
    assert top.cause == cause or cause is None and top.cause != "learning_rate", top
    if cause:
        assert "the loss diverged while the weights moved up to 1.1 of their norm a step" \
            in top.summary and top.confidence >= 0.7, top


def test_spikes_long_gone_or_a_change_of_the_input_do_not_blame_the_rate(tmp_path):
    """pytorch/examples' actor-critic: two spikes of its episodic loss early on, then 250
    steps later a head `anomalous` and the input's scale changing as the policy balances the
    pole. Neither is the rate's: the spikes are long gone, and no step of the model's makes
    its input."""
    t = TraceMaker(lr=1e-3, optimizer="Adam")
    for step in (31, 41):
        spike(t, step, loss=60.0, median=13.0)
    t.tr(291, "net.4", "anomalous", rms=9.0).tr(372, "(input)", "anomalous", rms=0.2)
    causes = {(h.layer, h.cause) for h in explain(tmp_path, t.end(600)).hypotheses}
    assert ("net.4", "learning_rate") not in causes and ("(input)", "learning_rate") not in causes, causes


def test_one_spike_long_before_a_death_does_not_blame_the_rate(tmp_path):
    t = spike(TraceMaker(lr=0.01), 10).tr(90, "net.3", "dead", dead_ratio=0.91)
    assert explain(tmp_path, t.end(200)).hypotheses[0].cause == "unknown"


def test_failure_long_after_a_rise_while_the_peak_rate_is_in_force(tmp_path):
    t = TraceMaker(lr=0.01).lr(100, 0.05, 0.01).tr(154, "net.1", "dead", dead_ratio=0.96)
    top = explain(tmp_path, t.end(200)).hypotheses[0]
    assert (top.symptom, top.step, top.cause) == ("dead", 154, "learning_rate")
    assert "was raised 0.01 -> 0.05 (x5) at step 100" in top.summary and "54 steps later" in top.summary


def test_a_warm_up_to_the_peak_is_told_as_a_climb(tmp_path):
    t = TraceMaker(lr=0.005, optimizer="AdamW")
    for step in range(1, 9):
        t.lr(step * 10, 0.005 * 2 ** step, 0.005 * 2 ** (step - 1), optimizer="AdamW")
    t.tr(130, "net.1", "dead", dead_ratio=0.96)
    top = explain(tmp_path, t.end(200)).hypotheses[0]
    assert top.cause == "learning_rate"
    assert "climbed 0.005 -> 1.28 (x256) from step 0 to step 80" in top.summary
    assert "50 steps later" in top.summary


def test_a_rise_that_was_taken_back_is_not_blamed_long_after(tmp_path):
    t = TraceMaker(lr=0.01).lr(100, 0.05, 0.01).lr(120, 0.01, 0.05)
    t.tr(154, "net.1", "dead", dead_ratio=0.96)
    assert explain(tmp_path, t.end(200)).hypotheses[0].cause == "unknown"


def test_adam_without_warm_up_swinging_loss(tmp_path):
    t = TraceMaker(lr=0.3, optimizer="Adam")
    big_update(t, 10, "net.4", 3.1)
    t.tr(11, "(loss)", "spiking", signal="loss", loss=15.0, loss_median=0.7, loss_start=2.3)
    a = explain(tmp_path, t.end(80))
    top = a.hypotheses[0]
    assert (top.symptom, top.cause) == ("too_large", "learning_rate") and len(origins(a)) == 1
    assert any("Adam learning rate 0.3, constant from step 0, with no warm-up" in e
               for e in top.evidence)
    spike = next(h for h in a.hypotheses if h.signal == "loss")
    assert spike.origin is top and "loss 15, recent median 0.7, starting level 2.3" in spike.evidence[1]
    assert spike.summary.startswith("The loss spiked at step 11")


def test_weights_far_above_the_xavier_scale_are_the_initialization(tmp_path):
    """Three tanh layers with weight std 2.5 saturate from the first step: the weights, not
    the stacking, since the same stack at the right scale trains."""
    off = {"fc1": (2.5, "xavier", 0.0884), "fc2": (2.5, "xavier", 0.125), "out": (2.5, "xavier", 0.17)}
    t = TraceMaker(TANH3, weights=off, healthy_start=False).tr(0, "act1", "saturated",
                                                                saturated_ratio=0.99)
    top = explain(tmp_path, t.end(50)).hypotheses[0]
    assert (top.symptom, top.layer, top.cause) == ("saturated", "act1", "initialization")
    assert "28x the Xavier scale" in top.summary
    assert any("fc1's weights had rms 2.5, 28x the Xavier scale for its fan-in (0.0884)" in e
               for e in top.evidence)
    assert "architecture" in top.alternatives


def test_the_same_stack_at_the_right_scale_is_the_architecture(tmp_path):
    fine = {"fc1": (0.09, "xavier", 0.0884), "fc2": (0.1, "xavier", 0.125)}
    t = TraceMaker(TANH3, weights=fine, healthy_start=False).tr(0, "act1", "saturated")
    assert explain(tmp_path, t.end(50)).hypotheses[0].cause == "architecture"


def test_gradients_never_reset_is_the_origin_of_what_follows(tmp_path):
    t = TraceMaker().tr(2, "(loop)", "no_zero_grad", signal="loop", steps_without_reset=3)
    t.tr(15, "net.0", "exploding", grad_norm=90.0).tr(20, "(loss)", "spiking", signal="loss", loss=9.0)
    a = explain(tmp_path, t.end(60))
    top = a.hypotheses[0]
    assert (top.symptom, top.layer, top.cause) == ("no_zero_grad", "(loop)", "training_loop")
    assert top.confidence >= 0.85 and len(origins(a)) == 1
    assert top.summary.startswith("The training loop never reset the gradients at step 2")
    assert any("for 3 optimizer steps in a row" in e for e in top.evidence)
    assert {h.symptom for h in top.consequences} == {"exploding", "spiking"}


def test_eval_mode_left_on_is_the_training_loop(tmp_path):
    t = TraceMaker().tr(50, "(loop)", "eval_mode", signal="loop", models=["Net"])
    top = explain(tmp_path, t.end(100)).hypotheses[0]
    assert (top.symptom, top.cause) == ("eval_mode", "training_loop")
    assert "Net trained in eval() mode from step 50" in top.summary
    assert "model.train()" in top.fix


def test_layer_in_no_optimizer_stalls_the_loss(tmp_path):
    t = TraceMaker().tr(3, "net.4", "frozen", signal="update", in_no_optimizer=True, grad_norm=0.4)
    t.tr(100, "(loss)", "stalled", signal="loss", loss=2.3, loss_median=2.29, loss_start=2.31)
    a = explain(tmp_path, t.end(150))
    top = a.hypotheses[0]
    assert (top.symptom, top.layer, top.cause) == ("frozen", "net.4", "training_loop")
    assert "no optimizer holds them" in top.summary and len(origins(a)) == 1
    assert [h.symptom for h in top.consequences] == ["stalled"]


def test_a_layer_frozen_by_a_rate_cut_to_nothing_is_the_learning_rate(tmp_path):
    """A StepLR(step_size=7) meant for epochs, stepped every batch: 0.001 x 0.1 every 7 steps
    is 1e-9 by step 42, and the weights stop changing (pytorch/tutorials' transfer learning,
    before its fix). A schedule's ordinary cuts (100x) leave the loop mistake's reading."""
    t = TraceMaker(lr=1e-3)
    for k in range(1, 7):
        t.lr(7 * k, 1e-3 * 0.1 ** k, 1e-3 * 0.1 ** (k - 1))
    t.tr(44, "net.0", "frozen", signal="update", grad_norm=0.3)
    top = explain(tmp_path, t.end(300)).hypotheses[0]
    assert (top.symptom, top.cause) == ("frozen", "learning_rate")
    assert "cut from 0.001 to 1e-09 by step 42" in top.summary and "once per epoch" in top.fix
    t = TraceMaker(lr=1e-3).lr(7, 1e-4, 1e-3).lr(14, 1e-5, 1e-4)
    t.tr(44, "net.0", "frozen", signal="update", grad_norm=0.3)
    top = explain(tmp_path, t.end(300)).hypotheses[0]
    assert (top.symptom, top.cause) == ("frozen", "training_loop")
    # Hugging Face's linear schedule, from 0 up to 0.01 and down to 0, stepped past its end
    t = TraceMaker(lr=0.0).lr(5, 0.01, 0.0).lr(60, 1e-3, 0.01).lr(100, 0.0, 1e-3)
    t.tr(102, "net.0", "frozen", signal="update", grad_norm=0.3)
    top = explain(tmp_path, t.end(106)).hypotheses[0]
    assert (top.symptom, top.cause) == ("frozen", "learning_rate")
    assert "cut from 0.01 to 0 by step 100" in top.summary


@pytest.mark.parametrize("optimizer,decay,cause", [
    ("Adam", 0.1, "learning_rate"), ("Adam", 5e-4, "unknown"), ("AdamW", 0.1, "unknown"),
    ("SGD", 0.1, "unknown")])
def test_a_gradient_faded_under_adams_heavy_l2_decay_is_the_decay(tmp_path, optimizer, decay, cause):
    """Adam with weight_decay 0.1 (a Stack Overflow LeNet stuck at 10%): the decay is added to
    the gradient and Adam normalises the sum, so every step pulls the weights to zero; the
    gradient fades while the weights still move."""
    t = TraceMaker(lr=1e-3, optimizer=optimizer)
    t.events[2]["weight_decay"] = decay
    t.tr(82, "net.0", "vanishing", signal="gradient", grad_norm=6e-7, model_max_grad_norm=0.11)
    top = explain(tmp_path, t.end(160)).hypotheses[0]
    assert (top.symptom, top.cause) == ("vanishing", cause)
    if cause == "learning_rate":
        assert "weight_decay 0.1" in top.summary and "AdamW" in top.fix


@pytest.mark.parametrize("residual", [False, True])
def test_depth_without_normalisation_is_not_blamed_in_a_residual_net(tmp_path, residual):
    """Ten weight layers and no normalisation: a vanishing gradient is the depth's. In a
    residual net (ReZero's 64 blocks, whose gates cross 0 now and then) the blocks carry the
    gradient back: "add residual connections" would be advice it already follows."""
    t = TraceMaker([(f"l.{i}", "Linear", "param") for i in range(10)], lr=0.01)
    if residual:
        t.tr(0, "l.5", "normal", signal="residual")
    t.tr(50, "l.3", "vanishing", signal="gradient", grad_norm=1e-9, model_max_grad_norm=1.0)
    top = explain(tmp_path, t.end(100)).hypotheses[0]
    assert top.cause == ("unknown" if residual else "architecture"), top.summary


@pytest.mark.parametrize("recovered", [False, True])
def test_a_plateau_the_loss_left_is_no_target_without_a_signal(tmp_path, recovered):
    """A flat, noisy loss while the weights move: targets with no signal, while it lasts. One
    the loss then left (a LoRA fine-tune's or ULMFiT's plateau of 15 steps) had a signal:
    "shuffle inputs and targets together" was wrong advice for a slow start."""
    t = TraceMaker()
    t.tr(100, "(loss)", "stalled", signal="loss", no_signal=True, update_median=3e-3,
         loss_start=5.9, loss_median=5.8)
    if recovered:
        t.tr(115, "(loss)", "normal", signal="loss")
    top = explain(tmp_path, t.end(400)).hypotheses[0]
    assert top.cause == ("unknown" if recovered else "input_data"), top.summary
    assert ("slow start" in top.summary) == recovered


@pytest.mark.parametrize("optimizer", ["SGD", "LBFGS"])
def test_lbfgs_at_its_default_rate_of_1_is_no_rate_too_high(tmp_path, optimizer):
    t = TraceMaker(lr=1.0, optimizer=optimizer).tr(30, "net.1", "dead")
    causes = [h.cause for h in explain(tmp_path, t.end(100)).hypotheses]
    assert ("learning_rate" in causes) == (optimizer == "SGD"), causes


def test_a_cut_graph_is_the_training_loop(tmp_path):
    t = TraceMaker().tr(1, "net.0", "detached", signal="update")
    top = explain(tmp_path, t.end(50)).hypotheses[0]
    assert (top.symptom, top.cause) == ("detached", "training_loop")
    assert "detach()" in top.fix


def ep(layer, signal, state, onset, pos=0, end=None, run=0, **stats):
    return Episode(run=run, rank=run, layer=layer, signal=signal, state=state, onset=onset,
                   end=end, previous="normal", module_type="M", kind="k", pos=pos, stats=stats)


@pytest.mark.parametrize("rule,a,b,echo", [
    (echoes.loop_mistake_spreads, ep("(loop)", "loop", "no_zero_grad", 2),
     ep("w", "gradient", "exploding", 30), True),
    (echoes.loop_mistake_spreads, ep("(loop)", "loop", "no_zero_grad", 2, end=5),
     ep("w", "gradient", "exploding", 30), False),              # fixed long before
    (echoes.loop_mistake_spreads, ep("(loop)", "loop", "no_zero_grad", 2),
     ep("w", "gradient", "exploding", 30, run=1), False),       # another run
    (echoes.big_updates_throw_off, ep("w", "update", "too_large", 10, update_ratio=0.9),
     ep("r", "activation", "dead", 14), True),
    (echoes.big_updates_throw_off, ep("w", "update", "too_large", 10, end=12),
     ep("r", "activation", "dead", 40), False),                 # over long before
    (echoes.big_updates_throw_off, ep("(loss)", "loss", "spiking", 10),
     ep("w", "update", "too_large", 11), True),                 # the same over-large steps
    (echoes.big_updates_throw_off, ep("(loss)", "loss", "spiking", 10),
     ep("w", "update", "too_large", 40), False),
    (echoes.loss_swings_again, ep("(loss)", "loss", "spiking", 10, end=12),
     ep("(loss)", "loss", "spiking", 50), True),
    (echoes.loss_swings_again, ep("(loss)", "loss", "spiking", 10, end=12),
     ep("(loss)", "loss", "spiking", 150), False),              # settled long before
    (echoes.shows_in_loss, ep("r", "activation", "dead", 10),
     ep("(loss)", "loss", "stalled", 100), True),
    (echoes.shows_in_loss, ep("r", "activation", "anomalous", 10),
     ep("(loss)", "loss", "stalled", 11), False),               # a warning sign, not a failure
    (echoes.shows_in_loss, ep("r", "activation", "dead", 10),
     ep("w", "gradient", "vanishing", 11), False),
])
def test_echo_rules_of_the_dynamics(rule, a, b, echo):
    assert bool(rule(a, b, None)) is echo


def test_a_long_divergence_that_recovers_when_the_rate_decays_is_still_likely(tmp_path):
    """nanoGPT at learning_rate 0.5: updates too large and the loss diverging for 70 steps at
    the peak of the warm-up, until the cosine decay brings the rate down. Not a blip."""
    t = TraceMaker(lr=0.3, optimizer="AdamW")
    big_update(t, 85, "net.4", 0.35).tr(91, "net.4", "normal", signal="update", update_ratio=0.2)
    t.tr(91, "(loss)", "spiking", signal="loss", loss=17.4, loss_median=3.6, loss_start=3.7)
    t.tr(100, "(loss)", "diverging", signal="loss", loss=20.7, loss_median=6.9, loss_start=3.7)
    t.tr(155, "(loss)", "normal", signal="loss", loss=4.1)
    a = explain(tmp_path, t.end(300))
    top = a.hypotheses[0]
    assert (top.symptom, top.cause, top.recovered) == ("too_large", "learning_rate", 155)
    assert top.confidence >= 0.5 and len(origins(a)) == 1
    assert {h.symptom for h in top.consequences} == {"spiking", "diverging"}


PROBABILITIES_INTO_CE = {"why": "probabilities_into_cross_entropy", "loss_fn": "cross_entropy",
                         "activation": "softmax", "units": 5, "rows": 64, "output_min": 0.15,
                         "output_max": 0.29, "target_min": 0, "target_max": 4}


def test_an_output_mismatch_outranks_the_vanishing_gradients_and_stall_it_causes(tmp_path):
    """Probabilities into CrossEntropyLoss: the gradients of the first layers vanish in the
    same step and the loss stalls later; the mismatch is the origin, the rest its echoes."""
    t = TraceMaker(lr=0.1)
    t.tr(0, "net.0", "vanishing", signal="gradient", grad_norm=1e-9)
    t.tr(0, "net.3", "saturated", saturated_ratio=0.8)
    t.tr(0, "(output)", "mismatched", signal="output", **PROBABILITIES_INTO_CE)
    t.tr(100, "(loss)", "stalled", signal="loss", loss_median=1.6, loss_start=1.61)
    a = explain(tmp_path, t.end(200))
    top = a.hypotheses[0]
    assert (top.layer, top.symptom, top.cause) == ("(output)", "mismatched", "architecture")
    assert origins(a) == [top] and top.confidence >= 0.7
    assert {(h.layer, h.symptom) for h in top.consequences} == {
        ("net.0", "vanishing"), ("net.3", "saturated"), ("(loss)", "stalled")}
    assert "rather than logits" in " ".join(top.evidence) and "logits" in top.fix


def test_labels_of_one_class_are_an_input_data_cause(tmp_path):
    t = TraceMaker(lr=0.1)
    t.tr(50, "(output)", "one_class", signal="output", why="one_class", loss_fn="cross_entropy",
         units=10, rows=64, target_min=0, target_max=0, steps=51)
    top = explain(tmp_path, t.end(200)).hypotheses[0]
    assert (top.symptom, top.cause) == ("one_class", "input_data")
    assert "class 0 for 51 steps" in top.summary and "bincount" in top.fix


def test_a_mismatch_from_another_version_still_reads_as_architecture(tmp_path):
    """An (output) state whose reason this version does not know: the state's own fix."""
    t = TraceMaker(lr=0.1)
    t.tr(0, "(output)", "mismatched", signal="output", why="softmax_over_the_batch")
    top = explain(tmp_path, t.end(50)).hypotheses[0]
    assert (top.symptom, top.cause) == ("mismatched", "architecture")
    assert top.confidence >= 0.5 and top.fix.startswith("Feed the loss what it expects")


@pytest.mark.parametrize("moved, cause", [(2e-3, "learning_rate"), (0.042, "unknown")])
def test_a_plateau_is_a_rate_too_low_only_while_the_steps_are_modest(tmp_path, moved, cause):
    """A smooth loss crawling along a plateau: with the weights moving 2e-3 of their norm a
    step the rate is too low to leave it; at 0.042 a step (word2vec's sparse embeddings) the
    steps are not small, and "raise the learning rate" would be the wrong advice."""
    t = TraceMaker(lr=0.025, optimizer="SparseAdam")
    t.tr(100, "(loss)", "stalled", signal="loss", loss=4.1, loss_median=4.1, loss_start=4.2,
         update_median=moved, loss_jitter=2e-4, plateau=True)
    top = explain(tmp_path, t.end(150)).hypotheses[0]
    assert (top.symptom, top.cause) == ("stalled", cause), top
    assert ("too low" in top.summary) == (cause == "learning_rate"), top.summary
