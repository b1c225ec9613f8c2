"""Failures in words: the sentences and numbers a hypothesis shows as summary and evidence."""
from __future__ import annotations

from .. import states
from ..trace import INPUT_LAYER, LOOP_LAYER, LOSS_LAYER, OUTPUT_LAYER, SCALER_LAYER
from .echoes import WINDOW
from .episodes import Episode
from .runs import ACT, Run, is_int

# The batch is not a layer: it holds values rather than outputs them, so a few states read
# differently for it; the rest use the registry's verb, less the layer's "output".
_INPUT_VERB = {"nonfinite": "turned NaN/inf"}
_SEEN_AT_INPUT = "input"    # stats["observed"]: a layer judged by the zeros of its input


def cap(text: str) -> str:
    """Capitalise a sentence, never a layer name."""
    return "The" + text[3:] if text.startswith("the ") else text


def describe(ep) -> str:
    """'net.3 (ReLU) died', 'the gradient of net.0 (Linear) vanished', ..."""
    if ep.layer == INPUT_LAYER:
        verb = _INPUT_VERB.get(ep.state) or verb_of(ep).removeprefix("output ")
        return f"the model's input (the batch) {verb}"
    if ep.layer == LOSS_LAYER:
        return f"the loss {verb_of(ep)}"
    if ep.layer == LOOP_LAYER:
        return f"the training loop {verb_of(ep)}"
    if ep.layer == OUTPUT_LAYER:
        return f"the model's output {verb_of(ep)}"
    if ep.layer == SCALER_LAYER:
        return f"the GradScaler {verb_of(ep)}"
    who = f"{ep.layer} ({ep.module_type})"
    if ep.signal in (states.UPDATE.name, states.NORM.name, states.RESIDUAL.name):
        return f"{who} {verb_of(ep)}"
    if ep.signal != ACT:
        return f"the {ep.signal} of {who} {verb_of(ep)}"
    if ep.stats.get("observed") == _SEEN_AT_INPUT:
        return f"the input of {who} went {ep.state} (a functional activation before it)"
    return f"{who} {verb_of(ep)}"


def verb_of(ep) -> str:
    """How a sentence says the layer entered its state (the state's name if unregistered)."""
    known = states.state_of(ep.signal, ep.state)
    return known.verb if known is not None and known.verb else ep.state


def _num(v) -> str:
    if isinstance(v, str):
        return v          # "nan", "inf": written as strings in the trace
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "?"
    return f"{v:.3g}"


def _names(v) -> str:
    return ", ".join(map(str, v)) if isinstance(v, list) else "?"


def _pct(v) -> str:
    return f"{v:.0%}" if isinstance(v, (int, float)) and not isinstance(v, bool) else _num(v)


def _producer(s: dict) -> str:
    """What made the loss's input: its activation; else a linear output, unless its rows
    were read as probabilities (a mixture of softmaxes: observe/detectors/output.py)."""
    if s.get("activation"):
        return s["activation"]
    return "a probability" if s.get("why") == "probabilities_into_cross_entropy" else "a linear"


_STATS = (  # (key, label): the numbers of a transition, in the words of the report
    ("dead_ratio", lambda s: f"{_pct(s['dead_ratio'])} of units dead"),
    ("saturated_ratio", lambda s: f"{_pct(s['saturated_ratio'])} of units saturated"),
    ("observed", lambda s: f"{_pct(s.get('input_dead_ratio'))} of input units zero"),
    ("loss_fn", lambda s: f"{s['loss_fn']} of {_producer(s)} output "
                          f"{_num(s.get('output_min'))}..{_num(s.get('output_max'))}"),
    ("units", lambda s: f"{_num(s['units'])} unit{'s' * (s['units'] != 1)}"),
    ("rms", lambda s: f"output rms {_num(s['rms'])}"),
    # (traces before the control charts wrote the recent median instead of the expected level)
    ("rms_ratio", lambda s: f"x{_num(s['rms_ratio'])} its expected level "
                            f"({_num(s.get('rms_expected', s.get('rms_median')))})"),
    ("rms_sigmas", lambda s: f"{_num(s['rms_sigmas'])} sigmas off its control chart"),
    ("sparsity_shift", lambda s: f"inactive share moved {_num(s['sparsity_shift'])} from "
                                 f"{_num(s.get('sparsity_expected', s.get('sparsity_median')))}"),
    ("sparsity_sigmas", lambda s: f"{_num(s['sparsity_sigmas'])} sigmas off its control chart"),
    ("update_ratio", lambda s: f"update {_num(s['update_ratio'])} of the weights' norm"),
    ("grad_norm", lambda s: f"gradient norm {_num(s['grad_norm'])}"),
    ("grad_norm_median", lambda s: f"recent median {_num(s['grad_norm_median'])}"),
    ("ratio_to_largest", lambda s: f"{_num(s['ratio_to_largest'])} of the largest layer's"),
    ("model_max_grad_norm", lambda s: f"largest layer norm {_num(s['model_max_grad_norm'])}"),
    ("in_no_optimizer", lambda s: "in no optimizer"),
    ("loss", lambda s: f"loss {_num(s['loss'])}"),
    ("loss_median", lambda s: f"recent median {_num(s['loss_median'])}"),
    ("loss_start", lambda s: f"starting level {_num(s['loss_start'])}"),
    ("steps_without_reset", lambda s: f"{_num(s['steps_without_reset'])} steps without a gradient reset"),
    ("models", lambda s: f"in eval() mode: {_names(s['models'])}"),
    ("drift", lambda s: f"batch mean {_num(s['drift'])} running std from the running mean"),
    ("jump", lambda s: f"{_num(s['jump'])} from the batch before"),
    ("per_channel", lambda s: f"{_num(s['per_channel'])} values per channel (batch "
                              f"{_num(s.get('batch'))})"),
    ("gain_rms", lambda s: f"gain rms {_num(s['gain_rms'])}"),
    ("gain_rms_start", lambda s: f"{_num(s['gain_rms_start'])} at first sight"),
    ("branch_ratio", lambda s: f"branch {_num(s['branch_ratio'])}x the skip"),
    ("growth", lambda s: f"stream rms x{_num(s['growth'])} ({_num(s.get('rms_in'))} -> "
                         f"{_num(s.get('rms_out'))})"),
)


