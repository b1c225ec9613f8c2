"""Cause rule for the model's output against the loss and the targets: each mismatch the
(output) detector names (its `why`), told with the numbers it rests on and the usual remedy.
The output activation or the loss chosen is `architecture`; targets broken or out of range are
`input_data`."""
from __future__ import annotations

from .. import states
from .finding import Finding

OUTPUT = states.OUTPUT.name

_LOSS_NAMES = {"cross_entropy": "cross_entropy (CrossEntropyLoss)",
               "nll_loss": "nll_loss (NLLLoss)",
               "ctc_loss": "ctc_loss (CTCLoss)",
               "binary_cross_entropy": "binary_cross_entropy (BCELoss)",
               "binary_cross_entropy_with_logits":
                   "binary_cross_entropy_with_logits (BCEWithLogitsLoss)",
               "mse_loss": "mse_loss (MSELoss)", "l1_loss": "l1_loss (L1Loss)",
               "smooth_l1_loss": "smooth_l1_loss (SmoothL1Loss)",
               "huber_loss": "huber_loss (HuberLoss)",
               "log_likelihood": "a hand-written log loss"}
_BOUND = {"sigmoid": "<= 1", "softmax": "<= 1", "tanh": "within -1..1"}


def output_mismatch(ep, ctx):
    """A state of the (output) pseudo-layer: the pairing of output, loss and targets."""
    if ep.signal != OUTPUT:
        return None
    s = ep.stats
    why = s.get("why")
    told = _TOLD.get(why)
    if told is None:
        known = states.state_of(ep.signal, ep.state)
        return Finding("architecture", 0.7, "the model's output does not suit its loss and "
                       "targets", (), known.fix if known is not None else "")
    cause, strength, summary, line, fix = told(_Words(s))
    return Finding(cause, strength, summary, (line,), fix)


class _Words:
    """The numbers of an (output) transition, as they read in a sentence."""

    def __init__(self, s: dict):
        self.s = s
        self.loss = _LOSS_NAMES.get(s.get("loss_fn"), str(s.get("loss_fn", "the loss")))
        self.act = str(s.get("activation") or "no activation")
        self.rows = _n(s.get("rows"))
        self.units = _n(s.get("units"))
        self.out = f"{_n(s.get('output_min'))}..{_n(s.get('output_max'))}"
        self.targets = f"{_n(s.get('target_min'))}..{_n(s.get('target_max'))}"

    def shape(self, key: str) -> str:
        v = self.s.get(key)
        return "(" + ", ".join(map(str, v)) + ("," if len(v) == 1 else "") + ")" \
            if isinstance(v, list) else "?"


def _n(v) -> str:
    return f"{v:.4g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "?"


def _one_unit(w):
    value = _n(w.s.get("output_min"))
    return ("architecture", 0.9, f"a {w.act} over a single unit is the constant {value}, so no "
            "gradient reaches the model and the loss cannot move",
            f"output constant {value} over {w.rows} rows: a {w.act} over 1 unit, into {w.loss}",
            "Use one unit with a sigmoid into BCELoss (or no activation into BCEWithLogitsLoss) "
            "for two classes, or as many output units as classes with logits into "
            "CrossEntropyLoss.")


def _one_class_unit(w):
    return ("architecture", 0.9, f"{w.loss} over a single output unit is 0 whatever the model "
            "outputs: one class leaves nothing to learn",
            f"{w.loss} over {w.units} output unit ({w.rows} rows): the softmax of one value is 1",
            "Give the head one unit per class, or use BCEWithLogitsLoss with one unit for a "
            "binary target.")


def _probabilities_into(what: str, applies: str, fix: str):
    def told(w):
        if w.s.get("activation") is None:   # (told by its rows: output.py)
            return ("architecture", 0.85, f"the rows fed to {w.loss} are already probabilities "
                    f"(a softmax, or softmaxes mixed, before the loss), and it applies {applies} "
                    f"itself: {what}", f"{w.loss} is fed rows of values {w.out}, each summing "
                    f"to 1 within {_n(w.s.get('output_row_sum_gap'))} ({w.rows} rows of "
                    f"{w.units} units), rather than logits", fix)
        return ("architecture", 0.85, f"the output goes through a {w.act} before {w.loss}, "
                f"which applies {applies} itself: {what}",
                f"{w.loss} is fed the output of a {w.act} (values {w.out} over {w.rows} rows of "
                f"{w.units} units) rather than logits", fix)
    return told


