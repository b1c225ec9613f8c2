"""Each hypothesis rule on a hand-made trace: the origin ranks first, its echoes are upstream."""
import pytest

from neuraldbg_cli.explain import echoes, rules
from neuraldbg_cli.explain.analysis import analyze
from neuraldbg_cli.explain.episodes import Episode
from neuraldbg_cli.trace import read_trace
from tracemaker import TraceMaker, dying_relu

SIGMOID_STACK = [(f"net.{i}", "Linear" if i % 2 == 0 else "Sigmoid", "param" if i % 2 == 0 else "sigmoid")
                 for i in range(12)]


def explain(tmp_path, maker, name="t.jsonl"):
    return analyze([read_trace(maker.write(tmp_path / name))])


def origins(analysis):
    return [h for h in analysis.hypotheses if h.origin is None]


def test_dead_after_lr_increase_is_the_origin_and_upstream_gradients_are_echoes(tmp_path):
    a = explain(tmp_path, dying_relu())
    top = a.hypotheses[0]
    assert (top.symptom, top.layer, top.step, top.cause) == ("dead", "net.3", 41, "learning_rate")
    assert top.confidence >= 0.7
    assert "LeakyReLU" in top.fix and "learning rate" in top.fix
    assert any("0.05 -> 2" in e for e in top.evidence)
    echoes = [h for h in a.hypotheses if h.layer in ("net.0", "net.2")]
    assert {h.cause for h in echoes} == {"upstream"} and all(h.origin is top for h in echoes)
    assert len(origins(a)) == 1


def test_dead_from_first_step_is_initialization(tmp_path):
    t = TraceMaker(healthy_start=False)
    t.tr(0, "net.1", "dead", dead_ratio=1.0, units=32).tr(0, "net.0", "vanishing", grad_norm=0.0)
    top = explain(tmp_path, t.end(20)).hypotheses[0]
    assert (top.symptom, top.layer, top.step, top.cause) == ("dead", "net.1", 0, "initialization")
    assert "He init" in top.fix and "bias" in top.fix


def test_saturated_from_start_in_deep_sigmoid_stack_is_architecture(tmp_path):
    t = TraceMaker(SIGMOID_STACK, healthy_start=False)
    for i in (1, 3, 5):
        t.tr(0, f"net.{i}", "saturated", saturated_ratio=0.9)
    top = explain(tmp_path, t.end(30)).hypotheses[0]
    assert (top.symptom, top.layer, top.cause) == ("saturated", "net.1", "architecture")
    assert "initialization" in top.alternatives
    assert "normalisation" in top.fix


def test_vanishing_first_layers_in_deep_sigmoid_stack_is_architecture(tmp_path):
    t = TraceMaker(SIGMOID_STACK)
    for i in (0, 2, 4):
        t.tr(0, f"net.{i}", "vanishing", signal="gradient", ratio_to_largest=1e-8)
    a = explain(tmp_path, t.end(30))
    top = a.hypotheses[0]
    # Backward order: the vanishing layer nearest the loss is where it starts.
    assert (top.symptom, top.layer, top.cause) == ("vanishing", "net.4", "architecture")
    assert [h.layer for h in a.hypotheses[1:]] == ["net.2", "net.0"]


def test_vanishing_names_the_steadily_worst_layer_not_one_flapping_at_the_threshold(tmp_path):
    """The layer nearest the loss crosses the threshold first but keeps coming back; the
    first layer's gradient stays at 1.6e-8 of the largest: that is the one named."""
    t = TraceMaker(SIGMOID_STACK)
    t.tr(0, "net.4", "vanishing", signal="gradient", ratio_to_largest=9e-7)
    t.tr(0, "net.2", "vanishing", signal="gradient", ratio_to_largest=2e-7)
    t.tr(0, "net.0", "vanishing", signal="gradient", ratio_to_largest=1.6e-8)
    t.tr(2, "net.4", "healthy", signal="gradient")
    t.tr(4, "net.4", "vanishing", signal="gradient", ratio_to_largest=9.5e-7)
    t.tr(6, "net.4", "healthy", signal="gradient")
    a = explain(tmp_path, t.end(30))
    top = a.hypotheses[0]
    assert (top.symptom, top.layer, top.step, top.cause) == ("vanishing", "net.0", 0, "architecture")
    assert {"net.4", "net.2"} <= {h.layer for h in a.hypotheses if h.origin is top}


