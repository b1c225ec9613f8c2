"""The model's output against the loss and the targets: the classic mismatches.

Judged on the pseudo-layer (output) from the step's first loss call (observe.pairing): an
output that cannot vary (a softmax over one unit), an output activation the loss does not
expect (probabilities into a loss that applies log_softmax or the sigmoid itself, a target
shape the loss broadcasts against, class weights that favour the frequent classes), targets
the output cannot reach (a sigmoid regressing on prices, BCE targets outside 0..1), and
class-index targets that are all one class. Each verdict names its reason (`why`) and quotes
the numbers it rests on. Healthy pairings (logits into CrossEntropyLoss, log_softmax into
NLLLoss, a sigmoid into BCELoss on 0/1 targets, a linear head on any targets, label
smoothing, probability targets, inverse-frequency class weights) match none of them.
"""
from __future__ import annotations

import math

from ... import states
from ..handwritten import LOG_LIKELIHOOD
from ..kinds import OUTPUT_KIND
from ..pairing import BCE_LOSSES, CLASS_LOSSES, LOG_PROB_LOSSES, REGRESSION_LOSSES
from . import register
from .base import NOTHING, Detector, Observation

PAIRING = "pairing"         # the reduction asked for: the step's loss call
_NEEDS = frozenset((PAIRING,))
_BOUNDS = {"sigmoid": (0.0, 1.0), "softmax": (0.0, 1.0), "tanh": (-1.0, 1.0)}
_PROBABILITIES = ("sigmoid", "softmax")
_BCE_SLACK = 1e-3           # BCE targets this far outside 0..1: not rounding
# Losses whose targets may be class indices (a hand-written log of each row's picked class too)
_INDEXED = (*CLASS_LOSSES, LOG_LIKELIHOOD)


class OutputHistory:
    __slots__ = ("first", "target_min", "target_max", "one_hot", "index", "weighted",
                 "weight_sum")

    def __init__(self):
        self.first = None               # the step of the first loss call judged
        self.target_min = math.inf      # over the run
        self.target_max = -math.inf
        self.one_hot = True             # every target row so far one-hot
        self.index = True               # every target so far class indices
        self.weighted = 0.0             # class-weighted targets read (_weighting)
        self.weight_sum = 0.0           # ... their weights, in their classes' mean weight


class OutputDetector(Detector):
    """The pseudo-layer (output); facts: observe.pairing.LossCall.facts."""

    signal = states.OUTPUT

    def needs(self, module, kind: str, leaf: bool) -> frozenset:
        return _NEEDS if module is None and kind == OUTPUT_KIND else NOTHING

    def history(self) -> OutputHistory:
        return OutputHistory()

    def judge(self, x: Observation, h: OutputHistory) -> tuple:
        f = x.facts
        if not f:
            return "normal", {}
        for check in (_constant, _mismatched, _unreachable, _favours_frequent):
            found = check(f, h, self.th.output)
            if found is not None:     # (state, why[, the numbers it rests on beyond the call's])
                return found[0], {**_quoted(f), "why": found[1], **(found[2] if len(found) > 2
                                                                     else {})}
        lo, hi = min(h.target_min, f["target_min"]), max(h.target_max, f["target_max"])
        steps = f["step"] - (f["step"] if h.first is None else h.first) + 1
        # (not a contrastive loss's logits, whose positive is always class 0: no classifier's;
        # nor with several optimizers: a GAN's discriminator takes real and fake batches in
        # calls of their own, each of one class, and only a step's first call is read)
        if f["loss_fn"] in _INDEXED and f["target"] == "index" and h.index and lo == hi \
                and steps >= self.th.output.one_class_steps and f.get("from_model") is not False \
                and not f.get("several"):
            return "one_class", {**_quoted(f), "why": "one_class", "steps": steps}
        # (its numbers go with the first transition only: explain reads the targets' scale)
        return "normal", _quoted(f) if h.first is None else {}

    def remember(self, x: Observation, h: OutputHistory) -> None:
        f = x.facts
        if not f:
            return
        if h.first is None:
            h.first = f["step"]
        if math.isfinite(f["target_min"]) and math.isfinite(f["target_max"]):
            h.target_min = min(h.target_min, f["target_min"])
            h.target_max = max(h.target_max, f["target_max"])
        h.one_hot = h.one_hot and _one_hot(f)
        h.index = h.index and f["target"] == "index"
        read = _weighting(f)
        if read is not None:
            h.weighted += read[0]
            h.weight_sum += read[0] * read[1]

    def evidence(self, x: Observation, extra: dict) -> dict:
        return extra


def _constant(f: dict, h, th):
    """A softmax or log_softmax over a single unit is 1 (0) whatever its input, and so is the
    cross-entropy of one class: no gradient reaches the model."""
    if f["activation"] in ("softmax", "log_softmax") and f["normalised"] == 1:
        return "constant", "normalised_one_unit"
    if f["loss_fn"] in CLASS_LOSSES and f["units"] == 1:
        return "constant", "one_class_unit"
    if f["activation"] == "relu" and f["units"] == 1 and f["output_max"] <= 0:
        return "constant", "relu_output_dead"
    return None


