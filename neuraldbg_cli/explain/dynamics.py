"""Cause rules from the learning dynamics: updates too large for the weights (the learning
rate, constant, or without a warm-up) and weights off their fan-in scale at first sight (the
initialisation)."""
from __future__ import annotations

from .. import states
from ..trace import INPUT_LAYER
from . import rates
from .echoes import HORIZON, WINDOW
from .finding import Finding
from .runs import ACT, GRAD, is_number

LOSS = states.LOSS.name
UPDATE = states.UPDATE.name

HEALTHY_UPDATE = 1e-3   # ||dW|| / ||W|| a step: the practitioner's rule of thumb for healthy
CALM_UPDATE = 2 * HEALTHY_UPDATE    # a loss spike with updates no larger: not the rate's
WILD_UPDATE = 10 * HEALTHY_UPDATE   # ... with updates this large: the rate's, as updates seen too large
SPIKES_BEFORE = 5 * HORIZON     # a layer's failure: the loss's spikes this many steps before
WARMUP_STEPS = 100      # a failure this early, with the full rate from step 0: no warm-up
# What updates too large bring about (in the model, the loss, or the updates themselves).
_STRUCK = ("dead", "saturated", "anomalous", "exploding", "vanishing", "nonfinite",
           "spiking", "diverging", "stalled", "too_large")
# The loss's own states that updates far too large explain (as a wild pace of the weights).
_SWUNG = ("spiking", "diverging")
# What weights far off their scale at the start bring about.
_FROM_INIT = ("dead", "saturated", "exploding", "vanishing", "nonfinite")
_RULE = {"he": "He", "xavier": "Xavier"}

_FIX_UPDATES = ("Lower the learning rate until updates are near 1e-3 of the weights (try 10x "
                "lower first), warm it up over the first few hundred steps, and clip gradients "
                "(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)).")
_FIX_SCALE = {
    "he": "Initialise with He/Kaiming (nn.init.kaiming_normal_, nonlinearity='relu'), or keep "
          "PyTorch's default init: no custom scale.",
    "xavier": "Initialise with Xavier/Glorot (nn.init.xavier_uniform_, gain for tanh 5/3), or "
              "keep PyTorch's default init: no custom scale.",
}


def rate_too_high(ep, ctx):
    """The learning rate is too high for this model, whether constant, started without a
    warm-up, or raised: updates far above ~1e-3 of the weights, or a loss that keeps spiking,
    at or before the onset."""
    if ep.state not in _STRUCK or ep.signal not in (ACT, GRAD, LOSS, UPDATE) \
            or ep.layer == INPUT_LAYER:     # (the data: no step of the model's made it)
        return None
    recent = ctx.big_updates(ep.run, ep.onset)
    big = [s for s in ctx.stretches(ep.run, UPDATE, "too_large", ep.onset)
           if is_number(s.stats.get("update_ratio"))]
    # (the spikes before the onset; for the loss itself, every other spike of the run: a loss
    # that keeps swinging is the instability a rate too high brings)
    until = ctx.runs[ep.run].last_step if ep.signal == LOSS else ep.onset
    since = -1 if ep.signal == LOSS else ep.onset - SPIKES_BEFORE   # (spikes long gone: no)
    spikes = [s for s in ctx.stretches(ep.run, LOSS, "spiking", until)
              if s.onset != ep.onset and s.onset >= since and not _calm(s)]
    n = len(spikes) + (ctx.folded(ep.run, ep.layer, LOSS) if ep.signal == LOSS else 0)
    # (a loss that spikes again and again is evidence as strong as updates seen too large)
    swings = min(0.85, 0.65 + 0.05 * n) if n >= 2 else 0.0
    wild = [s for s in ([ep] if ep.signal == LOSS and ep.state in _SWUNG else []) + spikes
            if is_number(moved := s.stats.get("update_median")) and moved >= WILD_UPDATE]
    if wild:            # (every layer's median: wider evidence than one layer's updates)
        strength = 0.85
    elif recent:
        strength = max(0.8, swings)
    elif big or swings:
        strength = max(0.75, swings)
    elif spikes and abs(ep.onset - spikes[0].onset) <= HORIZON:
        strength = 0.65
    else:
        return None
    h = rates.in_force(ctx.hparams(ep.run), ep.onset)
    lr = f" ({rates.shown(h['lr'])})" if h else ""
    evidence = [*_updates_told(recent or big), *_spikes_told(spikes, n, ep.signal == LOSS),
                *_wild_told(wild),
                _rate_story(ctx.hparams(ep.run), h, ep.onset)]
    if big:
        worst = max(s.stats["update_ratio"] for s in big)
        why = f"updates of up to {worst:.2g} of the weights a step"
    elif wild:
        why = (f"the loss {_went(wild)} while the weights moved up to "
               f"{max(s.stats['update_median'] for s in wild):.2g} of their norm a step")
    else:
        why = f"the loss spiked {_times(n, ep.signal == LOSS)}"
    return Finding("learning_rate", strength, f"{why}: the learning rate{lr} is too high for this model",
                   tuple(e for e in evidence if e), _FIX_UPDATES)


def _calm(spike) -> bool:
    """A spike while the weights moved at a healthy pace (the loss detector's median update
    ratio): a batch unlike the others or targets that moved, not steps too large."""
    moved = spike.stats.get("update_median")
    return is_number(moved) and moved <= CALM_UPDATE


