"""A hypothesis as plain text: the failure message of a JUnit test case, a pytest failure,
a GitHub annotation. The same words `explain` prints, without colour or layout."""
from __future__ import annotations

from ..inert import inert
from ..trace import PSEUDO_LAYERS


def where(h) -> str:
    """'hid_act (ReLU)', or a pseudo-layer's name alone (it has no module type)."""
    return inert(h.layer if h.layer in PSEUDO_LAYERS else f"{h.layer} ({h.module_type})")


def headline(h, multi: bool = False) -> str:
    """'dead activation in hid_act (ReLU) at step 167 | cause learning_rate | confidence 0.82'"""
    on_rank = f" on rank {h.process_rank}" if multi else ""
    return (f"{h.symptom} {h.signal} in {where(h)} at step {h.step}{on_rank} | "
            f"cause {h.cause} | confidence {h.confidence:.2f}")


def body(h) -> list:
    """The summary, the evidence as bullets, the fix: one line each."""
    lines = [inert(h.summary), *(f"- {inert(e)}" for e in h.evidence), f"fix: {inert(h.fix)}"]
    if h.alternatives:
        lines.append(f"also consistent with: {', '.join(map(inert, h.alternatives))}")
    return lines


def full(h, multi: bool = False) -> str:
    return "\n".join([f"#{h.position} {headline(h, multi)}", *body(h)])


def likely(analysis, at_least: float = 0.5) -> list:
    """The origins (not their consequences) believed at least `at_least`, best first."""
    return [h for h in analysis.hypotheses if h.origin is None and h.confidence >= at_least]


def hypothesis_for(analysis, layer: str, signal: str, state: str, rank: int):
    """The hypothesis about `layer` entering `state` on `signal` (at its earliest onset), or
    None when the analysis told it as no hypothesis of its own."""
    found = [h for h in analysis.hypotheses if h.layer == layer and h.signal == signal
             and h.symptom == state and h.process_rank == rank]
    return min(found, key=lambda h: h.step, default=None)
