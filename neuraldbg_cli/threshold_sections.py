"""The sections of the detection thresholds, one frozen dataclass a signal (thresholds.py
gathers them into `Thresholds`; the packaged thresholds.yaml tells each number)."""
from __future__ import annotations

from dataclasses import dataclass


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
    moving_share: float = 0.01
    decay_share: float = 0.5
    fitted: float = 1e-4
    exploding_norm: float = 1e3
    exploding_factor: float = 100.0
    exploding_share: float = 0.05


@dataclass(frozen=True)
class UpdateThresholds:
    """Per layer: the relative update ||dW|| / ||W|| of its parameters at each optimizer step,
    estimated from a fixed sample of each parameter's elements."""
    too_large: float = 0.3
    min_values: int = 16
    warmup: int = 10
    frozen_steps: int = 3
    sample: int = 256
    symmetric_spread: float = 1e-4
    symmetric_first: int = 5
    symmetric_every: int = 100


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
    long_window: int = 100


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
    row_sum_tolerance: float = 1.0e-3
    class_weight_share: float = 1.3
    class_weight_targets: int = 256
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
    moving_update: float = 1e-2


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
class ScalerThresholds:
    """torch.amp.GradScaler: SKIPPING is at least `skip_share` of the last `window` steps
    skipped with the scale falling; COLLAPSED the scale fallen below `collapse_scale`."""
    window: int = 8
    skip_share: float = 0.5
    collapse_scale: float = 1.0


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
    recurring_within: int = 500
    at_end: tuple[str, ...] = ("stalled", "symmetric")
