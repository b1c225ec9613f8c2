"""The state registry is complete, and every reader follows it: a state registered in a test
reaches --fail-on, the timeline, the colours and explain's wording with no other change."""
import dataclasses
import io

import pytest
from rich.console import Console

from neuraldbg_cli import states
from neuraldbg_cli.cli import main
from neuraldbg_cli.errors import InputError
from neuraldbg_cli.explain.analysis import analyze
from neuraldbg_cli.explain.report import render, theme
from neuraldbg_cli.thresholds import parse_states
from neuraldbg_cli.trace import read_trace
from tracemaker import TraceMaker

PROBLEMS = [(sig.name, st.name) for sig in states.SIGNALS.values() for st in sig.states
            if st.name != sig.ok]
# A layer of the right kind for each signal's states (the gradient of a Linear, ...)
LAYER = {"activation": "net.1", "gradient": "net.0", "update": "net.0", "loss": "(loss)",
         "loop": "(loop)", "output": "(output)", "norm": "net.1", "residual": "net",
         "scaler": "(scaler)"}


def report_of(tmp_path, maker, width=200):
    analysis = analyze([read_trace(maker.write(tmp_path / "t.jsonl"))])
    buf = io.StringIO()
    Console(file=buf, width=width, theme=theme(), color_system=None).print(render(analysis))
    return analysis, buf.getvalue()


def test_every_state_is_complete():
    for sig in states.SIGNALS.values():
        assert sig.state(sig.ok) is not None and not sig.state(sig.ok).failure, sig.name
        assert sig.label, sig.name
        for st in sig.states:
            if st.name == sig.ok:
                continue
            assert len(st.letter) == 1 and st.letter not in ". ", st
            assert st.style and st.verb and st.fix, st
            assert 0 < st.severity <= 1 and 0 < st.shown_before <= 1, st


def test_a_name_shared_by_signals_means_one_thing():
    """The timeline and the colours go by name: letter, style, severity and failure agree."""
    for name in states.state_names():
        same = {(st.letter, st.style, st.severity, st.failure, st.shown_before)
                for sig in states.SIGNALS.values() for st in sig.states if st.name == name}
        assert len(same) == 1, name
    letters = [states.named(n).letter for n in states.problem_names()]
    assert len(letters) == len(set(letters)), "two states share a timeline letter"


def test_failures_follow_the_contract():
    """Every state but normal, healthy and anomalous fails a run (CONTRACT.md, schema 2)."""
    expected = set(states.state_names()) - {"normal", "healthy", "anomalous"}
    assert set(states.failure_names()) == expected
    assert set(states.ok_names()) == {"normal", "healthy"}
    assert set(states.problem_names()) == expected | {"anomalous"}


def test_worst_first_keeps_the_timeline_order():
    schema1 = [n for n in states.worst_first() if n in ("nonfinite", "exploding", "dead",
                                                          "vanishing", "saturated", "anomalous")]
    assert schema1 == ["nonfinite", "exploding", "dead", "vanishing", "saturated", "anomalous"]
    assert set(states.worst_first()) == set(states.problem_names())


@pytest.mark.parametrize("name", states.problem_names())
def test_fail_on_accepts_every_state_but_good_health(name):
    assert parse_states(name) == (name,)
    assert parse_states(f"dead,{name.upper()}") == tuple(dict.fromkeys(("dead", name)))


def test_fail_on_error_lists_every_state():
    with pytest.raises(InputError) as e:
        parse_states("zombie")
    assert all(name in str(e.value) for name in states.problem_names())


@pytest.mark.parametrize("name", states.ok_names())
def test_fail_on_good_health_is_an_error(name):
    with pytest.raises(InputError, match=name):
        parse_states(name)


@pytest.mark.parametrize("signal,name", PROBLEMS)
def test_every_reader_knows_every_state(tmp_path, signal, name):
    st = states.lookup(signal, name)
    t = TraceMaker()
    if signal in ("norm", "residual", "scaler"):  # (TraceMaker starts the others at step 0)
        t.tr(0, LAYER[signal], "normal", signal=signal)
    t = t.tr(10, LAYER[signal], name, signal=signal).end(40)
    analysis, out = report_of(tmp_path, t)
    top = analysis.hypotheses[0]
    # with nothing else in the trace the cause is unknown, but a loop mistake is its own cause,
    # and an output that does not suit its loss, a block skipped, or BatchNorm's running
    # statistics that never update, is the model's design; units that are copies of one
    # another started equal
    own = "training_loop" if signal == "loop" or name in ("frozen", "detached") else \
        "architecture" if signal == "output" or (signal, name) in (
            ("residual", "collapsed"), ("norm", "stale")) \
        else "precision" if signal == "scaler" \
        else "initialization" if (signal, name) == ("update", "symmetric") else None
    assert (top.symptom, top.signal, top.cause) == (name, signal, own or "unknown")
    assert st.verb in top.summary and top.fix == st.fix
    if own is None:
        assert top.confidence == round(0.55 * st.severity, 2)
    else:
        assert top.confidence >= 0.5
    row = next(l for l in out.splitlines()
               if l.startswith(f"{LAYER[signal]} {states.SIGNALS[signal].label} "))
    assert row.split(maxsplit=2)[2].index(st.letter) == 10
    assert f"{st.letter} {name}" in out
    assert f"state.{name}" in theme().styles


def test_the_worst_state_of_a_cell_is_shown(tmp_path):
    t = TraceMaker().tr(10, "net.1", "dead").tr(11, "net.1", "nonfinite")
    _, out = report_of(tmp_path, t.end(1000), width=60)
    row = next(l for l in out.splitlines() if l.startswith("net.1 act"))
    assert "N" in row and "D" not in row            # several steps per column


WOBBLY = states.State("wobbly", True, 0.7, "W", "bold blue", "started to wobble",
                      "Hold it steady.")


@pytest.fixture
def registry(monkeypatch):
    """A private copy of the registry, put back after the test."""
    monkeypatch.setattr(states, "SIGNALS", dict(states.SIGNALS))
    return states


@pytest.mark.parametrize("signal", ["update", "activation"])
def test_a_registered_state_reaches_every_reader(tmp_path, capsys, registry, signal):
    """One `register` call, nothing else: a new signal, or a new state of a known one."""
    if signal == "activation":
        old = registry.ACTIVATION
        registry.register(dataclasses.replace(old, states=old.states + (WOBBLY,)))
    else:
        registry.register(states.Signal("update", "normal", (states.State("normal", False), WOBBLY),
                                        short="upd"))
    label = registry.SIGNALS[signal].label
    assert parse_states("dead,wobbly") == ("dead", "wobbly")
    assert "wobbly" in registry.failure_names() and "wobbly" in registry.worst_first()
    t = TraceMaker().tr(0, "net.0", "normal", signal=signal).tr(12, "net.0", "wobbly", signal=signal)
    t.end(40)
    analysis, out = report_of(tmp_path, t)
    top = analysis.hypotheses[0]
    assert (top.symptom, top.layer, top.signal) == ("wobbly", "net.0", signal)
    assert "started to wobble at step 12" in top.summary and top.fix == WOBBLY.fix
    assert top.confidence == round(0.55 * 0.7, 2)
    row = next(l for l in out.splitlines() if l.startswith(f"net.0 {label} "))
    assert row.split(maxsplit=2)[2].index("W") == 12
    assert "W wobbly" in out and theme().styles["state.wobbly"].color.name == "blue"
    path = t.write(tmp_path / "t.jsonl")
    assert main(["explain", "--fail-on", "wobbly", path]) == 3
    assert main(["explain", "--fail-on", "dead", path]) == 0