def _mismatched(f: dict, h, th):
    loss, act = f["loss_fn"], f["activation"]
    if loss == "cross_entropy" and (act in _PROBABILITIES or _probability_rows(f, th)):
        return "mismatched", "probabilities_into_cross_entropy"
    if loss == "binary_cross_entropy_with_logits" and act in _PROBABILITIES:
        return "mismatched", "probabilities_into_bce_with_logits"
    if loss == LOG_LIKELIHOOD and act in ("linear", "tanh"):
        return "mismatched", "log_of_non_probabilities"
    # (a class loss by hand, each row's class picked: its softmax is the model's, by hand too)
    if (loss in CLASS_LOSSES or loss == LOG_LIKELIHOOD and f["target"] == "index"
            and f.get("from_model") is not False) and act in ("softmax", "log_softmax") \
            and f["normalised"] not in (None, f["units"]):
        return "mismatched", "normalised_other_dim"     # (over the batch: dim=0)
    gap = f.get("row_logsumexp_gap")
    if loss in LOG_PROB_LOSSES and gap is not None and gap > th.log_prob_tolerance:
        # (inf: logits overflowed; NaN: never; a log_softmax over another dimension of the
        # class dimension's size)
        return "mismatched", "normalised_other_dim" if act == "log_softmax" \
            else "not_log_probabilities"
    if loss in REGRESSION_LOSSES and f["output_shape"] != f["target_shape"]:
        return "mismatched", "broadcast"
    if loss == "l1_loss" and f["units"] >= 2 and _one_hot(f):
        return "mismatched", "regression_loss_on_classes"
    # (not on logits picked from the output: YOLOv5's class loss on its positive anchors)
    if loss in BCE_LOSSES and f["units"] >= 3 and h.one_hot and _one_hot(f) \
            and f.get("from_model") is not False:
        return "mismatched", "exclusive_classes"
    return None


def _unreachable(f: dict, h, th):
    loss, t_min, t_max = f["loss_fn"], f["target_min"], f["target_max"]
    bound = _BOUNDS.get(f["activation"])
    if loss in REGRESSION_LOSSES and bound is not None:
        lo, hi = bound
        margin = th.beyond * (hi - lo)
        if t_max > hi + margin or t_min < lo - margin:
            return "unreachable", "bounded_output"
    if (loss in BCE_LOSSES or loss == LOG_LIKELIHOOD and f["target"] != "index") \
            and (t_min < -_BCE_SLACK or t_max > 1 + _BCE_SLACK):
        return "unreachable", "targets_not_probabilities"     # (NaN: targets not read)
    return None


def _favours_frequent(f: dict, h, th):
    """A class loss's `weight` under which the targets read so far weigh `class_weight_share`
    times the mean weight of their classes or more: the frequent classes weigh most, so the
    rare ones count for less than with no weights at all (the weights given in the wrong
    order, or the classes' counts where their inverse was meant). Inverse-frequency weights
    give at most 1, even weights or balanced classes exactly 1."""
    read = _weighting(f)
    if read is None:
        return None
    n = h.weighted + read[0]
    if n < th.class_weight_targets:
        return None
    share = (h.weight_sum + read[0] * read[1]) / n
    if share >= th.class_weight_share:
        return "mismatched", "class_weights_favour_frequent", {"class_weight_share": share,
                                                                "targets_weighted": n}
    return None


def _weighting(f: dict):
    """(targets, their mean weight over their classes' mean: pairing._weight_share) of a
    class loss's call with per-class weights, counted where the call shows several classes
    (a GAN's discriminator is fed one class a call) and the output is the model's; else
    None."""
    share = f.get("target_weight_share")
    if share is None or not math.isfinite(share) or f["loss_fn"] not in CLASS_LOSSES \
            or (f.get("target_classes") or 0) < 2 or f.get("several") \
            or f.get("from_model") is False:
        return None
    return f["targets_weighted"], share


def _probability_rows(f: dict, th) -> bool:
    """Every row read is a distribution: values in 0..1, each row summing to 1 (logits never
    all do, whatever produced them)."""
    gap = f.get("output_row_sum_gap")
    return gap is not None and gap <= th.row_sum_tolerance and f["output_min"] >= 0.0 \
        and f["output_max"] <= 1.0


def _one_hot(f: dict) -> bool:
    """This call's sampled target rows are one-hot: values in 0..1, each row summing to 1
    with a 1 in it (so a single 1 and the rest 0)."""
    gap, top = f.get("target_row_sum_gap"), f.get("target_row_max_min")
    return gap is not None and gap == 0.0 and top == 1.0 and f["target_min"] == 0.0


def _quoted(f: dict) -> dict:
    """The numbers a verdict quotes."""
    keys = ("loss_fn", "activation", "normalised", "units", "rows", "target", "output_min",
            "output_max", "target_min", "target_max", "target_classes", "row_logsumexp_gap",
            "output_row_sum_gap", "output_dtype")
    out = {k: f[k] for k in keys if f.get(k) is not None}
    out["output_shape"], out["target_shape"] = list(f["output_shape"]), list(f["target_shape"])
    return out


register(OutputDetector)
