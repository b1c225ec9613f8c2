"""Detection thresholds: frozen defaults mirrored by the packaged thresholds.yaml (the annotated
copy users start from: `neuraldbg thresholds`), and a strict loader."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from . import states
from .errors import InputError
from .threshold_sections import (  # noqa: F401 - the sections are read from here too
    AnomalyThresholds,
    GradientThresholds,
    InitThresholds,
    InputThresholds,
    LoopThresholds,
    LossThresholds,
    NormThresholds,
    OutputThresholds,
    ReluThresholds,
    ResidualThresholds,
    ScalerThresholds,
    SmoothThresholds,
    SquashThresholds,
    SummaryThresholds,
    UpdateThresholds,
    VerdictThresholds,
)


@dataclass(frozen=True)
class Thresholds:
    relu: ReluThresholds = field(default_factory=ReluThresholds)
    smooth: SmoothThresholds = field(default_factory=SmoothThresholds)
    sigmoid: SquashThresholds = field(default_factory=SquashThresholds)
    tanh: SquashThresholds = field(default_factory=SquashThresholds)
    input: InputThresholds = field(default_factory=InputThresholds)
    anomaly: AnomalyThresholds = field(default_factory=AnomalyThresholds)
    gradient: GradientThresholds = field(default_factory=GradientThresholds)
    update: UpdateThresholds = field(default_factory=UpdateThresholds)
    loss: LossThresholds = field(default_factory=LossThresholds)
    loop: LoopThresholds = field(default_factory=LoopThresholds)
    scaler: ScalerThresholds = field(default_factory=ScalerThresholds)
    output: OutputThresholds = field(default_factory=OutputThresholds)
    norm: NormThresholds = field(default_factory=NormThresholds)
    residual: ResidualThresholds = field(default_factory=ResidualThresholds)
    init: InitThresholds = field(default_factory=InitThresholds)
    summary: SummaryThresholds = field(default_factory=SummaryThresholds)
    verdict: VerdictThresholds = field(default_factory=VerdictThresholds)
    debounce_steps: int = 2
    recovery_growth: int = 4
    fail_on: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["fail_on"] = list(self.fail_on)
        d["verdict"]["at_end"] = list(self.verdict.at_end)
        return d


# Valid ranges, by dotted key; a key absent here accepts any positive number.
_RATIOS = {"dead_ratio", "saturated_ratio", "min_grad", "sparsity_jump", "smoothing", "scale_smoothing",
           "vanishing_ratio", "stall_fraction", "collapse_ratio", "exploding_share", "symmetric_spread"}
_AT_LEAST_ONE = {"magnitude_factor", "exploding_factor", "spike_factor", "diverging_factor",
                 "scale_factor", "growth", "branch_growth"}


def parse_states(text: str, *, what: str = "--fail-on") -> tuple[str, ...]:
    """'dead,nonfinite' -> ('dead', 'nonfinite'); 'none' or '' -> ()."""
    items = [s.strip().lower() for s in text.split(",") if s.strip()]
    return _check_states(items, what)


def _check_states(items: list, what: str) -> tuple[str, ...]:
    """Any state of the registry other than good health may gate, warning signs (anomalous)
    included: the gate names its states, so it is not limited to what counts as a failure."""
    if items == ["none"]:
        return ()
    known = states.problem_names()  # read now: a detector may have registered since import
    for s in items:
        if s not in known:
            raise InputError(f"{what}: unknown state {s!r} (expected one of: "
                             f"{', '.join(known)}, or none)")
    return tuple(dict.fromkeys(items))


def _check_number(key: str, name: str, value, want_int: bool):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{key}: expected a number, got {value!r}")
    if want_int and not isinstance(value, int):
        raise InputError(f"{key}: expected an integer, got {value!r}")
    if not math.isfinite(value):
        raise InputError(f"{key}: must be finite, got {value!r}")
    if name in _RATIOS and not 0 < value <= 1:
        raise InputError(f"{key}: must be in (0, 1], got {value!r}")
    if name in _AT_LEAST_ONE and value <= 1:
        raise InputError(f"{key}: must be greater than 1, got {value!r}")
    if name == "tail":
        if value < 0:
            raise InputError(f"{key}: must be >= 0, got {value!r}")
    elif name not in _RATIOS and value <= 0:
        raise InputError(f"{key}: must be positive, got {value!r}")
    return value


def _merge(cls, default, data, prefix: str):
    if not isinstance(data, dict):
        raise InputError(f"{prefix or 'thresholds'}: expected a mapping, got {data!r}")
    known = {f.name: f for f in fields(cls)}
    changes = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if name not in known:
            raise InputError(f"unknown key {key!r}")
        current = getattr(default, name)
        if dataclasses.is_dataclass(current):
            changes[name] = _merge(type(current), current, value, key)
        elif name in ("fail_on", "at_end"):
            if isinstance(value, str):
                changes[name] = parse_states(value, what=key)
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                changes[name] = _check_states([v.lower() for v in value], key)
            else:
                raise InputError(f"{key}: expected a list of states, got {value!r}")
        else:
            changes[name] = _check_number(key, name, value, isinstance(current, int))
    merged = dataclasses.replace(default, **changes)
    if isinstance(merged, AnomalyThresholds) and merged.warmup > merged.window:
        raise InputError(f"{prefix}.warmup: must not exceed {prefix}.window")
    if isinstance(merged, AnomalyThresholds) and merged.exit > merged.enter:
        raise InputError(f"{prefix}.exit: must not exceed {prefix}.enter")
    if isinstance(merged, LossThresholds) and merged.start_steps > merged.stall_after:
        raise InputError(f"{prefix}.start_steps: must not exceed {prefix}.stall_after")
    return merged


def from_mapping(data) -> Thresholds:
    """Defaults overridden by `data` (a parsed YAML document); raises InputError naming the key."""
    if data is None:
        return Thresholds()
    return _merge(Thresholds, Thresholds(), data, "")


def defaults_text() -> str:
    """The annotated defaults file shipped in the package (the repository's thresholds.yaml)."""
    from importlib.resources import files

    return files(__package__).joinpath("thresholds.yaml").read_text(encoding="utf-8")


def load_thresholds(path: str | Path | None) -> Thresholds:
    """Read a thresholds YAML file; None gives the defaults."""
    if path is None:
        return Thresholds()
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"thresholds file not found: {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read thresholds file {p}: {e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"thresholds file {p}{where}: not valid YAML") from None
    try:
        return from_mapping(data)
    except InputError as e:
        raise InputError(f"thresholds file {p}: {e}") from None
