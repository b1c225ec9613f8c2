"""From traces alone to ranked hypotheses: failure episodes, their echoes, their causes."""
from __future__ import annotations

from dataclasses import dataclass, field

from . import echoes, rules
from .episodes import INPUT, Episode, digest, episodes, is_number, layer_order, precedence
from .evidence import aftermath, cap, describe, numbers

SEVERITY = {"nonfinite": 1.0, "dead": 1.0, "exploding": 0.95, "vanishing": 0.9,
            "saturated": 0.85, "anomalous": 0.6}
ECHO_DISCOUNT = 0.9     # a consequence is believed a little less than the origin it hangs on


@dataclass
class Hypothesis:
    """A ranked explanation: symptom, origin layer and onset, cause, confidence, why, fix."""
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
    alternatives: list = field(default_factory=list)
    origin: "Hypothesis | None" = None
    consequences: list = field(default_factory=list)
    rank: int = 0


@dataclass
class Context:
    """What the rules may look at besides the episode itself."""
    runs: list
    order: dict
    models: list

    def hparams(self, run: int) -> list:
        return self.runs[run].hparams

    def input_rms(self, run: int, step: int) -> float | None:
        """The last rms of the model's input written at or before `step` (None: unknown)."""
        return next((t["stats"]["rms"] for t in reversed(self.runs[run].transitions)
                     if t["layer"] == INPUT and t["step"] <= step and isinstance(t.get("stats"), dict)
                     and is_number(t["stats"].get("rms"))), None)

    def model_of(self, layer: str) -> list:
        """The layers of the outermost module holding `layer` (all layers if unknown)."""
        found = next((m for m in self.models if any(l["name"] == layer for l in m)), None)
        return found if found is not None else [l for m in self.models for l in m]


@dataclass
class Analysis:
    runs: list
    episodes: list
    hypotheses: list
    order: dict


def attribute(eps: list, ctx: Context) -> list:
    """For each episode (in precedence order): (index of the earliest one it echoes, reason),
    or None for an origin. Episodes over for longer than echoes.HORIZON are dropped from the
    candidates, so a long run costs about (episodes x layers), not episodes squared."""
    links, live = [], []
    for j, b in enumerate(eps):
        live = [i for i in live if eps[i].end is None or eps[i].end + echoes.HORIZON >= b.onset]
        links.append(next(((i, reason) for i in live for rule in echoes.ECHOES
                           if (reason := rule(eps[i], b, ctx))), None))
        live.append(j)
    return links


def analyze(traces: list) -> Analysis:
    runs = [digest(t) for t in traces]
    order = layer_order(runs)
    ctx = Context(runs, order, _models(traces))
    eps = sorted((e for i, r in enumerate(runs) for e in episodes(r, i, order)), key=precedence)
    links = attribute(eps, ctx)
    chains: dict = {}
    root = []
    for j, link in enumerate(links):
        root.append(j if link is None else root[link[0]])
        chains.setdefault(root[j], []).append(j)
    origins, members_of = {}, {}
    for j, members in chains.items():
        chain = [eps[k] for k in members]
        named = members[chain.index(subject(chain))]
        origins[j] = _origin(eps[named], chain, ctx)
        for k in members:
            if k != named:
                reason = links[k][1] if links[k] else "the first sign of the same failure"
                members_of[k] = _echo(eps[k], origins[j], reason, runs, first_sign=links[k] is None)
    return Analysis(runs, eps, _rank(origins, members_of, chains), order)


def subject(chain: list) -> Episode:
    """The failure a story is named after: its root, unless the root is only a sign (a
    generic shift, or a state the layer recovered from) of a more severe failure that lasted,
    such as a jump in scale before a layer died; then the earliest such failure."""
    first = chain[0]
    if first.state != "anomalous" and not first.recovered:
        return first
    worse = SEVERITY.get(first.state, 0)
    return next((e for e in chain if e.lasting and SEVERITY.get(e.state, 0) > worse), first)


def _models(traces: list) -> list:
    return [[l for l in m["layers"] if isinstance(l, dict) and isinstance(l.get("name"), str)]
            for t in traces[:1] for m in t.of("model") if isinstance(m.get("layers"), list)]