def test_exploding_after_lr_increase_is_learning_rate_with_clipping(tmp_path):
    t = TraceMaker().lr(10, 1.0, 0.1)
    t.tr(12, "net.4", "exploding", grad_norm=5e4).tr(12, "net.2", "exploding", grad_norm=9e4)
    a = explain(tmp_path, t.end(30))
    top = a.hypotheses[0]
    assert (top.symptom, top.layer, top.cause) == ("exploding", "net.4", "learning_rate")
    assert "clip" in top.fix
    assert a.hypotheses[1].cause == "upstream"


def test_exploding_without_lr_change_is_unknown_with_clipping(tmp_path):
    t = TraceMaker(lr=0.01).tr(20, "net.4", "exploding", grad_norm=5e4)
    t.tr(21, "net.1", "anomalous", rms_ratio=40.0, rms_median=0.5)
    a = explain(tmp_path, t.end(30))
    assert (a.hypotheses[0].cause, a.hypotheses[0].layer) == ("unknown", "net.4")
    assert "clip" in a.hypotheses[0].fix.lower()
    assert a.hypotheses[1].cause == "upstream"      # the weights it threw off


def test_nan_batch_everywhere_at_once_is_one_input_data_hypothesis(tmp_path):
    t = TraceMaker(lr=1e-3, optimizer="Adam")
    t.tr(25, "(input)", "nonfinite", rms="nan")
    for name in ("net.0", "net.1", "net.2", "net.3", "net.4"):
        t.tr(25, name, "nonfinite", rms="nan")
    for name in ("net.4", "net.2", "net.0"):
        t.tr(25, name, "nonfinite", signal="gradient", grad_norm="nan")
    t.tr(26, "(input)", "normal", rms=1.0)
    a = explain(tmp_path, t.end(40))
    assert len(origins(a)) == 1
    top = a.hypotheses[0]
    assert (top.symptom, top.layer, top.step, top.cause) == ("nonfinite", "(input)", 25, "input_data")
    assert top.confidence >= 0.8 and "batch" in top.fix
    assert len(a.hypotheses) == 9 and all(h.cause == "upstream" for h in a.hypotheses[1:])


def test_nan_in_a_middle_layer_spreads_forward_and_backward(tmp_path):
    t = TraceMaker()
    for name in ("net.2", "net.3", "net.4"):
        t.tr(7, name, "nonfinite", rms="inf")
    t.tr(7, "net.0", "nonfinite", signal="gradient")
    a = explain(tmp_path, t.end(10))
    assert [h.layer for h in origins(a)] == ["net.2"]
    assert a.hypotheses[0].cause == "unknown" and "eps" in a.hypotheses[0].fix


def test_blip_that_recovers_ranks_below_a_persistent_failure(tmp_path):
    t = TraceMaker()
    t.tr(30, "net.1", "anomalous", rms_ratio=12.0, rms_median=0.4).tr(32, "net.1", "normal")
    t.tr(60, "net.3", "dead", dead_ratio=0.95)
    a = explain(tmp_path, t.end(100))
    assert [h.layer for h in a.hypotheses] == ["net.3", "net.1"]
    blip = a.hypotheses[1]
    assert blip.confidence < 0.5 and blip.recovered == 32


