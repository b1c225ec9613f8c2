"""Failures in words: the sentences and numbers a hypothesis shows as summary and evidence."""
from __future__ import annotations

from .echoes import WINDOW
from .episodes import GRAD, INPUT, Episode, Run, is_int


def cap(text: str) -> str:
    """Capitalise a sentence, never a layer name."""
    return "The" + text[3:] if text.startswith("the ") else text


def describe(ep) -> str:
    """'net.3 (ReLU) died', 'the gradient of net.0 (Linear) vanished', ..."""
    if ep.layer == INPUT:
        return "the model's input (the batch) " + (
            "turned NaN/inf" if ep.state == "nonfinite" else "shifted abruptly")
    who = f"{ep.layer} ({ep.module_type})"
    if ep.signal == GRAD:
        verb = {"vanishing": "vanished", "exploding": "exploded", "nonfinite": "turned NaN/inf"}
        return f"the gradient of {who} {verb.get(ep.state, ep.state)}"
    if ep.stats.get("observed") == "input":
        return f"the input of {who} went {ep.state} (a functional activation before it)"
    verb = {"nonfinite": "output NaN/inf", "anomalous": "output shifted abruptly", "dead": "died"}
    return f"{who} {verb.get(ep.state, ep.state)}"


def _num(v) -> str:
    if isinstance(v, str):
        return v          # "nan", "inf": written as strings in the trace
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "?"
    return f"{v:.3g}"


def _pct(v) -> str:
    return f"{v:.0%}" if isinstance(v, (int, float)) and not isinstance(v, bool) else _num(v)


_STATS = (  # (key, label): the numbers of a transition, in the words of the report
    ("dead_ratio", lambda s: f"{_pct(s['dead_ratio'])} of units dead"),
    ("saturated_ratio", lambda s: f"{_pct(s['saturated_ratio'])} of units saturated"),
    ("observed", lambda s: f"{_pct(s.get('input_dead_ratio'))} of input units zero"),
    ("units", lambda s: f"{_num(s['units'])} units"),
    ("rms", lambda s: f"output rms {_num(s['rms'])}"),
    ("rms_ratio", lambda s: f"x{_num(s['rms_ratio'])} its recent median ({_num(s.get('rms_median'))})"),
    ("sparsity_shift", lambda s: f"inactive share moved {_num(s['sparsity_shift'])} from "
                                 f"{_num(s.get('sparsity_median'))}"),
    ("grad_norm", lambda s: f"gradient norm {_num(s['grad_norm'])}"),
    ("grad_norm_median", lambda s: f"recent median {_num(s['grad_norm_median'])}"),
    ("ratio_to_largest", lambda s: f"{_num(s['ratio_to_largest'])} of the largest layer's"),
    ("model_max_grad_norm", lambda s: f"largest layer norm {_num(s['model_max_grad_norm'])}"),
)


def numbers(ep: Episode) -> str:
    parts = [label(ep.stats) for key, label in _STATS if key in ep.stats]
    head = f"step {ep.onset}: {ep.layer} {ep.signal} {ep.previous or 'first seen'} -> {ep.state}"
    tail = " (seen only at the very end of the run, not confirmed)" if ep.stats.get("unconfirmed") else ""
    return head + (": " + ", ".join(parts) if parts else "") + tail


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
    if recovered is not None:
        out.append(f"recovered at step {recovered}, {recovered - ep.onset} step(s) after the onset")
    elif run.status in ("failed", "interrupted"):
        ended = "failed" if run.status == "failed" else "was interrupted"
        out.append(f"still going when the run {ended} after {run.steps} steps"
                   + (f": {run.error}" if run.error else ""))
    else:
        out.append(f"lasted to the end of the run (step {run.last_step})")
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
