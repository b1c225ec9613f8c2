"""Cause rules: what started a failure (CAUSES), each with its evidence and a concrete fix."""
from __future__ import annotations

from .. import states
from ..trace import INPUT_LAYER
from . import dynamics, mistakes, norms, outputs, precision, rates, residuals, samples, stalls
from .echoes import WINDOW
from .finding import Finding
from .residuals import RESIDUAL
from .runs import ACT, GRAD, is_number

LR_WINDOW = 20      # steps: how long after a learning-rate increase a failure is blamed on it
PEAK_RISE = 3.0     # a rise this large stays to blame while the rate it reached is in force
UNSCALED_RMS = 20.0   # input rms from which data looks unstandardised (images in 0..255: ~100)
# ... and where the model's first activation is a sigmoid/tanh that saturates: default init
# passes ~0.6x the input's rms to it, and a tanh saturates from ~2 (pixels in 0..16: rms ~8)
SQUASH_UNSCALED_RMS = 4.0
# Weight decay from which an adaptive optimizer that adds it to the gradient (Adam's L2,
# unlike AdamW's decoupled decay) is pulled by it more than by the loss, once the gradient
# has shrunk: it normalises the sum, so the decay alone makes full steps towards zero.
HEAVY_DECAY = 0.01
_ACTIVATION_KINDS = ("relu", "smooth", "sigmoid", "tanh")
_UPDATE = states.UPDATE.name
# States a learning rate too high can bring about.
_LR_STATES = ("dead", "saturated", "exploding", "nonfinite", "spiking", "diverging", "too_large")


_FIX_LR = {
    "dead": "Lower the learning rate or warm it up to its peak over a few hundred steps; "
            "LeakyReLU or GELU keep units from dying for good.",
    "exploding": "Lower the learning rate (or warm it up) and clip gradients: "
                 "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) before optimizer.step().",
}
_FIX_LR["nonfinite"] = _FIX_LR["exploding"]
_FIX_INIT = {
    "dead": "Re-initialise the layer feeding it: He init (nn.init.kaiming_normal_, "
            "nonlinearity='relu') and a small positive bias (e.g. 0.01); look for a large "
            "negative bias.",
    "saturated": "Use Xavier/Glorot init (smaller weights) and normalise the inputs so "
                 "pre-activations start near zero.",
    "exploding": "Use a smaller initialisation (Xavier/He with the right gain) and clip gradients.",
    "vanishing": "Use He/Xavier init with the gain of each activation, and add normalisation "
                 "so the gradient reaches the first layers.",
    "nonfinite": "Check the initial weights for NaN/inf or extreme values (custom init, loaded "
                 "checkpoint).",
}
_FIX_ARCH = ("Add normalisation (LayerNorm/BatchNorm) or residual connections between the "
             "saturating layers, or switch them to ReLU-family/GELU activations.")


def bad_batch(ep, ctx):
    """The outermost module's input was already NaN/inf or off-scale: the data, not the
    model, started it."""
    if ep.layer != INPUT_LAYER:
        return None
    if ep.state == "nonfinite":
        return Finding("input_data", 0.9, "the data was bad before any layer ran",
                       (f"at step {ep.onset} the values entering the model were already non-finite: "
                        "no layer produced them",),
                       "Sanitize or filter the batch: find samples with NaN/inf in the data "
                       "pipeline (torch.isfinite) and drop or repair them.")
    return Finding("input_data", 0.7, "the data changed scale before any layer ran",
                   (f"at step {ep.onset} the values entering the model already had another scale: "
                    "no layer produced them",),
                   "Check the data pipeline for batches of another scale (missing "
                   "normalisation, corrupt or outlier samples); normalise or filter them.")


def copied_units(ep, ctx):
    """Units that are copies of one another after training steps: they started equal (zero
    or constant weights) and get equal gradients, so no step tells them apart."""
    if ep.signal != _UPDATE or ep.state != "symmetric":
        return None
    spread = ep.stats.get("spread")
    within = "exactly" if spread == 0 else f"within {spread:.1g} of the largest weight" \
        if is_number(spread) else "nearly"
    return Finding("initialization", 0.9, "its units started with equal weights (zeros or a "
                   "constant) and get equal gradients, so they stay copies of one unit",
                   (f"at step {ep.onset}, after the optimizer had moved them, every unit of "
                    f"{ep.layer} had the same incoming weights ({within})",),
                   states.UPDATE.state("symmetric").fix)