def _not_log_probabilities(w):
    gap = _n(w.s.get("row_logsumexp_gap"))
    given = f"the output of a {w.act}" if w.s.get("activation") else "raw outputs (logits)"
    if w.s.get("loss_fn") == "ctc_loss":
        fix = ("Put log_softmax over the classes (the last dimension: "
               "output.log_softmax(2)) before CTCLoss.")
    else:
        fix = ("Put log_softmax (nn.LogSoftmax(dim=1)) before NLLLoss, or feed the logits to "
               "CrossEntropyLoss instead.")
    return ("architecture", 0.85, f"{w.s.get('loss_fn', 'nll_loss')} expects log-probabilities "
            f"and is given {given}, so its value means nothing (it can go below 0)",
            f"{w.loss} input rows have a logsumexp up to {gap} above 0 (log-probabilities "
            f"have 0), values {w.out}, {w.units} classes", fix)


def _other_dim(w):
    n = _n(w.s.get("normalised"))
    over = f"a dimension of size {n}" + (" (the batch)" if n == w.rows else "") \
        if n != w.units else "a dimension other than the classes"
    return ("architecture", 0.9, f"the {w.act} normalises {over} rather than the "
            f"{w.units} classes: each row is not a distribution over its classes, so "
            f"{w.loss} compares the wrong numbers (a prediction depends on the rest of the batch)",
            f"the {w.act} before {w.loss} normalised {over}; the classes are dimension 1 "
            f"({w.units} units, {w.rows} rows)" + (f", whose rows' logsumexp rises up to "
            f"{_n(w.s.get('row_logsumexp_gap'))} above 0" if w.s.get("row_logsumexp_gap")
            is not None else ""),
            f"Normalise over the classes: {w.act}(x, dim=1) (or dim=-1 for (batch, classes) "
            "outputs); nn.LogSoftmax() and F.log_softmax(x) without dim may pick dim 0.")


def _broadcast(w):
    out, target = w.shape("output_shape"), w.shape("target_shape")
    return ("architecture", 0.85, f"the output {out} and the targets {target} differ in shape, "
            f"so {w.loss} broadcasts them against each other and compares every output with "
            "every target", f"output shape {out}, target shape {target} in {w.loss}",
            "Give the targets the output's shape (y.unsqueeze(1), or out.squeeze(1)); torch "
            "warns once about it (\"Using a target size that is different to the input size\").")


def _regression_on_classes(w):
    return ("architecture", 0.8, f"{w.loss}, a regression loss, is used on one-hot class "
            "targets: its gradient is a constant size whatever the error, so classes are learnt "
            "slowly or not at all",
            f"targets one-hot over {w.units} classes ({w.rows} rows), loss {w.loss}, output "
            f"{w.act}", "Use CrossEntropyLoss on the logits with the class indices as targets.")


def _exclusive(w):
    return ("architecture", 0.7, f"every target row is one-hot over {w.units} classes, yet "
            f"{w.loss} treats the classes as independent yes/no questions",
            f"targets one-hot (exactly one 1 per row) over {w.units} classes in every step "
            f"read, into {w.loss} with {w.act}",
            "For exclusive classes use one logit per class into CrossEntropyLoss with the class "
            "indices (or nn.Softmax + NLLLoss on its log); keep BCE for multi-label targets.")


def _bounded(w):
    bound = _BOUND.get(w.s.get("activation"), "bounded")
    return ("architecture", 0.85, f"the output goes through a {w.act}, so it is {bound}, while "
            f"the targets range {w.targets}: the model can never reach them",
            f"targets range {w.targets}, the {w.act} output is {bound} (values {w.out}), loss "
            f"{w.loss}", "Use a linear output (no activation) for regression, and standardise "
            "the targets (subtract their mean, divide by their std; undo it at prediction).")


