"""Cause rules for mixed precision: the number format, not the model, made a value wrong.

- The (scaler) signal: a GradScaler skipping most steps, or its scale collapsed.
- A NaN/inf after layers computing in float16 climbed toward its largest value, 65504: an
  overflow float32 (or bfloat16, of float32's range) would have held.
- A NaN/inf loss taken by hand as the log of a probability computed in bfloat16/float16:
  the probability rounded to exactly 1 (or 0), and log(1 - p) (or log p) is -inf.
- A NaN/inf after the first steps of an optimizer that holds float16 weights (a model made
  .half()) with an eps below float16's smallest value: Adam's step m / (sqrt(v) + eps) is
  m / 0 wherever the gradient's running mean square underflowed to 0.
"""
from __future__ import annotations

from .. import states
from ..trace import OUTPUT_LAYER
from .finding import Finding
from .runs import ACT, GRAD, is_number

SCALER = states.SCALER.name
LOSS = states.LOSS.name
FLOAT16_MAX = 65504.0
# A float16 layer's output rms from which its largest values are near 65504: a layer's
# largest |value| is commonly 4-30x its rms (heavy-tailed activations more).
NEAR_FLOAT16_MAX = FLOAT16_MAX / 64
CLIMB = 10.0        # ... after growing at least this much from its first rms
# From where a sigmoid rounds to exactly 1.0 (the largest value below 1 is 1 - 2^-9 in
# bfloat16, 1 - 2^-11 in float16)
_SIGMOID_ONE = {"bfloat16": 6.2, "float16": 8.3}

_FIX_ROUNDED = ("Compute the loss from the logits, where it is exact: "
                "F.binary_cross_entropy_with_logits / nn.BCEWithLogitsLoss (or F.logsigmoid(z) "
                "and F.logsigmoid(-z) for log p and log(1 - p)), F.cross_entropy / log_softmax "
                "for several classes; or take the loss in float32 (logits.float() before the "
                "sigmoid, outside autocast).")
# float16's smallest value (a subnormal): an eps below it is 0 or this in float16
FLOAT16_TINY = 2.0 ** -24
EPS_STEPS = 5       # a NaN/inf this soon after such an optimizer's first step is surely its
_FIX_EPS = ("Keep the weights and the optimizer in float32 and compute in float16 under "
            "torch.autocast (with a GradScaler); or, for float16 weights, give the optimizer an "
            "eps float16 holds (1e-4 for Adam).")
_FIX_OVERFLOW = ("Train in bfloat16 (torch.autocast(..., dtype=torch.bfloat16): float32's "
                 "range), or keep the layer that overflows in float32 "
                 "(torch.autocast(..., enabled=False) around it, its input .float()); and "
                 "keep its values from growing: weight decay, a lower learning rate, a "
                 "normalisation after it.")


def scaler_trouble(ep, ctx):
    """(scaler) skipping or collapsed: the scale, where it fell from, where the gradients
    overflowed first."""
    if ep.signal != SCALER:
        return None
    s = ep.stats
    scale, top, where = s.get("scale"), s.get("scale_top"), s.get("overflow_layer")
    lines = []
    if is_number(top) and is_number(scale):
        lines.append(f"the loss scale fell from {top:.3g} to {scale:.3g} by step {ep.onset}")
    if is_number(s.get("steps_skipped")) and is_number(s.get("steps_seen")):
        lines.append(f"{s['steps_skipped']} of the {s['steps_seen']} steps so far skipped: "
                     "their gradients held inf/NaN, so no update was applied")
    if is_number(s.get("skipped_steps")) and is_number(s.get("window")):
        lines.append(f"{s['skipped_steps']} of the last {s['window']} steps skipped")
    if where:
        lines.append(f"the gradients overflowed first in {where} (the layer nearest the loss "
                     "with inf/NaN gradients)")
    fix = states.SCALER.state(ep.state).fix
    if ep.state == "collapsed":
        return Finding("precision", 0.85, "float16 gradients overflow even with the loss "
                       "unscaled: no loss scale can fix that", tuple(lines), fix)
    return Finding("precision", 0.8, "the gradients overflow float16 at most steps, so the "
                   "scaler skips them and the model does not learn", tuple(lines), fix)


