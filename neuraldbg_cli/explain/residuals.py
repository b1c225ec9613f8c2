"""Residual health: the cause rule of a residual stream that grows geometrically along the
blocks, and the echo telling what it does to the layers after it (their outputs blow up or
turn NaN, every gradient explodes). The block named is the first of the run in forward
order: the origin, not the output layer where the numbers overflow. A block whose branch
adds nothing (collapsed) is the echo of what stopped the branch (its layers never learn, or
are dead inside); with no such sign, its own cause rule says what is left."""
from __future__ import annotations

from .. import states
from .finding import Finding
from .runs import ACT, GRAD, is_number

RESIDUAL = states.RESIDUAL.name
_LOSS = states.LOSS.name
_UPDATE = states.UPDATE.name
_NORM = states.NORM.name
# what, inside a branch, stops it adding anything: (signal, state) -> what it does to it
_STOPS_BRANCH = {(_UPDATE, "frozen"): "never changes", (_UPDATE, "detached"): "gets no gradient",
                 (ACT, "dead"): "is dead", (_NORM, "collapsed"): "has its gain collapsed"}

_FIX_INIT = ("Scale each residual branch down at init: zero-initialise its last layer (each "
             "block starts as the identity) or multiply it by 1/sqrt(number of blocks); He "
             "init is right for a plain ReLU stack, not for a branch added to its input.")
_FIX_ARCH = ("Normalise inside each branch (pre-norm: x + f(LayerNorm(x))), or scale the branch "
             "(x + alpha * f(x) with a small learnable alpha); clip gradients meanwhile.")


def residual_growth(ep, ctx):
    """A run of blocks each multiplying the stream: `initialization` when present from the
    first step (the initial branch scale), else `architecture` when the blocks have no
    normalisation to hold the stream's scale."""
    s = ep.stats
    if ep.signal != RESIDUAL or ep.state != "exploding" or not is_number(s.get("run_blocks")):
        return None         # (no run in the stats: a trace of another writer, nothing to quote)
    layers = ctx.model_of(ep.layer)
    inside = [l for l in layers if str(l.get("name", "")).startswith(ep.layer + ".")]
    normed = any("Norm" in str(l.get("type", "")) for l in inside)
    evidence = [growth_line(ep)]
    if ep.previous is None or ep.onset == 0:
        evidence.append(f"the stream grows so from step {ep.onset}, the first observed: the "
                        "initial scale of the branches puts it there")
        return Finding("initialization", 0.9, "each residual branch starts larger than its input, "
                       "so the stream multiplies from block to block", tuple(evidence), _FIX_INIT)
    if normed:
        return None     # (normalised blocks that grow later: the learning-rate rules say why)
    if inside:
        evidence.append(f"no normalisation layer inside {ep.layer}: nothing holds the stream's "
                        "scale as the branches learn")
    return Finding("architecture", 0.8, "the residual branches grew larger than the skip, "
                   "and nothing in the blocks normalises the stream", tuple(evidence), _FIX_ARCH)


def growth_line(ep) -> str:
    """'the residual stream grows x1.7 per block from blocks.0 (rms 1.35 -> 3.2e5 over 23
    blocks)'."""
    s = ep.stats
    n, g = s.get("run_blocks"), s.get("run_growth")
    if not is_number(n) or not is_number(g):
        return f"the residual stream grows x{_num(s.get('growth'))} through {ep.layer}"
    start = "from " + ep.layer if s.get("run_index") in (0, None) else \
        f"through {ep.layer} (block {_num(s.get('run_index'))} of the run)"
    return (f"the residual stream grows x{g:.3g} per block {start} (rms "
            f"{_num(s.get('run_rms_from'))} -> {_num(s.get('run_rms_to'))} over {_num(n)} blocks)")


def residual_growth_spreads(a, b, ctx):
    """A residual stream growing along the blocks feeds every layer after them ever larger
    values (they blow up or turn NaN, later blocks grow with it) and makes every gradient,
    of the layers before the run as well, explode; the loss goes with it."""
    if a.signal != RESIDUAL or a.state != "exploding" or b.run != a.run:
        return None
    if b.onset < a.onset or (a.end is not None and b.onset > a.end + 5):
        return None
    after = b.pos > a.pos
    if (b.signal == RESIDUAL and b.state == "exploding" and after) or \
            (b.signal == ACT and after and b.state in ("nonfinite", "anomalous", "saturated")) or \
            (b.signal == GRAD and b.state in ("exploding", "nonfinite")) or \
            (b.signal == _LOSS and b.state in ("nonfinite", "diverging", "spiking")):
        return (f"the residual stream grows from block to block from {a.layer} (since step "
                f"{a.onset}): what follows it, and every gradient, grows with it")
    return None


def residual_collapse(ep, ctx):
    """A branch adding nothing to its skip, with nothing inside it failing first (that would
    be the origin: `branch_stopped_skips_block`): a branch scaled to zero that stays there,
    by its design or its initialisation."""
    if ep.signal != RESIDUAL or ep.state != "collapsed":
        return None
    known = states.state_of(RESIDUAL, "collapsed")
    return Finding("architecture", 0.7, "its branch adds nothing to its input: the block is "
                   "skipped, its layers are dead weight", (_collapse_line(ep),), known.fix)


def branch_stopped_skips_block(a, b, ctx):
    """A layer inside a block's branch that never learns (in no optimizer, a learning rate
    of 0, the graph cut) or is dead makes the branch add nothing: the block collapses."""
    if b.signal != RESIDUAL or b.state != "collapsed" or a.run != b.run \
            or not a.layer.startswith(b.layer + "."):
        return None
    what = _STOPS_BRANCH.get((a.signal, a.state))
    if what is None or a.onset > b.onset or (a.end is not None and a.end < b.onset):
        return None
    return (f"{a.layer}, inside {b.layer}'s branch, {what} (since step {a.onset}): the branch "
            f"adds nothing, {_collapse_line(b)}")


def _collapse_line(ep) -> str:
    ratio = ep.stats.get("branch_ratio")
    size = f"{ratio:.3g}" if is_number(ratio) else "nothing"
    return (f"the branch of {ep.layer} adds {size} x its input (||out - in|| / ||in||) from step "
            f"{ep.onset}: the block passes its input on unchanged")


def _num(v) -> str:
    return f"{v:.3g}" if is_number(v) else "?"
