"""A hypothesis: one failure explained (symptom, where, when, cause, confidence, why, fix)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import states
from . import rules, shards
from .echoes import WINDOW
from .evidence import aftermath, cap, describe, folded, numbers

ECHO_DISCOUNT = 0.9     # a consequence is believed a little less than the origin it hangs on
SUPPORTS = 0.7          # a finding this strong adds its evidence to a stronger one of its cause
BLIP = 0.45             # the most a story believes itself when none of it counts (verdict.py)
LASTED = 0.75           # the least persistence of a story with a failure that counts


@dataclass(kw_only=True)
class Hypothesis:
    """A ranked explanation. `position` is its place in the ranking (1 = most likely; the
    JSON key `rank`); `process_rank` the process where it began."""
    symptom: str
    layer: str
    step: int
    cause: str
    confidence: float
    summary: str
    evidence: list
    fix: str
    process_rank: int
    signal: str
    module_type: str
    recovered: int | None = None
    counted: bool = False       # its own episode fails the run (verdict.py)
    alternatives: list = field(default_factory=list)
    origin: Hypothesis | None = None
    consequences: list = field(default_factory=list)
    position: int = 0


def persistence(chain: list) -> tuple:
    """(factor, recovered step): a failure whose story lasts to the end counts fully; one that
    recovers within 20 steps counts at most 0.55, so a blip never reaches 0.5; one that held
    for longer before it recovered (a loss diverging for 70 steps until the learning rate
    decayed) gains back up to 0.85 over its next 60 steps."""
    if any(e.end is None for e in chain):
        return 1.0, None
    end = max(e.end for e in chain)
    held = end - chain[0].onset
    return 0.35 + 0.2 * min(1.0, held / 20) + 0.3 * min(1.0, max(0.0, held - 20) / 60), end


def origin(ep, chain: list, ctx) -> Hypothesis:
    """The story of `chain` named after `ep`: the strongest cause found for it (or for the
    chain's first sign), believed as much as the state is severe and the story lasted."""
    first = chain[0]
    found = {}      # rule -> its finding on the subject, else on the chain's first sign, else
    # on a lasting failure of the story that follows within a few steps (a loss that spikes,
    # then diverges with updates too large: the updates tell the cause of both)
    soon = [e for e in chain if e.counted and ep.onset < e.onset <= ep.onset + WINDOW]
    for e in dict.fromkeys([ep, first, *soon]):
        for rule in rules.CAUSES:
            if rule not in found and (f := rule(e, ctx)) is not None:
                found[rule] = f
    best = max(found.values(), key=lambda f: f.strength)   # max keeps the first of equals
    factor, recovered = persistence(chain)
    lasted = any(e.counted for e in chain)
    if lasted:
        factor = max(factor, LASTED)    # it failed the run: the story is an answer, not a sign
    unconfirmed = 0.6 if ep.stats.get("unconfirmed") else 1.0
    confidence = round(best.strength * states.severity(ep.state, 0.6) * factor * unconfirmed, 2)
    if not lasted:
        confidence = min(confidence, BLIP)  # nothing in the story lasted: a blip, not an answer
    on_rank = f" on rank {ep.rank}" if len(ctx.runs) > 1 else ""
    sign = [f"first sign, {numbers(first)}"] if first is not ep else []
    others = [e for e in chain if e is not ep and e is not first]
    # (the other strong findings of the same cause add their evidence: a rate raised, and the
    # updates it made too large)
    support = [line for f in found.values() if f is not best and f.cause == best.cause
               and f.strength >= SUPPORTS for line in f.evidence]
    evidence = [numbers(ep), *shards.evidence(ep, ctx.runs), *sign,
                *dict.fromkeys([*best.evidence, *support]),
                *aftermath(ep, others, recovered, ctx.runs[ep.run], len(ctx.runs) > 1)]
    return Hypothesis(
        symptom=ep.state, layer=ep.layer, step=ep.onset, cause=best.cause,
        confidence=confidence, summary=f"{cap(describe(ep))} at step {ep.onset}{on_rank}: {best.why}.",
        evidence=[e for e in evidence if e], fix=best.fix, process_rank=ep.rank,
        signal=ep.signal, module_type=ep.module_type, recovered=recovered, counted=ep.counted,
        alternatives=list(dict.fromkeys(f.cause for f in found.values()
                                        if f.cause not in (best.cause, "unknown"))))


def echo(ep, source: Hypothesis, reason: str, multi: bool, first_sign=False) -> Hypothesis:
    """A failure told as part of another's story: its consequence, or its first sign."""
    on_rank = f" on rank {ep.rank}" if multi else ""
    link = "the first sign of" if first_sign else "a consequence of"
    summary = (f"{cap(describe(ep))} at step {ep.onset}{on_rank}: {link} {source.layer} "
               f"({source.symptom} at step {source.step}).")
    return Hypothesis(
        symptom=ep.state, layer=ep.layer, step=ep.onset, cause="upstream",
        confidence=round(source.confidence * ECHO_DISCOUNT, 2), summary=summary,
        evidence=[reason, numbers(ep), *folded(ep)],
        fix=f"Fix the origin ({source.layer}) first; this should follow.",
        process_rank=ep.rank, signal=ep.signal, module_type=ep.module_type,
        recovered=ep.end, counted=ep.counted, origin=source)


def to_dict(h: Hypothesis) -> dict:
    """Its --json form (CONTRACT.md): `rank` is the position, as the contract names it."""
    return {"rank": h.position, "symptom": h.symptom, "layer": h.layer, "step": h.step,
            "cause": h.cause, "confidence": h.confidence, "summary": h.summary,
            "evidence": list(h.evidence), "fix": h.fix, "process_rank": h.process_rank,
            "signal": h.signal, "module_type": h.module_type, "recovered_step": h.recovered,
            "counted": h.counted,
            "alternatives": list(h.alternatives),
            "upstream_of": h.origin.position if h.origin else None,
            "consequences": [c.position for c in h.consequences]}
