"""How one failure causes another: rules linking a later failure to an earlier one (ECHOES)."""
from __future__ import annotations

import math

from .. import states
from ..trace import INPUT_LAYER
from .precision import nonfinite_skips_steps
from .residuals import branch_stopped_skips_block, residual_growth_spreads
from .runs import ACT, GRAD

LOSS = states.LOSS.name
LOOP = states.LOOP.name
UPDATE = states.UPDATE.name
OUTPUT = states.OUTPUT.name
NORM = states.NORM.name

WINDOW = 5            # steps: onsets of one story differ by the debounce and a few updates
HORIZON = 4 * WINDOW  # no rule links a failure to one that ended longer ago than this
LOSS_HORIZON = 10 * WINDOW  # ... but a loss swinging again, linked across this gap
REACH = max(HORIZON, LOSS_HORIZON)  # the furthest back any rule looks


def _active(a, step: int) -> bool:
    """Is failure `a` still going at `step` (a few steps of slack for the debounce)?"""
    return a.onset <= step <= (math.inf if a.end is None else a.end + WINDOW)


def _soon(a, b) -> bool:
    return 0 <= b.onset - a.onset <= WINDOW


# Each rule(a, b, ctx) -> a reason (str) when failure b is a consequence of failure a, which
# began no later than b; else None.
def nonfinite_spreads(a, b, ctx):
    """NaN/inf in one layer's output flows into every later layer of that forward pass, into
    the loss, and so into every gradient (all-reduced across ranks)."""
    if a.signal != ACT or a.state != "nonfinite" or not _active(a, b.onset):
        return None
    if b.signal == ACT and b.run == a.run and b.pos > a.pos and b.state in ("nonfinite", "anomalous"):
        return f"NaN/inf from {a.layer} flows forward into the layers after it"
    if b.signal == GRAD and b.state in ("nonfinite", "exploding"):
        return f"NaN/inf from {a.layer} reaches the loss, so every gradient is NaN/inf"
    return None


def dead_cuts_gradients(a, b, ctx):
    """A dead (or saturated) layer passes no gradient back: the layers before it, and the
    weights of the one right after it, get zero gradients."""
    if a.signal != ACT or a.state not in ("dead", "saturated") or b.signal != GRAD:
        return None
    if b.state == "vanishing" and b.run == a.run and b.pos <= a.pos + 1 and _active(a, b.onset):
        return f"{a.layer} is {a.state}: no gradient flows back through it"
    return None


def change_spreads_forward(a, b, ctx):
    """A layer whose output dies, saturates or jumps changes the input of every layer after it."""
    bad = ("dead", "saturated", "anomalous")
    if a.signal == ACT == b.signal and a.state in bad and b.state in bad and b.run == a.run \
            and b.pos > a.pos and _soon(a, b):
        return f"{a.layer} feeds the layers after it, which changed with it"
    return None


def bigger_activations_bigger_gradients(a, b, ctx):
    """Outputs that jump in scale make the weight gradients of the layers around them jump too."""
    ratio = a.stats.get("rms_ratio")
    if a.signal == ACT and a.state == "anomalous" and isinstance(ratio, (int, float)) and ratio > 1 \
            and b.signal == GRAD and b.state == "exploding" and b.run == a.run and _soon(a, b):
        return f"{a.layer}'s output grew x{ratio:.3g}, and the gradients grew with it"
    return None


def gradient_flows_backward(a, b, ctx):
    """Backprop carries a bad gradient from a layer to the layers before it in the same step;
    an exploding or NaN gradient keeps spoiling the next steps' gradients."""
    if a.signal != GRAD or b.signal != GRAD:
        return None
    same_step = a.onset == b.onset and b.pos < a.pos and b.state == a.state
    later = a.state in ("exploding", "nonfinite") and b.state in ("exploding", "nonfinite") \
        and 0 < b.onset - a.onset <= WINDOW
    if same_step or later:
        return f"backprop carries {a.layer}'s {a.state} gradient into the layers before it"
    return None


def bad_update_corrupts_weights(a, b, ctx):
    """An optimizer step taken with exploding or NaN gradients throws the weights off, so the
    next forward passes go wrong everywhere (on every rank: the update is shared)."""
    if a.signal == GRAD and a.state in ("exploding", "nonfinite") and b.signal == ACT \
            and b.onset > a.onset and _active(a, b.onset - 1) and b.layer != INPUT_LAYER:
        return f"the update with {a.state} gradients at step {a.onset} threw the weights off"
    return None


def same_failure_other_rank(a, b, ctx):
    """The ranks of one run share weights: the same failure on another rank, as early or
    later, is a consequence of the rank where it began."""
    if a.run != b.run and (a.layer, a.signal, a.state) == (b.layer, b.signal, b.state) and _soon(a, b):
        return f"the same failure began on rank {a.rank} at step {a.onset}"
    return None


def worsens_in_place(a, b, ctx):
    """A layer that goes from one bad state straight to another tells one story, not two."""
    if (a.run, a.layer, a.signal) == (b.run, b.layer, b.signal) and a.end == b.onset \
            and b.previous == a.state:
        return f"{a.layer} was already {a.state} since step {a.onset}"
    return None


def relapses(a, b, ctx):
    """A layer that recovers and soon falls back into the same state is one weakness, not two."""
    if (a.run, a.layer, a.signal, a.state) == (b.run, b.layer, b.signal, b.state) \
            and a.end is not None and 0 <= b.onset - a.end <= HORIZON:
        return f"{a.layer} was {a.state} before, from step {a.onset} to {a.end}"
    return None


