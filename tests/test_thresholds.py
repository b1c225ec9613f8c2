"""Thresholds: the defaults equal thresholds.yaml, and bad values are errors naming the file and
the key (missing, unreadable and non-YAML files, through the CLI: test_bad_input.py)."""
import pytest
import yaml

from conftest import REPO
from neuraldbg_cli.errors import InputError
from neuraldbg_cli.thresholds import Thresholds, from_mapping, load_thresholds, parse_states


def test_defaults_equal_repository_file():
    assert load_thresholds(REPO / "thresholds.yaml") == Thresholds()
    assert yaml.safe_load((REPO / "thresholds.yaml").read_text()) == Thresholds().to_dict()


def test_override_one_key_keeps_the_rest():
    th = from_mapping({"relu": {"dead_ratio": 0.5}, "fail_on": ["dead", "nonfinite"]})
    assert th.relu.dead_ratio == 0.5
    assert th.fail_on == ("dead", "nonfinite")
    assert th.tanh == Thresholds().tanh


@pytest.mark.parametrize("content, needles", [
    ("relu: {dead_ration: 0.9}\n", ["relu.dead_ration"]),
    ("nonsense: 1\n", ["nonsense"]),
    ('relu: {dead_ratio: "high"}\n', ["relu.dead_ratio"]),
    ("relu: {dead_ratio: 1.5}\n", ["relu.dead_ratio", "1.5"]),
    ("update: {symmetric_spread: 2}\n", ["update.symmetric_spread", "(0, 1]"]),
    ("update: {symmetric_every: 0}\n", ["update.symmetric_every"]),
    ("relu: {dead_ratio: 0}\n", ["relu.dead_ratio"]),
    ("relu: {dead_ratio: .nan}\n", ["relu.dead_ratio"]),
    ("anomaly: {window: 2.5}\n", ["anomaly.window"]),
    ("anomaly: {magnitude_factor: 0.5}\n", ["anomaly.magnitude_factor"]),
    ("debounce_steps: true\n", ["debounce_steps"]),
    ("debounce_steps: 2.5\n", ["debounce_steps"]),
    ("gradient: {exploding_norm: -1}\n", ["gradient.exploding_norm"]),
    ("fail_on: [dead, deadish]\n", ["fail_on", "deadish"]),
    ("relu: 3\n", ["relu"]),
    ("just a string\n", ["mapping"]),
], ids=["unknown-key", "unknown-section", "wrong-type", "above-range", "spread-above-range",
        "every-zero", "zero-ratio", "nan",
        "not-int", "factor-below-1", "bool-not-int", "float-not-int", "negative",
        "bad-state", "section-not-mapping", "not-mapping"])
def test_invalid_values_name_the_file_and_the_key(tmp_path, content, needles):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(InputError) as e:
        load_thresholds(path)
    message = str(e.value)
    assert "\n" not in message
    for needle in [str(path), *needles]:
        assert needle in message, (needle, message)


def test_an_empty_file_is_the_defaults(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_thresholds(empty) == Thresholds()


def test_parse_states():
    assert parse_states("dead, nonfinite") == ("dead", "nonfinite")
    assert parse_states("none") == ()
    with pytest.raises(InputError, match="unknown state 'zombie'"):
        parse_states("dead,zombie")
