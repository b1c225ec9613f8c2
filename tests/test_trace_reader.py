"""Traces from elsewhere are untrusted data: a malformed trace gives one line naming the file
and line (exit 2) or a warned skip, never a traceback; strings from it are shown inert."""
from __future__ import annotations

import copy
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuraldbg_cli.cli import main
from neuraldbg_cli.inert import inert
from neuraldbg_cli.trace import MAX_LINE, read_trace
from tracemaker import TraceMaker, dying_relu


def _lines(trace: TraceMaker) -> list:
    return [json.dumps(e) for e in trace.events]


def _write(tmp_path, lines, name="t.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(b"".join((x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines))
    return str(path)


def _explain(path, capsys, *options):
    code = main(["explain", *options, path])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_nested_too_deep_is_one_line_naming_the_line(tmp_path, capsys):
    lines = _lines(dying_relu())
    lines.insert(3, "[" * 200_000 + "]" * 200_000)
    code, out, err = _explain(_write(tmp_path, lines), capsys)
    assert code == 2 and out == ""
    assert err.splitlines() == [err.strip()] and "line 4" in err and "Traceback" not in err


def test_an_overlong_line_is_skipped_with_a_warning(tmp_path, capsys):
    lines = _lines(dying_relu())
    lines.insert(3, json.dumps({"event": "warning", "message": "x" * (MAX_LINE + 10)}))
    trace = read_trace(_write(tmp_path, lines))
    assert any("line 4" in w and "skipped" in w for w in trace.warnings)
    want = [e for e in dying_relu().events if e["event"] == "transition"]
    assert trace.end is not None and trace.of("transition") == want


@pytest.mark.parametrize("bad", [
    {"event": "transition", "step": "x", "layer": "net.1", "signal": "activation", "to": "dead"},
    {"event": "transition", "step": 3, "layer": "net.1", "signal": "activation", "to": "dead",
     "stats": []},
    {"event": "transition", "step": -4, "layer": "net.1", "signal": "activation", "to": "dead"},
    {"event": "hparams", "step": 2, "lr": "fast"},
    {"event": "model", "layers": {"a": 1}},
    {"event": 7},
])
def test_known_keys_of_the_wrong_type_are_skipped_with_a_warning(tmp_path, capsys, bad):
    lines = _lines(dying_relu())
    lines.insert(3, json.dumps(bad))
    trace = read_trace(_write(tmp_path, lines))
    assert bad not in trace.events
    assert any("line 4" in w and "wrong type" in w or "negative" in w or "not a string" in w
               for w in trace.warnings), trace.warnings
    code, out, _ = _explain(_write(tmp_path, lines), capsys)
    assert code == 0 and "net.3 (ReLU) died" in out


def test_a_huge_number_reads_as_infinite(tmp_path, capsys):
    lines = _lines(dying_relu())
    lines[-2] = lines[-2].replace('"rms": 0.01', '"rms": 1e999')
    code, out, _ = _explain(_write(tmp_path, lines), capsys)
    assert code == 0 and "net.3 (ReLU) died" in out


def test_a_second_run_start_ends_the_reading_with_a_warning(tmp_path):
    first = _lines(dying_relu())
    trace = read_trace(_write(tmp_path, first + _lines(TraceMaker(script="other.py").end(5))))
    assert len(trace.of("run_start")) == 1 and trace.end["steps"] == 80
    assert any("second run_start" in w for w in trace.warnings)


def test_events_after_run_end_are_skipped_with_a_warning(tmp_path):
    lines = _lines(dying_relu())
    lines.append(json.dumps({"event": "transition", "step": 99, "layer": "net.1",
                             "signal": "activation", "to": "dead"}))
    trace = read_trace(_write(tmp_path, lines))
    assert trace.events[-1]["event"] == "run_end"
    assert any("after run_end" in w for w in trace.warnings)


def test_skipped_lines_are_counted_beyond_the_first_few(tmp_path):
    lines = _lines(dying_relu())
    bad = json.dumps({"event": "warning", "message": 5})
    trace = read_trace(_write(tmp_path, lines[:2] + [bad] * 500 + lines[2:]))
    assert len(trace.warnings) <= 21 and "more lines skipped" in trace.warnings[-1]


def test_inert_shows_control_characters_as_escapes():
    assert inert("net.0") == "net.0"
    assert inert("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert inert("\x1b]0;title\x07") == "\\x1b]0;title\\x07"
    assert inert("x\u202ey\n") == "x\\u202ey\\x0a"
    assert inert(3) == "3"


