"""What a detector is: a signal, the modules it watches, the reductions it needs, a judge.

A detector never touches a tensor. It says, once per module, which reductions it needs
(`needs`); the hooks compute the union of every detector's needs for that module, and the
step end batches them, for all layers and all detectors, into the step's one host read. Each
step it is handed plain numbers (an `Observation`) with its own bounded history of the
layer, and `judge` decides the state. To add one, write a file that subclasses `Detector`,
registers its `Signal` with `neuraldbg_cli.states.register` if it is new, and calls
`neuraldbg_cli.observe.detectors.register` with the class: nothing else changes.
"""
from __future__ import annotations

from typing import NamedTuple

from ...states import Signal
from ...thresholds import Thresholds

# Reductions a detector may need; their numbers arrive in the Observation fields named.
OUTPUT_NORM = "output_norm"          # rms (NaN/inf when any output value is)
UNIT_ACTIVITY = "unit_activity"      # inactive, units: units inactive all step (ReLU, smooth)
UNIT_SATURATION = "unit_saturation"  # saturated, units: units saturated (sigmoid, tanh)
INPUT_ACTIVITY = "input_activity"    # input_dead: input units zero all step (Linear, conv)
GRAD_NORM = "grad_norm"              # grad_norm, model_max_grad_norm: at the optimizer step
#                                      (with update_ratio and facts["median_update"], the
#                                      step's, where the updates are sampled and follow it)
PARAM_UPDATE = "param_update"        # update_ratio, facts: at the optimizer step (with GRAD_NORM)
LOSS = "loss"                        # loss, facts: of the pseudo-layer (loss), at the step end
LOOP = "loop"                        # facts: of the pseudo-layer (loop), at the step end
SCALER = "scaler"                    # facts: of the pseudo-layer (scaler), at the step end
NORM_STATS = "norm_stats"            # facts: BatchNorm drift or a norm gain (norms.py), step end
OUTPUT_REDUCTIONS = frozenset((OUTPUT_NORM, UNIT_ACTIVITY, UNIT_SATURATION, INPUT_ACTIVITY))
NOTHING = frozenset()


class Observation(NamedTuple):
    """One layer's plain numbers at one step, None where not measured. A detector that
    needs GRAD_NORM is judged at the optimizer step, on the gradient fields (and the update's,
    with PARAM_UPDATE); NORM_STATS on the facts of observe/norms.py, at the step end; LOSS
    and LOOP are asked of the pseudo-layers (loss) and (loop) (module
    None, kinds LOSS_KIND and LOOP_KIND), judged at the step end; any other on the output
    fields, at the step end."""
    kind: str                                   # activation kind (observe.kinds)
    rms: float | None = None
    inactive: float | None = None
    input_dead: float | None = None
    saturated: float | None = None
    units: int | None = None                    # (at an update: the layer's trainable values)
    is_output: bool = False                     # the model's own output layer
    grad_norm: float | None = None              # the layer's parameters together
    model_max_grad_norm: float | None = None    # the largest finite one of the optimizer's
    update_ratio: float | None = None           # ||dW|| / ||W|| of the step (sampled)
    loss: float | None = None                   # the step's loss (summed over micro-batches)
    facts: dict | None = None                   # what else a step-level detector is told


class Detector:
    """Base of the detectors: override `needs`, `judge`, and as required the rest."""

    signal: Signal

    def __init__(self, thresholds: Thresholds):
        self.th = thresholds

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        """The reductions wanted of `module` (None: the input of the outermost module);
        empty: not watched. Asked once per module, never in the hot path."""
        return NOTHING

    def history(self):
        """A new layer's bounded history (whatever `judge` reads), or None."""
        return None

    def judge(self, x: Observation, history) -> tuple:
        """(state, extra evidence) for one layer at one step; pure: reads `history`, never
        changes it. Extra evidence with "urgent": True confirms the state at once."""
        raise NotImplementedError

    def remember(self, x: Observation, history) -> None:
        """Add this step's numbers to the layer's history, after `judge`."""

    def evidence(self, x: Observation, extra: dict) -> dict:
        """The stats written with a transition; asked only when the state may change."""
        return {"rms": x.rms, **extra}