def loop_mistake_spreads(a, b, ctx):
    """A mistake of the loop itself distorts every step after it: gradients never reset sum
    up (so updates grow and the loss swings); a model trained in eval() mode runs without
    Dropout and with BatchNorm's running statistics."""
    if a.signal != LOOP or b.signal == LOOP or b.run != a.run or not _active(a, b.onset):
        return None
    if a.state == "no_zero_grad":
        return f"the gradients are never reset (since step {a.onset}): each update sums them all"
    return f"the training loop has been {a.state} since step {a.onset}"


def output_mismatch_spreads(a, b, ctx):
    """An output the loss cannot use (a constant, probabilities taken for logits, targets out
    of reach) starves or distorts the gradient of every layer: gradients vanish or blow up,
    weights stop moving, the last activations saturate, the loss stalls or swings."""
    if a.signal != OUTPUT or b.signal in (OUTPUT, LOOP) or b.run != a.run \
            or b.layer == INPUT_LAYER or not _active(a, b.onset):
        return None
    if b.signal == ACT and b.state not in ("saturated", "dead"):
        return None
    return f"the model's output has been {a.state} against its loss since step {a.onset}"


def big_updates_throw_off(a, b, ctx):
    """Updates too large for the weights move every layer far in one step: outputs jump,
    units die or saturate, gradients blow up, the loss spikes; the same steps are too large
    for the other layers. An exploding gradient or a loss spike met in the same steps tells
    the same story."""
    if b.run != a.run or b.layer == INPUT_LAYER:
        return None
    if a.signal == UPDATE and a.state == "too_large" and _active(a, b.onset) \
            and (b.signal in (ACT, GRAD, LOSS) or b.signal == UPDATE and b.state == "too_large"):
        ratio = a.stats.get("update_ratio")
        size = f" ({ratio:.2g} of its weights)" if isinstance(ratio, (int, float)) else ""
        return f"updates too large for {a.layer}'s weights{size} since step {a.onset} throw the model off"
    started = (a.signal == LOSS and a.state in ("spiking", "diverging")) or \
        (a.signal == GRAD and a.state == "exploding")
    if started and b.signal == UPDATE and b.state == "too_large" and _soon(a, b):
        return f"the same over-large steps: {a.layer} {a.state} at step {a.onset}"
    return None


def equal_weights_spread(a, b, ctx):
    """Weights initialised to zeros or a constant make copies of the units of every layer
    they touch; their relative steps are large beside weights that start at 0, and equal
    weights pass small gradients back: one story."""
    if a.signal != UPDATE or a.state != "symmetric" or b.run != a.run or not _active(a, b.onset):
        return None
    if b.signal == UPDATE and b.state in ("symmetric", "too_large") \
            or b.signal == GRAD and b.state == "vanishing":
        return f"{a.layer}'s units have been copies of one another since step {a.onset}: " \
               "the weights started equal"
    return None


def loss_swings_again(a, b, ctx):
    """A loss that spikes, settles and spikes again is one instability (a learning rate too
    high), not several failures: spikes come and go by nature, so they are linked across a
    longer gap than other relapses."""
    swings = ("spiking", "diverging")
    if a.signal == LOSS == b.signal and a.run == b.run and a.state in swings and b.state in swings \
            and a.end is not None and 0 <= b.onset - a.end <= LOSS_HORIZON:
        return f"the loss swung before, from step {a.onset} to {a.end}"
    return None


def norm_drift_spreads(a, b, ctx):
    """A BatchNorm whose batches drift from its running statistics (batches that are not
    fair samples) normalises each batch differently: the other BatchNorm layers drift with it,
    the layers after it see inputs that shift batch to batch (and die or saturate), the
    gradients and the loss swing with them."""
    if a.signal != NORM or a.state != "drift" or b.run != a.run or b.layer == INPUT_LAYER \
            or not _active(a, b.onset):
        return None
    if b.signal == NORM and b.state == "drift":
        return f"the same batches drift from the running statistics in {a.layer} since step {a.onset}"
    if b.signal == ACT and b.pos <= a.pos:
        return None
    if b.signal in (ACT, GRAD, LOSS):
        return (f"{a.layer} normalises each batch by statistics far from its running ones "
                f"(drift since step {a.onset}): what follows it shifts batch to batch")
    return None


def one_momentum_setting(a, b, ctx):
    """BatchNorm layers whose running statistics never update (momentum 0) are one setting
    of the model's (a BatchNorm factory, a conv block's class), not one failure each."""
    if a.signal == NORM == b.signal and a.state == "stale" == b.state and b.run == a.run:
        return f"momentum 0 as in {a.layer}: the same setting of the model's BatchNorm layers"
    return None


def shows_in_loss(a, b, ctx):
    """A layer that failed (dead, saturated, frozen, NaN, ...) shows in the loss: it stalls,
    rises or turns NaN while the failure lasts."""
    known = states.state_of(a.signal, a.state)
    if b.signal != LOSS or a.signal == LOSS or b.run != a.run or known is None \
            or not known.failure or not _active(a, b.onset):
        return None
    return f"{a.layer} {a.signal} {a.state} since step {a.onset} shows in the loss"


ECHOES = [nonfinite_spreads, nonfinite_skips_steps, dead_cuts_gradients, change_spreads_forward,
          bigger_activations_bigger_gradients, gradient_flows_backward, bad_update_corrupts_weights,
          same_failure_other_rank, worsens_in_place, relapses, loop_mistake_spreads,
          output_mismatch_spreads, norm_drift_spreads, one_momentum_setting,
          residual_growth_spreads,
          branch_stopped_skips_block, equal_weights_spread, big_updates_throw_off,
          loss_swings_again, shows_in_loss]