def unscaled_input(ep, ctx):
    """Features fed in raw units (rms in the tens or thousands, not ~1): the first layers'
    pre-activations are huge, so activations saturate or die and gradients blow up."""
    if ep.layer == INPUT_LAYER or ep.state not in ("saturated", "dead", "exploding", "vanishing"):
        return None
    rms = ctx.input_rms(ep.run, ep.onset)
    first = next((l for l in ctx.model_of(ep.layer) if l.get("kind") in _ACTIVATION_KINDS), {})
    squashed_first = ep.state == "saturated" and first.get("name") == ep.layer \
        and first.get("kind") in ("sigmoid", "tanh")
    if rms is None or rms < (SQUASH_UNSCALED_RMS if squashed_first else UNSCALED_RMS):
        return None
    return Finding("input_data", 0.8, f"the model's input is not standardised (rms {rms:.3g})",
                   (f"the values entering the model have rms {rms:.3g}; standardised data is "
                    "near 1",),
                   "Standardise the input features (subtract the mean, divide by the std, per "
                   "feature) or scale images to [0, 1], in the data pipeline.")


def raised_learning_rate(ep, ctx):
    """The learning rate rose shortly before the onset (a jump, or a warm-up climbing past
    what the model tolerates): the bigger steps broke the layer."""
    rise = _lr_rise(ctx.hparams(ep.run), ep.onset)
    if rise is None:
        return None
    then, now, ratio, jump = rise
    lag = ep.onset - now["step"]
    change = f"{rates.shown(then['lr'])} -> {rates.shown(now['lr'])} (x{ratio:.3g})"
    when = f"at step {now['step']}" if jump else f"from step {then['step']} to step {now['step']}"
    return Finding("learning_rate", 0.85 if ratio >= 3 and lag <= WINDOW * 2 else 0.7,
                   f"the learning rate was raised {change} {_ago(lag)}",
                   (f"{now.get('optimizer', 'optimizer')} learning rate raised {change} {when}"
                    + (f", {_ago(lag)} the onset" if lag else ", the step of the onset"),),
                   _FIX_LR.get(ep.state, "Lower the learning rate or warm it up gradually."))


def _lr_rise(hparams: list, onset: int):
    """(hparams then, hparams now, ratio, one jump?): the largest rise of an optimizer's
    learning rate over the LR_WINDOW steps up to the onset, if at least x1.5; else None."""
    best = None
    for seen in rates.by_optimizer(hparams, onset):
        early = [h for h in seen if h["step"] <= onset - LR_WINDOW] or seen[:1]
        then, now = early[-1], seen[-1]
        ratio = rates.ratio(now["lr"], then["lr"])
        if ratio >= 1.5 and onset - now["step"] <= LR_WINDOW and (best is None or ratio > best[2]):
            best = (then, now, ratio, seen.index(now) - seen.index(then) == 1)
    return best


def long_at_peak(ep, ctx):
    """The learning rate climbed (a jump, or a warm-up) to the run's highest well before the
    onset and is still there: the model stood the peak for a while, then broke under it."""
    if ep.state not in _LR_STATES or _lr_rise(ctx.hparams(ep.run), ep.onset) is not None:
        return None
    for seen in rates.by_optimizer(ctx.hparams(ep.run), ep.onset):
        climb = rates.climb(seen)
        if climb is None:
            continue
        then, reached, now = climb
        ratio = rates.ratio(now["lr"], then["lr"])
        if ratio < PEAK_RISE:
            continue
        lag = ep.onset - reached["step"]
        change = f"{rates.shown(then['lr'])} -> {rates.shown(now['lr'])} (x{ratio:.3g})"
        how = (f"was raised {change} at step {reached['step']}" if then is seen[seen.index(reached) - 1]
               else f"climbed {change} from step {then['step']} to step {reached['step']}")
        return Finding("learning_rate", 0.75,
                       f"the learning rate {how} and was at the run's highest from then to the "
                       f"onset, {lag} steps later",
                       (f"{now.get('optimizer', 'optimizer')} learning rate {how}, at its peak for "
                        f"the {lag} steps up to the onset",),
                       _FIX_LR.get(ep.state, "Lower the peak learning rate, or decay it sooner."))
    return None


def high_learning_rate(ep, ctx):
    """A learning rate that is large for its optimizer when a layer dies or blows up, or the
    loss swings or stalls."""
    if ep.state not in (*_LR_STATES, "stalled"):
        return None
    h = rates.in_force(ctx.hparams(ep.run), ep.onset)
    lr = rates.peak((h or {}).get("lr"))
    opt = (h or {}).get("optimizer", "")
    # (LBFGS's rate scales a line search's first try: 1 is its default, not a high rate)
    if lr < (0.01 if opt in rates.ADAPTIVE else 1.0) or opt == "LBFGS":
        return None
    return Finding("learning_rate", 0.55, f"the learning rate {lr:g} is high for {opt}",
                   (f"{opt} learning rate {lr:g} in effect at step {ep.onset}",),
                   _FIX_LR.get(ep.state, "Lower the learning rate."))


