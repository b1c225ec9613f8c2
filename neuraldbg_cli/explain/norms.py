"""Cause rules for normalisation health: BatchNorm statistics that drift from the running ones
because the batches are not fair samples of the data (not shuffled, sorted by class,
augmented as a whole batch, or too small); running statistics that never follow the batches
(momentum 0), a setting of the architecture."""
from __future__ import annotations

import math

from .. import states
from ..thresholds import NormThresholds
from .finding import Finding
from .runs import is_number

NORM = states.NORM.name
FAIR_SPREAD = math.sqrt(2 / math.pi)    # mean |z| of a batch mean of n fair samples: this / sqrt(n)

_FIX_SHUFFLE = ("Shuffle the training data (DataLoader(shuffle=True), or a sampler that mixes "
                "the classes in every batch) so that each batch is a fair sample of the data; "
                "where an augmentation transforms the whole batch tensor at once (one crop or "
                "colour jitter drawn for every sample), draw it per sample. Check the accuracy "
                "in eval() mode after the fix.")
_FIX_TINY = ("Use larger batches (accumulate gradients for the step size, not for BatchNorm), "
             "or replace BatchNorm with GroupNorm or LayerNorm, which need no batch statistics.")


def batch_statistics(ep, ctx):
    """BatchNorm drift in the model's first BatchNorm layer (usually with others at once): the
    batches already differ from each other before the model has transformed them, so the
    data loading, not the model, is to blame; or in any BatchNorm whose channels hold too few
    values a batch to estimate their statistics. (A gain collapse has no rule of its own: its
    state's fix, weight decay off the gains, is what explain gives.)"""
    if ep.signal != NORM:
        return None
    s = ep.stats
    if ep.state == "stale":
        return _stale(ep)
    if ep.state != "drift":
        return None
    batchnorms = [l["name"] for l in ctx.model_of(ep.layer) if "BatchNorm" in str(l.get("type", ""))]
    drifting = list(dict.fromkeys(
        st.layer for st in ctx.stretches(ep.run, NORM, "drift", ep.onset + _window(ctx, ep.run))
        if st.end is None or st.end >= ep.onset))
    if not batchnorms and "BatchNorm" in ep.module_type:
        batchnorms = [ep.layer]         # (a trace without its model event)
    n, batch = s.get("per_channel"), s.get("batch")
    # (batches too small for any BatchNorm: the one after a Linear, which normalises a
    # batch's values alone, shows it first)
    tiny = is_number(n) and n < _tiny(ctx, ep.run)
    if not tiny and (not batchnorms or batchnorms[0] not in drifting):
        return None         # (only deeper layers: the model moved, not the data)
    first = batchnorms[0] if batchnorms else ep.layer
    evidence = [f"at step {ep.onset} each batch's mean in {ep.layer} lay {_num(s.get('drift'))} "
                f"running standard deviations from BatchNorm's running mean (median "
                f"{_num(s.get('drift_median'))} over the last steps), averaged over channels"
                + (f", and {_num(s['jump'])} from the same call's batch the step before: the "
                   "batches differ from one another, not only from an average that lags"
                   if is_number(s.get("jump")) else "")
                + _fair(n, batch)]
    if len(batchnorms) > 1 and not tiny:
        others = [l for l in drifting if l in batchnorms]
        which = (f"only {first}, the first after the input, drifts" if others == [first] else
                 f"{len(others)} drift ({', '.join(others[:6])}), the first after the input "
                 f"({first}) among them")
        evidence.append(f"of the model's {len(batchnorms)} BatchNorm layers {which}: the batches "
                        "differ before the model transforms them")
    evidence += _classes(ctx.runs[ep.run], ep.onset + _window(ctx, ep.run))
    evidence.append("BatchNorm evaluates with its running statistics, which follow these batches "
                    "in turn: accuracy in eval() mode suffers even where the training loss looks fine")
    if tiny:
        evidence.insert(1, f"each channel's batch statistics rest on only {n} values (batches of "
                        f"{batch}): too few to estimate them")
        return Finding("input_data", 0.85, f"batches of {batch} are too small for BatchNorm's "
                       "batch statistics", tuple(evidence), _FIX_TINY)
    return Finding("input_data", 0.9, "each batch's statistics lie far from BatchNorm's running "
                   "statistics, so the batches are not fair samples of the data (not shuffled, "
                   "ordered by class, or augmented as a whole)", tuple(evidence), _FIX_SHUFFLE)


def _stale(ep) -> Finding:
    """BatchNorm at momentum 0 with its running statistics at 0 and 1: training normalises
    each batch by its own statistics and looks fine; eval() normalises by 0 and 1. (Every
    such layer is one setting of the model's: echoes.one_momentum_setting.)"""
    evidence = (f"{ep.layer}'s running mean and variance were still their initial 0 and 1 at "
                f"step {ep.onset}, with momentum 0: no batch can move them",
                "training normalises each batch by its own statistics and looks healthy; "
                "eval() normalises by 0 and 1, whatever the data: accuracy in eval() mode "
                "suffers")
    return Finding("architecture", 0.85, "its running statistics stay 0 and 1, so eval() "
                   "normalises with numbers that have nothing to do with the data", evidence,
                   states.state_of(NORM, "stale").fix)


def _fair(n, batch) -> str:
    """How far the batch means of fair samples lie: FAIR_SPREAD / sqrt(values), where the
    values are independent; a conv map's values within one image are not, so its batches
    may lie as far as FAIR_SPREAD / sqrt(batch)."""
    if not is_number(n) or n <= 0:
        return ""
    low = f"{FAIR_SPREAD / math.sqrt(n):.2g}"
    if is_number(batch) and 0 < batch < n:
        return (f"; fair samples of {n} values per channel ({batch} samples) give {low} to "
                f"{FAIR_SPREAD / math.sqrt(batch):.2g}")
    return f"; fair samples of {n} values per channel give about {low}"


def _classes(run, until: int) -> list:
    """A line on the classes in the batches' targets up to step `until` (the loss call's
    sampled rows, at the summary steps), where they hold far fewer than the model outputs."""
    seen = [(n, units, rows) for step, (n, units, rows) in sorted(run.classes.items())
            if step <= until]
    if not seen or seen[0][1] < 2:
        return []
    counts, units, rows = sorted(n for n, _, _ in seen), seen[-1][1], seen[-1][2]
    typical = counts[len(counts) // 2]
    if counts[-1] == 1:
        return [f"every batch sampled held a single class (targets of {rows} rows, at "
                f"{len(seen)} steps, each one class of the {units} the model outputs)"]
    if typical * 2 <= units and rows >= 2 * units:
        return [f"the batches sampled held {typical} of the {units} classes (median over "
                f"{len(seen)} steps, {rows} rows each)"]
    return []


def _thresholds(ctx, run: int) -> dict:
    norm = ctx.runs[run].thresholds.get("norm")
    return norm if isinstance(norm, dict) else {}


def _window(ctx, run: int) -> int:
    v = _thresholds(ctx, run).get("window")
    return v if isinstance(v, int) and v > 0 else NormThresholds.window


def _tiny(ctx, run: int) -> float:
    v = _thresholds(ctx, run).get("tiny_batch")
    return v if is_number(v) else NormThresholds.tiny_batch


def _num(v) -> str:
    return f"{v:.3g}" if is_number(v) else "?"