def test_a_transient_nonfinite_batch_counts_at_once_and_is_the_data(tmp_path):
    """One NaN batch the model got through: non-finite values count at once (CONTRACT schema 3,
    the verdict), and the data is to blame."""
    t = TraceMaker()
    t.tr(5, "(input)", "nonfinite", rms="nan").tr(5, "net.0", "nonfinite", rms="nan")
    t.tr(6, "(input)", "normal").tr(6, "net.0", "normal")
    a = explain(tmp_path, t.end(50))
    assert [h.state for r in a.runs for h in r.verdict()] == ["nonfinite", "nonfinite"]
    top = a.hypotheses[0]
    assert (top.layer, top.cause) == ("(input)", "input_data") and top.confidence >= 0.5


def test_healthy_trace_has_no_hypotheses(tmp_path):
    assert explain(tmp_path, TraceMaker().end(50)).hypotheses == []


def test_functional_relu_seen_as_dead_input_of_a_linear(tmp_path):
    t = TraceMaker().tr(15, "net.2", "dead", input_dead_ratio=0.96, observed="input")
    top = explain(tmp_path, t.end(30)).hypotheses[0]
    assert top.layer == "net.2" and "input of net.2" in top.summary
    assert any("96% of input units zero" in e for e in top.evidence)


def test_unconfirmed_end_of_run_state_is_weak(tmp_path):
    t = TraceMaker().tr(29, "net.1", "anomalous", rms_ratio=0.01, unconfirmed=True)
    top = explain(tmp_path, t.end(30)).hypotheses[0]
    assert top.confidence < 0.5 and any("not confirmed" in e for e in top.evidence)


def test_high_learning_rate_without_increase(tmp_path):
    t = TraceMaker(lr=0.1, optimizer="Adam").tr(30, "net.3", "dead", dead_ratio=1.0)
    assert explain(tmp_path, t.end(50)).hypotheses[0].cause == "learning_rate"


def test_lr_increase_long_before_the_onset_is_not_blamed(tmp_path):
    t = TraceMaker(lr=0.001, optimizer="Adam").lr(5, 0.002, 0.001)
    t.tr(5 + rules.LR_WINDOW + 10, "net.3", "dead", dead_ratio=1.0)
    assert explain(tmp_path, t.end(80)).hypotheses[0].cause == "unknown"


def test_same_layer_getting_worse_is_one_story(tmp_path):
    t = TraceMaker().tr(10, "net.3", "dead", dead_ratio=1.0).tr(20, "net.3", "nonfinite", rms="nan")
    a = explain(tmp_path, t.end(30))
    assert [h.cause for h in a.hypotheses][1:] == ["upstream"]


def test_shift_before_a_death_is_named_after_the_death(tmp_path):
    """The sample dying_relu.py: outputs jump after the lr raise, then the ReLUs die and stay
    dead; the story is the death, the jump its first sign."""
    t = TraceMaker(lr=0.01).lr(40, 2.0, 0.01)
    t.tr(42, "net.0", "anomalous", rms=7.4, rms_ratio=22.0, rms_median=0.33)
    t.tr(42, "net.1", "anomalous", rms_ratio=15.0).tr(42, "net.0", "exploding", grad_norm=25.0)
    t.tr(44, "net.1", "dead", dead_ratio=0.91).tr(44, "net.0", "healthy")
    t.tr(49, "net.0", "vanishing", grad_norm=0.0).tr(54, "net.0", "normal")
    a = explain(tmp_path, t.end(80))
    top = a.hypotheses[0]
    assert (top.symptom, top.layer, top.step, top.cause) == ("dead", "net.1", 44, "learning_rate")
    assert any(e.startswith("first sign, step 42: net.0") for e in top.evidence)
    assert len(origins(a)) == 1
    sign = next(h for h in a.hypotheses if h.layer == "net.0" and h.symptom == "anomalous")
    assert sign.cause == "upstream" and "first sign of net.1" in sign.summary


def test_exploding_that_worsens_to_nan_keeps_its_name(tmp_path):
    t = TraceMaker().lr(40, 2.0, 0.05).tr(41, "net.4", "exploding", grad_norm=133.0)
    t.tr(47, "net.4", "nonfinite", signal="gradient", grad_norm="inf")
    top = explain(tmp_path, t.end(80)).hypotheses[0]
    assert (top.symptom, top.layer, top.cause) == ("exploding", "net.4", "learning_rate")