def _rank(origins: dict, members: dict, chains: dict) -> list:
    """Origins by confidence, then every consequence under its origin's position."""
    top = sorted(origins, key=lambda j: (-origins[j].confidence, j))
    ranked = [origins[j] for j in top]
    for j in top:
        follow = [members[k] for k in chains[j] if k in members]
        origins[j].consequences = follow
        ranked += follow
    for n, h in enumerate(ranked, 1):
        h.rank = n
    return ranked


def _persistence(chain: list) -> tuple:
    """(factor, recovered step): a failure whose story lasts to the end counts fully; one that
    recovers counts at most 0.55, so a blip never reaches 0.5."""
    if any(e.end is None for e in chain):
        return 1.0, None
    end = max(e.end for e in chain)
    return 0.35 + 0.2 * min(1.0, (end - chain[0].onset) / 20), end


def _origin(ep: Episode, chain: list, ctx: Context) -> Hypothesis:
    first = chain[0]
    found = [f for e in dict.fromkeys([ep, first]) for rule in rules.CAUSES
             if (f := rule(e, ctx)) is not None]
    best = max(found, key=lambda f: f.strength)     # max keeps the first of equals: list order
    factor, recovered = _persistence(chain)
    unconfirmed = 0.6 if ep.stats.get("unconfirmed") else 1.0
    confidence = round(best.strength * SEVERITY.get(ep.state, 0.6) * factor * unconfirmed, 2)
    summary = f"{cap(describe(ep))} at step {ep.onset}{_on_rank(ep, ctx)}: {best.why}."
    sign = [f"first sign, {numbers(first)}"] if first is not ep else []
    others = [e for e in chain if e is not ep and e is not first]
    evidence = [numbers(ep), *sign, *best.evidence,
                *aftermath(ep, others, recovered, ctx.runs[ep.run], len(ctx.runs) > 1)]
    alternatives = list(dict.fromkeys(f.cause for f in found
                                      if f.cause not in (best.cause, "unknown")))
    return Hypothesis(ep.state, ep.layer, ep.onset, best.cause, confidence, summary,
                      [e for e in evidence if e], best.fix, ep.rank, ep.signal, ep.module_type,
                      recovered, alternatives)


def _echo(ep: Episode, origin: Hypothesis, reason: str, runs: list, first_sign=False) -> Hypothesis:
    rank = f" on rank {ep.rank}" if len(runs) > 1 else ""
    link = "the first sign of" if first_sign else "a consequence of"
    summary = (f"{cap(describe(ep))} at step {ep.onset}{rank}: {link} {origin.layer} "
               f"({origin.symptom} at step {origin.step}).")
    return Hypothesis(ep.state, ep.layer, ep.onset, "upstream",
                      round(origin.confidence * ECHO_DISCOUNT, 2), summary,
                      [reason, numbers(ep)], f"Fix the origin ({origin.layer}) first; this "
                      "should follow.", ep.rank, ep.signal, ep.module_type, ep.end, [], origin)


def _on_rank(ep: Episode, ctx: Context) -> str:
    return f" on rank {ep.rank}" if len(ctx.runs) > 1 else ""


def to_json(analysis: Analysis) -> dict:
    """The --json document (CONTRACT.md), with a few extra keys."""
    traces = [{"path": r.path, "script": r.script, "rank": r.rank, "world_size": r.world_size,
               "run_id": r.run_id, "status": r.status, "steps": r.steps,
               "exit_code": r.exit_code, "error": r.error} for r in analysis.runs]
    return {"schema": 1, "traces": traces, "hypotheses": [_hjson(h) for h in analysis.hypotheses]}


def _hjson(h: Hypothesis) -> dict:
    return {"rank": h.rank, "symptom": h.symptom, "layer": h.layer, "step": h.step,
            "cause": h.cause, "confidence": h.confidence, "summary": h.summary,
            "evidence": list(h.evidence), "fix": h.fix, "process_rank": h.process_rank,
            "signal": h.signal, "module_type": h.module_type, "recovered_step": h.recovered,
            "alternatives": list(h.alternatives),
            "upstream_of": h.origin.rank if h.origin else None,
            "consequences": [c.rank for c in h.consequences]}
