"""Thresholds: the defaults equal thresholds.yaml, and bad files are errors naming the key."""
from pathlib import Path

import pytest
import yaml

from neuraldbg_cli.errors import InputError
from neuraldbg_cli.thresholds import Thresholds, from_mapping, load_thresholds, parse_states

REPO = Path(__file__).resolve().parents[1]


def test_defaults_equal_repository_file():
    assert load_thresholds(REPO / "thresholds.yaml") == Thresholds()
    assert yaml.safe_load((REPO / "thresholds.yaml").read_text()) == Thresholds().to_dict()


def test_override_one_key_keeps_the_rest():
    th = from_mapping({"relu": {"dead_ratio": 0.5}, "fail_on": ["dead", "nonfinite"]})
    assert th.relu.dead_ratio == 0.5
    assert th.fail_on == ("dead", "nonfinite")
    assert th.tanh == Thresholds().tanh


@pytest.mark.parametrize("data, key", [
    ({"relu": {"dead_ration": 0.9}}, "relu.dead_ration"),
    ({"nonsense": 1}, "nonsense"),
    ({"relu": {"dead_ratio": "high"}}, "relu.dead_ratio"),
    ({"relu": {"dead_ratio": 1.5}}, "relu.dead_ratio"),
    ({"relu": {"dead_ratio": 0}}, "relu.dead_ratio"),
    ({"anomaly": {"window": 2.5}}, "anomaly.window"),
    ({"anomaly": {"magnitude_factor": 0.5}}, "anomaly.magnitude_factor"),
    ({"debounce_steps": True}, "debounce_steps"),
    ({"gradient": {"exploding_norm": -1}}, "gradient.exploding_norm"),
    ({"fail_on": ["deadish"]}, "fail_on"),
    ({"relu": 3}, "relu"),
])
def test_invalid_values_name_the_key(data, key):
    with pytest.raises(InputError) as e:
        from_mapping(data)
    assert key in str(e.value)


def test_file_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_thresholds(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("relu: [unclosed\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_thresholds(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_thresholds(empty) == Thresholds()


def test_parse_states():
    assert parse_states("dead, nonfinite") == ("dead", "nonfinite")
    assert parse_states("none") == ()
    with pytest.raises(InputError, match="unknown state 'zombie'"):
        parse_states("dead,zombie")