def test_warm_up_climbing_too_high_is_learning_rate(tmp_path):
    t = TraceMaker(lr=0.01)
    for step in range(1, 29, 3):
        t.lr(step, 0.01 * (step + 1), 0.01 * (step - 2 if step > 1 else 1))
    t.tr(28, "net.4", "exploding", grad_norm=400.0)
    top = explain(tmp_path, t.end(50)).hypotheses[0]
    assert top.cause == "learning_rate"
    assert any("from step 7 to step 28" in e for e in top.evidence)


def test_unstandardised_input_is_input_data(tmp_path):
    layers = [("fc1", "Linear", "param"), ("act1", "Tanh", "tanh"), ("fc2", "Linear", "param")]
    t = TraceMaker(layers, healthy_start=False).tr(0, "(input)", "normal", rms=5294.0)
    t.tr(0, "act1", "saturated", saturated_ratio=1.0)
    top = explain(tmp_path, t.end(60)).hypotheses[0]
    assert (top.layer, top.cause) == ("act1", "input_data")
    assert "Standardise" in top.fix and "initialization" in top.alternatives


def test_flapping_layer_is_one_story(tmp_path):
    t = TraceMaker()
    for k in range(5):
        t.tr(10 + 6 * k, "net.3", "dead", dead_ratio=0.92).tr(13 + 6 * k, "net.3", "normal")
    t.tr(40, "net.3", "dead", dead_ratio=0.95)
    a = explain(tmp_path, t.end(60))
    assert len(origins(a)) == 1 and a.hypotheses[0].confidence >= 0.5


def ep(layer, signal, state, onset, pos, end=None, run=0, previous="normal", **stats):
    return Episode(run=run, rank=run, layer=layer, signal=signal, state=state, onset=onset,
                   end=end, previous=previous, module_type="M", kind="k", pos=pos, stats=stats)


@pytest.mark.parametrize("rule,a,b,echo", [
    (echoes.nonfinite_spreads, ep("x", "activation", "nonfinite", 3, 0),
     ep("y", "activation", "nonfinite", 3, 1), True),
    (echoes.nonfinite_spreads, ep("y", "activation", "nonfinite", 3, 1),
     ep("x", "activation", "nonfinite", 3, 0), False),          # not backwards in the forward pass
    (echoes.nonfinite_spreads, ep("y", "activation", "nonfinite", 3, 1),
     ep("x", "gradient", "nonfinite", 3, 0), True),             # the loss poisons every gradient
    (echoes.dead_cuts_gradients, ep("r", "activation", "dead", 3, 3),
     ep("l", "gradient", "vanishing", 9, 2), True),
    (echoes.dead_cuts_gradients, ep("r", "activation", "dead", 3, 3, end=4),
     ep("l", "gradient", "vanishing", 30, 2), False),           # long after it recovered
    (echoes.change_spreads_forward, ep("a", "activation", "anomalous", 3, 1),
     ep("b", "activation", "saturated", 4, 2), True),
    (echoes.change_spreads_forward, ep("a", "activation", "anomalous", 3, 1),
     ep("b", "activation", "saturated", 40, 2), False),         # too late to be its echo
    (echoes.gradient_flows_backward, ep("b", "gradient", "vanishing", 3, 4),
     ep("a", "gradient", "vanishing", 3, 0), True),
    (echoes.bad_update_corrupts_weights, ep("g", "gradient", "exploding", 3, 4),
     ep("a", "activation", "anomalous", 4, 0, run=1), True),
    (echoes.bad_update_corrupts_weights, ep("g", "gradient", "exploding", 3, 4),
     ep("a", "activation", "anomalous", 3, 0), False),          # same step: forward came first
    (echoes.same_failure_other_rank, ep("x", "activation", "dead", 3, 1, run=1),
     ep("x", "activation", "dead", 4, 1, run=0), True),
    (echoes.worsens_in_place, ep("x", "activation", "dead", 3, 1, end=8),
     ep("x", "activation", "nonfinite", 8, 1, previous="dead"), True),
    (echoes.bigger_activations_bigger_gradients, ep("x", "activation", "anomalous", 3, 1, rms_ratio=20.0),
     ep("w", "gradient", "exploding", 3, 0), True),
    (echoes.bigger_activations_bigger_gradients, ep("x", "activation", "anomalous", 3, 1, rms_ratio=0.01),
     ep("w", "gradient", "exploding", 3, 0), False),            # outputs shrank: not this story
    (echoes.relapses, ep("x", "activation", "dead", 3, 1, end=8),
     ep("x", "activation", "dead", 12, 1), True),
    (echoes.relapses, ep("x", "activation", "dead", 3, 1, end=8),
     ep("x", "activation", "dead", 300, 1), False),
])
def test_echo_rules(rule, a, b, echo):
    assert bool(rule(a, b, None)) is echo


