"""Cause rules for a model that does not learn: a loss stalled near its starting level, and
gradients that are exactly zero in every layer. A stall has a cause: steps too small for the
weights (a learning rate too low), no gradient at all, or targets with no signal (the weights
move, the loss does not follow: a finding, never counted in the verdict). An output that
cannot reach its targets is told by outputs.py, the stall then being its echo."""
from __future__ import annotations

from .. import states
from ..trace import OUTPUT_LAYER
from . import rates
from .dynamics import HEALTHY_UPDATE
from .finding import Finding
from .runs import GRAD, is_number

LOSS = states.LOSS.name

_FIX_LOW = ("Raise the learning rate (try 10x, then 3x steps) until updates are near 1e-3 of "
            "the weights; or switch to Adam (lr 1e-3), which scales its steps per parameter.")
_FIX_FAST = ("Not a learning rate too low. See what the moving weights change: weights before a "
             "normalisation (their scale does not matter), embedding rows seldom used, or "
             "parameters the loss does not depend on move without lowering it; steps this "
             "large may also bounce across a narrow valley (try a rate 3-10x lower).")
FAST_UPDATE = 10 * HEALTHY_UPDATE   # a stall with steps this large: not a rate too low
_FIX_NO_SIGNAL = ("Check that each target belongs to its input: shuffle inputs and targets "
                  "together (one permutation, or a TensorDataset), pick the right target "
                  "column, and make sure the targets carry information about the inputs.")
_FIX_PLATEAU = ("Nothing to fix if the loss falls soon after; a learning-rate warm-up, a "
                "higher peak rate or another initialisation may shorten the plateau.")
_FIX_TARGETS = ("Standardise the regression targets (subtract their mean, divide by their std) "
                "and undo it for predictions; scale the input features the same way.")
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
    out, target = ep.stats.get("output_scale"), ep.stats.get("target_scale")
    if is_number(out) and is_number(target):
        return Finding("input_data", 0.85, f"the targets reach {target:.3g} while the model's "
                       f"output is of the order of {out:.3g}: at this pace it cannot reach them",
                       (f"{level} after {ep.onset} steps",
                        f"regression targets up to {target:.3g} in size, the output up to "
                        f"{out:.3g}, while the weights moved {moved:.2g} of their norm a step"),
                       _FIX_TARGETS)
    if ep.stats.get("plateau") and moved >= FAST_UPDATE:
        return Finding("unknown", 0.4, f"the loss crawls along a plateau while the weights move "
                       f"{moved:.2g} of their norm a step, {moved / HEALTHY_UPDATE:.0f}x the "
                       "healthy pace: the steps are not too small, yet they do not lower the loss",
                       (f"{level} after {ep.onset} steps, the loss smooth, the weights moving "
                        f"{moved:.2g} of their norm a step",), _FIX_FAST)
    if ep.stats.get("plateau"):
        h = rates.in_force(ctx.hparams(ep.run), ep.onset)
        lr = f" ({rates.shown(h['lr'])} for {h.get('optimizer', 'the optimizer')})" if h else ""
        return Finding("learning_rate", 0.75, f"the loss crawls along a plateau, changing "
                       f"less than {ep.stats.get('loss_jitter', 0):.1g} of itself a step: the "
                       f"learning rate{lr} is too low to leave it",
                       (f"{level} after {ep.onset} steps, the loss smooth (full batches), the "
                        f"weights moving {moved:.2g} of their norm a step",), _FIX_LOW)
    if ep.stats.get("no_signal") and ep.recovered and ep.end is not None:
        # the loss fell later: its targets had a signal, the plateau was a slow start
        return Finding("unknown", 0.6, f"the loss sat on a plateau for {ep.end - ep.onset} "
                       f"steps while the weights kept moving ({moved:.2g} of their norm a "
                       "step), then fell: a slow start, not targets without a signal",
                       (f"{level} after {ep.onset} steps, then fell from step {ep.end}",),
                       _FIX_PLATEAU)
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
    on the weights (a constant output is told by outputs.py, saturation by unscaled inputs by
    rules.unscaled_input: both are stronger)."""
    if ep.signal != GRAD or ep.state != "vanishing" or ep.stats.get("all_zero") is not True:
        return None
    loss = ep.stats.get("loss")
    return Finding("training_loop", 0.6, "no gradient reaches any layer: the loss does not "
                   "depend on the weights",
                   (f"every layer's gradient was exactly 0 at step {ep.onset}"
                    + (f" while the loss was {loss:.4g}" if is_number(loss) else ""),),
                   _FIX_NO_GRADIENT)


def unscaled_targets(ep, ctx):
    """Regression targets far beyond the output's scale (prices in the hundreds of thousands
    against an output near 1): the errors, the gradients and the updates are huge, or the
    output crawls toward the targets."""
    if ep.state not in _FROM_TARGETS:
        return None
    first = next((t for t in ctx.runs[ep.run].transitions_of(OUTPUT_LAYER)
                  if isinstance(t.get("stats"), dict)), None)
    s = first["stats"] if first is not None else {}
    if s.get("loss_fn") not in REGRESSION_LOSSES:
        return None
    scale = [max(abs(s[a]), abs(s[b])) for a, b in (("output_min", "output_max"),
                                                     ("target_min", "target_max"))
             if is_number(s.get(a)) and is_number(s.get(b))]
    if len(scale) != 2 or scale[1] < UNSCALED_TARGETS or scale[1] < UNSCALED_TARGETS * scale[0]:
        return None
    out, target = scale
    return Finding("input_data", 0.85, f"the regression targets reach {target:.3g} while the "
                   f"model's output is of the order of {out:.3g}: the targets are not scaled",
                   (f"targets {s['target_min']:.4g}..{s['target_max']:.4g}, the output "
                    f"{s['output_min']:.4g}..{s['output_max']:.4g} at step {first['step']}",),
                   _FIX_TARGETS)


UNSCALED_TARGETS = 100.0    # as the loss detector's: targets this large, and this far beyond
REGRESSION_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")   # (torch-free)
_FROM_TARGETS = ("nonfinite", "exploding", "diverging", "spiking", "too_large", "stalled")