# ---- fuzzing: mutations of a real trace never end in a traceback -----------------------------
def _every_signal():
    """The dying-ReLU story and the learning dynamics' signals with their stats, the weight
    scale in the model event: something for every rule to read."""
    t = TraceMaker(weights={"net.0": (2.5, "he", 0.25), "net.2": (0.1, "xavier", 0.12)})
    t.lr(40, 2.0, 0.05).tr(2, "(loop)", "no_zero_grad", signal="loop", steps_without_reset=3)
    t.tr(40, "net.2", "too_large", signal="update", update_ratio=0.6, grad_norm=2.0)
    t.tr(41, "(loss)", "spiking", signal="loss", loss=9.0, loss_median=1.0, loss_start=1.2)
    t.tr(42, "(loss)", "normal", signal="loss", loss=1.0)
    t.tr(41, "net.3", "dead", dead_ratio=0.97, units=64, rms=0.01)
    t.tr(43, "net.4", "frozen", signal="update", in_no_optimizer=True)
    t.tr(50, "(loop)", "eval_mode", signal="loop", models=["Net"])
    return t.lr(60, 0.01, 2.0).end(80)


_BASE = _lines(_every_signal())
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True), st.text(max_size=8),
                    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                       st.integers(), max_size=2))


@st.composite
def mutated(draw):
    events = [json.loads(line) for line in _BASE]
    rnd = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(1, 6))):
        how = draw(st.sampled_from(["value", "drop_key", "delete", "duplicate", "swap", "bytes"]))
        i = rnd.randrange(len(events))
        e = events[i]
        if how == "value" and isinstance(e, dict) and e:
            key = rnd.choice(sorted(e, key=str))
            e[key] = draw(_VALUES)
            if isinstance(e.get("stats"), dict) and rnd.random() < 0.5:
                e["stats"][draw(st.text(max_size=5))] = draw(_VALUES)
        elif how == "drop_key" and isinstance(e, dict) and e:
            e.pop(rnd.choice(sorted(e, key=str)))
        elif how == "delete" and len(events) > 1:
            del events[i]
        elif how == "duplicate":
            events.insert(rnd.randrange(len(events)), copy.deepcopy(e))
        elif how == "swap":
            j = rnd.randrange(len(events))
            events[i], events[j] = events[j], events[i]
        elif how == "bytes":
            events[i] = draw(st.binary(max_size=40))
    return [e if isinstance(e, bytes) else json.dumps(e, allow_nan=True).encode() for e in events]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=mutated())
def test_mutated_traces_never_end_in_a_traceback(tmp_path, capsys, lines):
    path = _write(tmp_path, lines, "fuzz.jsonl")
    for options in ((), ("--json",)):
        code, out, err = _explain(path, capsys, *options)      # any exception fails the test
        assert code in (0, 2), (code, err)
        if code == 2:
            assert out == "" and len(err.strip().splitlines()) == 1, err


HOSTILE = "net.3\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZWNobyBoaQ==\x07"


def test_control_sequences_from_a_trace_are_shown_escaped(tmp_path, capsys):
    lines = [line.replace('"net.3"', json.dumps(HOSTILE)).replace('"train.py"', '"t\\u001b[31m.py"')
             for line in _lines(dying_relu())]
    path = _write(tmp_path, lines)
    code, out, err = _explain(path, capsys)
    assert code == 0 and "\x1b" not in out + err and "\x07" not in out + err
    assert "net.3\\x1b[2J" in out
    code, out, _ = _explain(path, capsys, "--json")
    assert code == 0 and HOSTILE in {h["layer"] for h in json.loads(out)["hypotheses"]}


# ---- bounded reading: a layer flapping for a long run costs what a few flaps do ---------------
def test_a_flapping_layer_is_folded_after_a_few_stretches(tmp_path, capsys):
    from neuraldbg_cli.explain.runs import KEPT_EPISODES

    t = TraceMaker()
    for k in range(1000):
        t.tr(10 + 4 * k, "net.1", "dead", dead_ratio=0.95, units=64, rms=0.01)
        t.tr(12 + 4 * k, "net.1", "normal", rms=0.3)
    t.tr(5000, "net.1", "dead", dead_ratio=0.95, units=64, rms=0.01)
    path = t.end(5001).write(tmp_path / "flap.jsonl")
    code, out, _ = _explain(path, capsys, "--json", "--fail-on", "dead")
    assert code == 3
    found = [h for h in json.loads(out)["hypotheses"] if h["layer"] == "net.1"]
    assert len(found) == KEPT_EPISODES
    assert any(f"then {1001 - KEPT_EPISODES} more unhealthy stretch" in e
               for h in found for e in h["evidence"])
    code, out, _ = _explain(path, capsys)
    assert code == 0 and "net.1 (ReLU) died at step 10" in out


def test_transitions_of_a_layer_written_out_of_order_are_read_in_step_order(tmp_path, capsys):
    t = TraceMaker().tr(50, "net.3", "normal", rms=0.3)
    t.events.append(dict(t.events[-1], step=20, to="dead", **{"from": "normal"}))
    code, out, _ = _explain(t.end(80).write(tmp_path / "t.jsonl"), capsys, "--json")
    dead = [h for h in json.loads(out)["hypotheses"] if h["symptom"] == "dead"]
    assert code == 0 and [h["step"] for h in dead] == [20]