def _updates_told(big: list) -> list:
    if not big:
        return []
    worst = max(big, key=lambda s: s.stats["update_ratio"])
    ratio = worst.stats["update_ratio"]
    out = [f"updates of {worst.layer} were {ratio:.2g} of its weights' norm at step {worst.onset} "
           f"(about {ratio / HEALTHY_UPDATE:.0f}x the healthy ~1e-3 a step)"]
    layers = list(dict.fromkeys(s.layer for s in big))
    if len(layers) > 1:
        more = f" and {len(layers) - 4} more" if len(layers) > 4 else ""
        out.append(f"{len(layers)} layers took updates too large for their weights from step "
                   f"{big[0].onset}: {', '.join(layers[:4])}{more}")
    return out


def _wild_told(wild: list) -> list:
    if not wild:
        return []
    worst = max(wild, key=lambda s: s.stats["update_median"])
    moved = worst.stats["update_median"]
    return [f"as the loss {_went([worst])} at step {worst.onset}, the layers' weights were moving "
            f"{moved:.2g} of their norm a step (median; about {moved / HEALTHY_UPDATE:.0f}x "
            "the healthy ~1e-3)"]


def _went(swings: list) -> str:
    """'diverged' where the loss's own episode among `swings` diverged, else 'spiked'."""
    return "diverged" if any(getattr(s, "state", None) == "diverging" for s in swings) \
        else "spiked"


def _spikes_told(spikes: list, n: int, more: bool) -> list:
    """The line on the loss's spikes: `n` of them (those folded into the loss's last kept
    stretch counted too), `spikes` those kept."""
    if not spikes:
        return []
    steps = ", ".join(str(s.onset) for s in spikes[:6]) + (", ..." if n > 6 else "")
    jumps = [s.stats["loss"] / s.stats["loss_median"] for s in spikes
             if is_number(s.stats.get("loss")) and is_number(s.stats.get("loss_median"))
             and s.stats["loss_median"] > 0]
    top = f", up to {max(jumps):.3g}x its recent median" if jumps else ""
    when = "in the run" if more else "before the onset"
    return [f"the loss spiked {_times(n, more)} {when} (step {steps}){top}"]


def _times(n: int, more: bool = False) -> str:
    """'twice', '3 times'; with more: 'twice more', '3 more times'."""
    if n in (1, 2):
        return ("once", "twice")[n - 1] + " more" * more
    return f"{n} more times" if more else f"{n} times"


def _rate_story(hparams: list, h: dict | None, onset: int) -> str:
    """How the learning rate in force came to be: constant, and if so whether warmed up."""
    if h is None:
        return ""
    same = [e for e in hparams if e.get("optimizer_index", 0) == h.get("optimizer_index", 0)
            and e["step"] <= onset]
    opt = h.get("optimizer", "optimizer")
    if len(same) != 1:
        return ""       # (a rate that changed: the learning-rate rules tell how)
    told = f"{opt} learning rate {rates.shown(h['lr'])}, constant from step {h['step']}"
    if onset <= WARMUP_STEPS and opt in rates.ADAPTIVE:
        told += ", with no warm-up"
    return told


def weights_off_scale(ep, ctx):
    """At first sight the weights feeding the layer were far off the fan-in rule of the
    activation after them (He for ReLU, Xavier otherwise): a layer unhealthy from the start
    owes it to them, and so does a loss that diverged in the run's first steps."""
    if ep.signal == states.LOSS.name:
        # (a loss that leapt from the untrained model's score in the first steps: it can be
        # told diverging only once it has a recent level, `loss.window` // 2 steps in)
        if ep.state != "diverging" or ep.onset > HORIZON:
            return None
    elif ep.state not in _FROM_INIT or ep.signal not in (ACT, GRAD) \
            or (ep.previous is not None and ep.onset > WINDOW):
        return None
    factor = ctx.init_factor(ep.run)
    layers = ctx.model_of(ep.layer)
    upto = next((i for i, l in enumerate(layers) if l["name"] == ep.layer), len(layers) - 1)
    off = [(l, _scale(l)) for l in layers[:upto + 1]]
    off = [(l, s) for l, s in off if s is not None and (s >= factor or s <= 1 / factor)]
    if not off:
        return None
    layer, scale = off[-1]      # the nearest before the failing layer feeds it
    named = layer.get("init_rule")
    named = named if isinstance(named, str) and named in _RULE else "xavier"
    rule = _RULE[named]
    times = f"{scale:.2g}x" if scale >= 1 else f"1/{1 / scale:.2g} of"
    evidence = [f"at first sight {layer['name']}'s weights had rms {layer['weight_rms']:.3g}, "
                f"{times} the {rule} scale for its fan-in ({layer['init_rms']:.3g})"]
    if len(off) > 1:
        evidence.append(f"{len(off)} weight layers up to it are off their fan-in scale: "
                        + ", ".join(f"{l['name']} {s:.2g}x" for l, s in off[:6]))
    return Finding("initialization", 0.9,
                   f"the weights of {layer['name']} started at {times} the {rule} scale",
                   tuple(evidence),
                   _FIX_SCALE[named])


def _scale(layer: dict) -> float | None:
    """weight_rms / init_rms of a model event's layer, or None where not both are known."""
    w, ref = layer.get("weight_rms"), layer.get("init_rms")
    if is_number(w) and is_number(ref) and ref > 0 and w > 0:
        return w / ref
    return None