def numbers(ep: Episode) -> str:
    parts = [label(ep.stats) for key, label in _STATS if key in ep.stats]
    head = f"step {ep.onset}: {ep.layer} {ep.signal} {ep.previous or 'first seen'} -> {ep.state}"
    tail = " (seen only at the very end of the run, not confirmed)" if ep.stats.get("unconfirmed") else ""
    return head + (": " + ", ".join(parts) if parts else "") + tail


def folded(ep: Episode) -> list:
    """The line on the stretches folded into this one, if any."""
    if not ep.folded:
        return []
    return [f"then {ep.folded} more unhealthy stretch(es) of {ep.layer} {ep.signal}, "
            "counted here rather than listed (the layer flaps)"]


def aftermath(ep: Episode, others: list, recovered, run: Run, multi: bool) -> list:
    """The preceding warnings, the other failures of its story, and how it ended."""
    out = [f"warning at step {w['step']}: {w['message']}" for w in run.notes
           if is_int(w.get("step")) and 0 <= ep.onset - w["step"] <= WINDOW
           and w.get("layer") in (None, ep.layer)][:2]
    if others:
        out.append(f"with it, {len(others)} more failure(s): {_grouped(others, multi)}")
    ranks = sorted({e.rank for e in others} - {ep.rank})
    if ranks:
        out.append(f"began on rank {ep.rank}; followed on rank(s) {', '.join(map(str, ranks))}")
    out += folded(ep)
    if recovered is not None and ep.recovered and ep.end < recovered:
        # (its story went on after it: say how long it lasted itself, not the story's span)
        out.append(f"recovered at step {ep.end}, {ep.end - ep.onset} step(s) after the onset; "
                   f"the last of the others at step {recovered}")
    elif recovered is not None:
        out.append(f"recovered at step {recovered}, {recovered - ep.onset} step(s) after the onset")
    else:
        # (where it recovered and the rest of its story did not, how that rest ended)
        rest = ""
        if ep.recovered:
            out.append(f"recovered at step {ep.end}, {ep.end - ep.onset} step(s) after the onset")
            rest = "the others "
        if run.status in ("failed", "interrupted"):
            ended = "failed" if run.status == "failed" else "was interrupted"
            out.append(f"{rest}still going when the run {ended} after {run.steps} steps"
                       + (f": {run.error}" if run.error else ""))
        else:
            out.append(f"{rest}lasted to the end of the run (step {run.last_step})")
    return out


def _grouped(eps: list, multi: bool) -> str:
    """'dead activation in 3 from step 44; vanishing gradient in 2, 0 (ranks 0, 1) from step 44'."""
    groups: dict = {}
    for e in eps:
        groups.setdefault((e.state, e.signal), []).append(e)
    parts = []
    for (state, signal), members in groups.items():
        names = list(dict.fromkeys(e.layer for e in members))
        more = f" and {len(names) - 6} more" if len(names) > 6 else ""
        ranks = list(dict.fromkeys(str(e.rank) for e in members))
        where = f" (rank{'s' * (len(ranks) > 1)} {', '.join(ranks)})" if multi else ""
        parts.append(f"{state} {signal} in {', '.join(names[:6])}{more}{where} from step "
                     f"{min(e.onset for e in members)}")
    return "; ".join(parts)