def float16_overflow(ep, ctx):
    """A non-finite value after float16 outputs climbed toward 65504."""
    if ep.state != "nonfinite" or ep.signal not in (ACT, GRAD, LOSS):
        return None
    run = ctx.runs[ep.run]
    climbs = []
    for layer, dtype in run.low.items():
        if dtype != "float16":
            continue
        points = [(step, rms) for step, rms in run.curves.get(layer, ()) if step <= ep.onset]
        if len(points) < 2:
            continue
        peak = max(points, key=lambda p: p[1])
        if peak[1] >= NEAR_FLOAT16_MAX and peak[1] >= CLIMB * max(points[0][1], 1e-12):
            climbs.append((peak[1], layer, points[0], peak))
    if not climbs:
        return None
    climbs.sort(reverse=True)
    _, layer, first, peak = climbs[0]
    lines = [f"{layer} computes in float16; its output rms climbed from {first[1]:.3g} "
             f"(step {first[0]}) to {peak[1]:.4g} (step {peak[0]}): its largest values near "
             f"float16's largest, {FLOAT16_MAX:.0f}, where they become inf",
             "float32 and bfloat16 hold values up to 3.4e38: there these values would "
             "not have overflowed"]
    if len(climbs) > 1:
        lines.append("also climbing in float16: " + ", ".join(c[1] for c in climbs[1:4]))
    return Finding("precision", 0.85, f"{layer}'s float16 output climbed toward 65504 and "
                   "overflowed", tuple(lines), _FIX_OVERFLOW)


def eps_underflow(ep, ctx):
    """A NaN/inf from the first optimizer steps on, where an optimizer steps float16 weights
    with an eps that float16 cannot hold."""
    if ep.state != "nonfinite" or ep.signal not in (ACT, GRAD, LOSS) or ep.onset < 1:
        return None
    h = next((h for h in ctx.hparams(ep.run) if h["step"] < ep.onset
              and h.get("param_dtype") == "float16" and is_number(h.get("eps"))
              and h["eps"] < FLOAT16_TINY), None)
    if h is None:
        return None
    name = h.get("optimizer") or "the optimizer"
    lines = (f"{name} steps float16 weights with eps {h['eps']:.3g}, under float16's smallest "
             f"value ({FLOAT16_TINY:.2g}): in float16 it is 0",
             "its step divides by sqrt(v) + eps: wherever a gradient is small enough that v "
             "(its running mean square) underflows float16 to 0, the step is m / 0, inf (NaN "
             "where m is 0 too)",
             f"the NaN/inf appeared at step {ep.onset}, after the weights were stepped from "
             f"step {h['step']}")
    # (at once, where some gradient is 0 or tiny from the start; later, as gradients shrink,
    # or from another cause the division did not need)
    early = ep.onset - h["step"] <= EPS_STEPS
    return Finding("precision", 0.85 if early else 0.6, f"{name}'s eps is 0 in float16, the "
                   "weights' precision, so its step divides by zero", lines, _FIX_EPS)


def rounded_probability(ep, ctx):
    """A NaN/inf loss (or the gradients it made) from a hand-written log of a probability
    computed in reduced precision, every layer's output finite at that step."""
    if ep.state != "nonfinite" or ep.signal not in (LOSS, GRAD):
        return None
    run = ctx.runs[ep.run]
    told = next((t.get("stats") for t in run.transitions_of(OUTPUT_LAYER)
                 if isinstance(t.get("stats"), dict)), None)
    if not told or told.get("loss_fn") != "log_likelihood" \
            or told.get("activation") not in ("sigmoid", "softmax") \
            or told.get("output_dtype") not in _SIGMOID_ONE:
        return None
    if any(t.get("to") == "nonfinite" and t["step"] <= ep.onset and t.get("signal") == ACT
           for t in _transitions(run)):
        return None     # (a layer's output was NaN/inf first: not the loss's own rounding)
    dtype, act = told["output_dtype"], told["activation"]
    rounds = (f"{dtype} rounds a sigmoid to exactly 1.0 once its input passes "
              f"{_SIGMOID_ONE[dtype]}, and log(1 - p) is then -inf (log p likewise at 0)"
              if act == "sigmoid" else
              f"{dtype} rounds a softmax's small probabilities to exactly 0, and log p is "
              "then -inf")
    return Finding("precision", 0.9, f"the loss takes the log of a {dtype} {act}, which "
                   "rounded to an exact 0 or 1",
                   (f"the model's output is a {dtype} {act}, and the loss is written by hand "
                    "as its log", f"every layer's output was finite at step {ep.onset}: the "
                    "NaN/inf was born in the loss", rounds), _FIX_ROUNDED)


def _transitions(run) -> list:
    return [t for tr in run.tracks.values() for t in tr.transitions]


def nonfinite_skips_steps(a, b, ctx):
    """(An echo rule, echoes.py.) A NaN/inf in the forward pass or the loss puts NaN in
    every gradient: the scaler skips each such step and halves its scale, down to nothing."""
    if b.signal != SCALER or b.run != a.run or a.state != "nonfinite" \
            or a.signal not in (ACT, GRAD, LOSS):
        return None
    if not a.onset <= b.onset <= (a.end if a.end is not None else b.onset) + 5:
        return None
    return (f"NaN/inf in {a.layer} since step {a.onset} fills every gradient: the scaler skips "
            "those steps and lowers its scale")