def _not_probabilities(w):
    return ("input_data", 0.85, f"the targets of {w.loss} range {w.targets}, but they must be "
            "probabilities in 0..1: the loss has no minimum there and cannot reach zero",
            f"targets range {w.targets} in {w.loss} ({w.rows} rows)",
            "For class labels use CrossEntropyLoss with one logit per class; for binary targets "
            "map them to 0/1 (and soft labels into 0..1).")


def _one_class(w):
    steps = _n(w.s.get("steps"))
    return ("input_data", 0.85, f"every class-index target of {w.loss} was class "
            f"{_n(w.s.get('target_min'))} for {steps} steps from the start: the labels were "
            "broken on their way in (y / 255, a cast), or the data is not shuffled",
            f"every target read in the first {steps} steps was class {_n(w.s.get('target_min'))} "
            f"({_n(w.s.get('target_classes'))} distinct class in {w.rows} rows; the head has "
            f"{w.units} classes)",
            "Check the labels after preprocessing (print torch.bincount(y)): scale the inputs, "
            "not the labels; shuffle the data (DataLoader(shuffle=True)).")


def _log_of_non_probabilities(w):
    act = "a linear output (no activation)" if w.act == "linear" else f"a {w.act} output"
    return ("architecture", 0.9, f"the loss takes the log of {act}, whose values ({w.out}) are "
            "not probabilities: its log is NaN below 0 and its clamp cuts the gradient off",
            f"{w.loss} takes log() of the model's output: {act}, values {w.out} over {w.rows} "
            f"rows of {w.units} units",
            "End the model in a sigmoid (or a softmax over the classes) before a log loss, or "
            "better, return the logits and use BCEWithLogitsLoss / CrossEntropyLoss, which "
            "compute the log stably.")


def _relu_output_dead(w):
    return ("architecture", 0.9, "the model's single output unit goes through a ReLU, which "
            "now outputs 0 for every input: no gradient gets past it and the model stops "
            "learning", f"output {w.out} over {w.rows} rows: a ReLU on the only output unit, "
            f"into {w.loss}", "Remove the activation from the output layer (a linear output for "
            "regression; logits into BCEWithLogitsLoss for a binary target).")


def _favours_frequent(w):
    share = _n(w.s.get("class_weight_share"))
    return ("architecture", 0.8, f"the class weights of {w.loss} weigh the frequent classes "
            f"most: the targets weigh {share}x the mean weight of their classes, so the rare classes "
            "count for less than with no weights at all (weights in the wrong order, or the "
            "classes' counts where their inverse was meant)",
            f"the {_n(w.s.get('targets_weighted'))} targets read weigh {share}x the mean weight of "
            f"their classes in {w.loss} ({w.units} classes) (inverse-frequency weights give at most 1)",
            "Weigh each class by the inverse of its frequency (weight[c] = total / (classes x "
            "count[c])) and check the weights' order against the class indices "
            "(torch.bincount(y) beside the weight vector).")


_TOLD = {
    "log_of_non_probabilities": _log_of_non_probabilities,
    "relu_output_dead": _relu_output_dead,
    "normalised_one_unit": _one_unit,
    "one_class_unit": _one_class_unit,
    "probabilities_into_cross_entropy": _probabilities_into(
        "probabilities used as logits squash the loss's gradient, so training crawls",
        "log_softmax", "Return the logits (no softmax/sigmoid) and let CrossEntropyLoss apply "
        "log_softmax; take the softmax only for predictions."),
    "probabilities_into_bce_with_logits": _probabilities_into(
        "the sigmoid is applied twice, so the predictions stay between 0.5 and 0.73",
        "the sigmoid", "Return the logits into BCEWithLogitsLoss, or keep the sigmoid and use "
        "BCELoss."),
    "not_log_probabilities": _not_log_probabilities,
    "normalised_other_dim": _other_dim,
    "broadcast": _broadcast,
    "regression_loss_on_classes": _regression_on_classes,
    "exclusive_classes": _exclusive,
    "bounded_output": _bounded,
    "targets_not_probabilities": _not_probabilities,
    "one_class": _one_class,
    "class_weights_favour_frequent": _favours_frequent,
}
