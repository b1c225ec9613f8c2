"""Cause rules for a model that does not learn: a loss stalled near its starting level, and
gradients that are exactly zero in every layer. A stall has a cause: steps too small for the
weights (a learning rate too low), no gradient at all, or targets with no signal (the weights
move, the loss does not follow: a finding, never counted in the verdict). An output that
cannot reach its targets is told by outputs.py, the stall then being its echo."""
from __future__ import annotations

from .. import states
from . import rates
from .dynamics import HEALTHY_UPDATE
from .finding import Finding
from .runs import GRAD, is_number

LOSS = states.LOSS.name

_FIX_LOW = ("Raise the learning rate (try 10x, then 3x steps) until updates are near 1e-3 of "
            "the weights; or switch to Adam (lr 1e-3), which scales its steps per parameter.")
_FIX_NO_SIGNAL = ("Check that each target belongs to its input: shuffle inputs and targets "
                  "together (one permutation, or a TensorDataset), pick the right target "
                  "column, and make sure the targets carry information about the inputs.")
_FIX_NO_GRADIENT = ("Make the loss depend on the weights: no softmax over a single unit, no "
                    "activation that is flat everywhere on the output (a ReLU on the only unit), "
                    "no argmax/round/.item()/detach() between the model and the loss.")


def stalled_loss(ep, ctx):
    """A stalled loss, with the median update the detector measured over the stall."""
    if ep.signal != LOSS or ep.state != "stalled":
        return None
    moved = ep.stats.get("update_median")
    start, now = ep.stats.get("loss_start"), ep.stats.get("loss_median")
    level = (f"the loss stayed at {now:.4g} against {start:.4g} at the start"
             if is_number(start) and is_number(now) else "the loss stayed near its start")
    if not is_number(moved):
        return None
    if ep.stats.get("no_signal"):
        return Finding("input_data", 0.7, f"the weights kept moving (a median update of "
                       f"{moved:.2g} of their norm a step) while {level}: the targets carry "
                       "no signal the model can learn from",
                       (f"{level} after {ep.onset} steps, while the layers' updates were "
                        f"{moved:.2g} of their weights a step (healthy: ~1e-3)",),
                       _FIX_NO_SIGNAL)
    h = rates.in_force(ctx.hparams(ep.run), ep.onset)
    lr = f" ({rates.shown(h['lr'])} for {h.get('optimizer', 'the optimizer')})" if h else ""
    return Finding("learning_rate", 0.85, f"updates of only {moved:.2g} of the weights a step "
                   f"(healthy: ~1e-3): the learning rate{lr} is too low to move the loss",
                   (f"{level} after {ep.onset} steps",
                    f"the layers' median update was {moved:.2g} of their weights' norm a step, "
                    f"{HEALTHY_UPDATE / max(moved, 1e-12):.0f}x below the healthy ~1e-3"),
                   _FIX_LOW)


def no_gradient(ep, ctx):
    """Every layer's gradient exactly zero while the loss is not: the loss does not depend
    on the weights."""
    if ep.signal != GRAD or ep.state != "vanishing" or ep.stats.get("all_zero") is not True:
        return None
    layers = ctx.model_of(ep.layer)
    last = layers[-1] if layers else {}
    kind = str(last.get("type", ""))
    why = {"Softmax": "the model ends in a Softmax, which over a single unit is the constant 1",
           "LogSoftmax": "the model ends in a LogSoftmax, which over a single unit is the "
                         "constant 0",
           "ReLU": "the model ends in a ReLU, which passes no gradient once it outputs 0"}.get(kind)
    loss = ep.stats.get("loss")
    evidence = (f"every layer's gradient was exactly 0 at step {ep.onset}"
                + (f" while the loss was {loss:.4g}" if is_number(loss) else ""),)
    if why is not None:
        return Finding("architecture", 0.85, f"no gradient reaches any layer: {why}",
                       (*evidence, f"the model's last layer is {last.get('name')} ({kind})"),
                       _FIX_NO_GRADIENT)
    return Finding("training_loop", 0.7, "no gradient reaches any layer: the loss does not "
                   "depend on the weights", evidence, _FIX_NO_GRADIENT)