def test_every_rule_is_documented_and_listed():
    for rule in echoes.ECHOES + rules.CAUSES:
        assert rule.__doc__ and rule.__doc__.strip(), rule.__name__
    assert rules.CAUSES[-1] is rules.unexplained      # the fallback always answers


def test_ranker_treats_an_added_cause_rule_like_the_others(tmp_path, monkeypatch):
    def cosmic_ray(ep, ctx):
        """A made-up rule: the ranker must use it as it uses the built-in ones."""
        return rules.Finding("cosmic_ray", 0.99, "a cosmic ray hit it", ("evidence",), "shield")
    monkeypatch.setattr(rules, "CAUSES", [cosmic_ray, *rules.CAUSES])
    top = explain(tmp_path, dying_relu()).hypotheses[0]
    assert (top.cause, top.fix) == ("cosmic_ray", "shield")
    assert "learning_rate" in top.alternatives


def test_a_sharded_layers_gradient_is_told_over_all_ranks(tmp_path):
    """FSDP: each rank's trace holds its shard's gradient norm; the evidence gives the whole
    layer's, the square root of the ranks' sums of squares (0.3 and 0.4: 0.5)."""
    def explained(sharded: bool):
        paths = []
        for rank, part in ((0, 0.3), (1, 0.4)):
            t = TraceMaker(rank=rank, world_size=2, run_id="r1")
            t.events[1]["layers"][2]["sharded"] = sharded
            t.events.append({"event": "summary", "step": 10, "layer": "net.2",
                             "stats": {"grad_norm": part}})
            if rank == 0:
                t.tr(12, "net.2", "exploding", signal="gradient", grad_norm=5e4)
            paths.append(read_trace(t.end(30).write(tmp_path / f"r{rank}.jsonl")))
        return analyze(paths).hypotheses[0]

    top = explained(sharded=True)
    assert top.layer == "net.2"
    assert "net.2 is sharded (FSDP): its whole gradient norm was 0.5 at step 10, rank 0's " \
        "shard 0.3" in top.evidence, top.evidence
    assert not any("sharded" in e for e in explained(sharded=False).evidence)  # replicated


def test_batchnorm_drift_names_batches_of_few_classes(tmp_path):
    """The loss call's targets at the summary steps: 2 of 10 classes a batch is said; most of
    the classes a batch says nothing."""
    def evidence(counts):
        t = TraceMaker([("0", "Linear", "param"), ("1", "BatchNorm1d", "other")])
        for step, n in enumerate(counts):
            t.events.append({"event": "summary", "step": 10 * step, "layer": "(output)",
                             "stats": {"target_classes": n, "units": 10, "rows": 64}})
        t.tr(20, "1", "drift", signal="norm", drift=1.2, drift_median=1.1, per_channel=64,
             batch=64)
        return explain(tmp_path, t.end(60)).hypotheses[0].evidence

    assert any("held 2 of the 10 classes" in e for e in evidence([2, 2, 3])), evidence([2, 2, 3])
    assert not any("classes" in e for e in evidence([9, 10, 9]))