def heavy_weight_decay(ep, ctx):
    """A gradient that faded while Adam-style steps followed a large L2 weight decay added to
    it: the weights were pulled to zero and the layer learnt nothing more."""
    if ep.state != "vanishing":
        return None
    for seen in rates.by_optimizer(ctx.hparams(ep.run), ep.onset):
        first = seen[0]
        opt, decay = first.get("optimizer", ""), first.get("weight_decay")
        if opt in rates.ADAPTIVE and opt != "AdamW" and is_number(decay) \
                and decay >= HEAVY_DECAY:
            return Finding("learning_rate", 0.7,
                           f"{opt}'s weight_decay {decay:g} is added to the gradient and "
                           "outweighs it, pulling the weights to zero",
                           (f"{opt} weight_decay {decay:g}: added to each gradient before "
                            f"{opt} normalises the step",),
                           "Lower weight_decay (1e-4 to 5e-4 for Adam's L2), or use AdamW, "
                           "whose decay is decoupled from the gradient (typically 0.01-0.1).")
    return None


def present_from_start(ep, ctx):
    """Unhealthy from the layer's first observation: the initial weights put it there."""
    if ep.previous is not None or ep.signal not in (ACT, GRAD):
        return None
    return Finding("initialization", 0.75, f"{ep.state} from its first observed step, so the "
                   "initial weights put it there",
                   (f"{ep.state} from its first observation (step {ep.onset})",),
                   _FIX_INIT.get(ep.state, "Use He init for ReLU layers and Xavier for "
                                 "sigmoid/tanh, and add normalisation."))


def deep_saturating_stack(ep, ctx):
    """Saturating activations (sigmoid/tanh) stacked deep without normalisation: each one
    shrinks the gradient, so the first layers learn nothing."""
    if ep.state not in ("saturated", "vanishing"):
        return None
    layers = ctx.model_of(ep.layer)
    squash = [l for l in layers if l.get("kind") in ("sigmoid", "tanh")]
    if len(squash) < 3 or _has_norm(layers):
        return None
    return Finding("architecture", 0.8,
                   f"{len(squash)} sigmoid/tanh layers are stacked without normalisation",
                   (f"{len(squash)} sigmoid/tanh layers and no normalisation layer in the model",),
                   _FIX_ARCH)


def deep_without_norm(ep, ctx):
    """Many weight layers and no normalisation or residual path: the gradient shrinks on its
    way back. (A residual net's blocks carry it: ReZero's gates crossing 0 are no depth.)"""
    layers = ctx.model_of(ep.layer)
    weights = [l for l in layers if l.get("kind") == "param"]
    if ep.state != "vanishing" or len(weights) < 8 or _has_norm(layers) \
            or any(signal == RESIDUAL for _, signal in ctx.runs[ep.run].tracks):
        return None
    return Finding("architecture", 0.6, f"{len(weights)} weight layers deep without normalisation",
                   (f"{len(weights)} Linear/conv layers and no normalisation layer in the model",),
                   _FIX_ARCH)


def unexplained(ep, ctx):
    """Nothing in the trace points at a cause: say so, and give the usual remedy."""
    known = states.state_of(ep.signal, ep.state)
    return Finding("unknown", 0.55, "no learning-rate change, bad input or initial state "
                   "explains it", (), known.fix if known is not None and known.fix
                   else "Lower the learning rate.")


# In order of preference where two are equally strong (max keeps the first).
CAUSES = [outputs.output_mismatch, mistakes.loop_mistake, stalls.stalled_loss,
          samples.blamed_samples, bad_batch, copied_units,
          precision.scaler_trouble, precision.rounded_probability, precision.float16_overflow,
          precision.eps_underflow,
          stalls.unscaled_targets, norms.batch_statistics,
          residuals.residual_growth, unscaled_input,
          raised_learning_rate, long_at_peak, dynamics.rate_too_high, high_learning_rate,
          dynamics.weights_off_scale, heavy_weight_decay,
          present_from_start, deep_saturating_stack, deep_without_norm, residuals.residual_collapse,
          stalls.no_gradient, unexplained]


def _ago(n: int) -> str:
    return "in the same step" if n == 0 else f"{n} step before" if n == 1 else f"{n} steps before"


def _has_norm(layers) -> bool:
    return any("Norm" in str(l.get("type", "")) for l in layers)
