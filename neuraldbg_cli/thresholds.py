"""Detection thresholds: frozen defaults mirrored by the packaged thresholds.yaml (the annotated
copy users start from: `neuraldbg thresholds`), and a strict loader."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from . import states
from .errors import InputError


@dataclass(frozen=True)
class ReluThresholds:
    """ReLU, ReLU6: a unit is dead when it outputs zero for the whole step."""
    dead_ratio: float = 0.9


@dataclass(frozen=True)
class SmoothThresholds:
    """GELU, SiLU, Mish: a unit is stuck in the flat negative tail when its largest output
    over the step is at most `tail` (no input reached the region where gradient flows)."""
    saturated_ratio: float = 0.9
    tail: float = 0.0


@dataclass(frozen=True)
class SquashThresholds:
    """Sigmoid, tanh: a unit is saturated when its mean local derivative over the step is
    below `min_grad` times the function's largest derivative."""
    saturated_ratio: float = 0.7
    min_grad: float = 0.05


@dataclass(frozen=True)
class InputThresholds:
    """Linear/conv layers: share of input units that are exactly zero for the whole step
    (catches functional activations such as F.relu, which have no module)."""
    dead_ratio: float = 0.9


@dataclass(frozen=True)
class AnomalyThresholds:
    """Sudden shifts of a layer's output: EWMA control charts (observe/control.py); `window`
    and `warmup` are also the gradient's exploding test's (its rolling median)."""
    window: int = 20
    warmup: int = 8
    smoothing: float = 0.1
    scale_smoothing: float = 0.05
    enter: float = 5.0
    exit: float = 3.0
    clip: float = 3.0
    magnitude_factor: float = 3.0
    sparsity_jump: float = 0.5


@dataclass(frozen=True)
class GradientThresholds:
    """Per-layer gradient norm of the layer's own parameters at the optimizer step."""
    vanishing_ratio: float = 1e-5
    vanishing_norm: float = 1e-12
    exploding_norm: float = 1e3
    exploding_factor: float = 100.0
    exploding_share: float = 0.05


@dataclass(frozen=True)
class UpdateThresholds:
    """Per layer: the relative update ||dW|| / ||W|| of its parameters at each optimizer step,
    estimated from a fixed sample of each parameter's elements."""
    too_large: float = 0.3
    warmup: int = 10
    frozen_steps: int = 3
    sample: int = 256


@dataclass(frozen=True)
class LossThresholds:
    """The loss passed to backward() (summed over a step's micro-batches), against its
    starting level (the median of its first `start_steps` steps) and its recent median. A
    stall while the layers' median update ratio is at least `moving_update` has weights that
    move while the loss does not follow: targets with no signal, a finding, not a failure."""
    start_steps: int = 5
    window: int = 20
    spike_factor: float = 3.0
    diverging_factor: float = 1.5
    stall_after: int = 100
    stall_fraction: float = 0.95
    moving_update: float = 1e-3


@dataclass(frozen=True)
class LoopThresholds:
    no_zero_grad_steps: int = 3     # mistakes of the training loop itself


@dataclass(frozen=True)
class OutputThresholds:
    """The model's output where it meets the loss and the targets (read at every step of the
    first `dense_steps`, then at one step in `every` up to step `every` x `points`, then at
    half that rate each time the run doubles in length: the pairing is the script's, not the
    batch's)."""
    beyond: float = 0.5
    one_class_steps: int = 50
    log_prob_tolerance: float = 0.05
    dense_steps: int = 20
    every: int = 10
    points: int = 20


@dataclass(frozen=True)
class NormThresholds:
    """BatchNorm: the batch mean against the running one (DRIFT); LayerNorm/GroupNorm/RMSNorm:
    the gain's rms against its first (COLLAPSED). thresholds.yaml tells each number."""
    drift: float = 0.5
    window: int = 5
    warmup: int = 20
    tiny_batch: int = 16
    collapse_ratio: float = 0.1


@dataclass(frozen=True)
class ResidualThresholds:
    """Residual blocks (out = in + branch): a stream growing block after block (EXPLODING),
    a branch adding nothing (COLLAPSED). thresholds.yaml tells each number."""
    growth: float = 1.25
    branch_growth: float = 1.4
    blocks: int = 4
    collapse_ratio: float = 1e-4
    warmup: int = 200
    window: int = 20


@dataclass(frozen=True)
class SummaryThresholds:
    """Curves, not verdicts: a `summary` event per layer at one step in `every` for `points`
    summaries, then half as often each time the run doubles; the loss every `loss_every`."""
    every: int = 10
    points: int = 100
    loss_every: int = 1


@dataclass(frozen=True)
class InitThresholds:
    """Weights at first sight against the fan-in rule for the activation after them (He for
    ReLU, Xavier/LeCun otherwise): off by more than this factor either way is named."""
    scale_factor: float = 4.0


@dataclass(frozen=True)
class VerdictThresholds:
    """Which failure episodes fail a run and which are blips (verdict.py tells the rule)."""
    hold_steps: int = 10
    recurring: int = 5
    at_end: tuple[str, ...] = ("stalled",)


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
           "vanishing_ratio", "stall_fraction", "collapse_ratio", "exploding_share"}
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
