"""From traces alone to ranked hypotheses: episodes linked into stories, each story explained."""
from __future__ import annotations

from dataclasses import dataclass

from .. import states
from . import echoes
from .context import Context, models_of
from .episodes import Episode, episodes, layer_order, precedence
from .hypothesis import echo, origin, to_dict
from .runs import digest


@dataclass
class Analysis:
    """The digested runs, every episode in precedence order, the hypotheses best first."""
    runs: list
    episodes: list
    hypotheses: list
    order: dict


MAX_CAUSES = 64    # earlier failures an episode is checked against: the earliest still live


def attribute(eps: list, ctx: Context) -> list:
    """For each episode (in precedence order): (index of the earliest one it echoes, reason),
    or None for an origin. Candidates are the episodes still live (over for at most
    echoes.REACH steps), the earliest MAX_CAUSES of them, so a run of any length costs at
    most (episodes x MAX_CAUSES) rule checks."""
    links, live = [], []
    horizon = echoes.REACH
    for j, b in enumerate(eps):
        if j % MAX_CAUSES == 0:     # (inline below, the same test keeps the choice exact)
            live = [i for i in live if eps[i].end is None or eps[i].end + horizon >= b.onset]
        links.append(next(((i, reason) for i in live[:MAX_CAUSES] for rule in echoes.ECHOES
                           if (eps[i].end is None or eps[i].end + horizon >= b.onset)
                           and (reason := rule(eps[i], b, ctx))), None))
        live.append(j)
    return links


def analyze(traces: list) -> Analysis:
    runs = [digest(t) for t in traces]
    order = layer_order(runs)
    ctx = Context(runs, order, models_of(runs))
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
        origins[j] = origin(eps[named], chain, ctx)
        for k in members:
            if k != named:
                reason = links[k][1] if links[k] else "the first sign of the same failure"
                members_of[k] = echo(eps[k], origins[j], reason, len(runs) > 1,
                                     first_sign=links[k] is None)
    return Analysis(runs, eps, _rank(origins, members_of, chains), order)


def subject(chain: list) -> Episode:
    """The failure a story is named after: its root, unless the root is only a sign (a
    generic shift, or a state the layer recovered from) of a more severe failure that lasted,
    such as a jump in scale before a layer died; then the earliest such failure. A root that
    keeps falling into a failure and out of it while other layers stay in it (a gradient
    flapping at the vanishing threshold while the first layers' stay far below) gives way to
    the worst of those."""
    first = chain[0]
    known = states.state_of(first.signal, first.state)
    warning_sign = known is not None and not known.failure
    if not warning_sign and (first.counted or not first.recovered):
        return first
    same = [e for e in chain if (e.signal, e.state) == (first.signal, first.state)]
    flapping = first.folded or any(e.layer == first.layer and e.run == first.run
                                   for e in same[1:])
    kept = [e for e in same if e.lasting and e.layer != first.layer]
    if not warning_sign and flapping and kept:
        return min(kept, key=_depth)
    # (the earliest worse failure that counts: a later one would read backwards, a headline
    # dated after consequences it lists)
    worse = states.severity(first.state, 0.0)
    return next((e for e in chain if (e.counted or e.lasting)
                 and states.severity(e.state, 0.0) > worse), first)


def _depth(ep: Episode) -> float:
    """Lower is worse: a vanishing gradient's share of the model's largest; 0 for any other
    failure (the earliest is then named)."""
    if ep.state != "vanishing":
        return 0.0
    s = ep.stats
    ratio, norm, top = s.get("ratio_to_largest"), s.get("grad_norm"), s.get("model_max_grad_norm")
    if isinstance(ratio, (int, float)):
        return ratio
    if isinstance(norm, (int, float)) and isinstance(top, (int, float)) and top > 0:
        return norm / top
    return 1.0


def _rank(origins: dict, members: dict, chains: dict) -> list:
    """Origins by confidence, then every consequence under its origin's position."""
    top = sorted(origins, key=lambda j: (-origins[j].confidence, j))
    ranked = [origins[j] for j in top]
    for j in top:
        follow = [members[k] for k in chains[j] if k in members]
        origins[j].consequences = follow
        ranked += follow
    for n, h in enumerate(ranked, 1):
        h.position = n
    return ranked


def to_json(analysis: Analysis) -> dict:
    """The --json document (CONTRACT.md), with a few extra keys."""
    traces = [{"path": r.path, "script": r.script, "rank": r.rank, "world_size": r.world_size,
               "run_id": r.run_id, "status": r.status, "steps": r.steps,
               "exit_code": r.exit_code, "error": r.error,
               **({"stop": r.stop} if r.stop else {}),
               **({"capture": _capture(r.capture)} if r.capture else {}),
               **({"monitoring_off": r.off} if r.off else {})}
              for r in analysis.runs]
    return {"schema": 1, "traces": traces, "verdict": verdict(analysis.runs),
            "hypotheses": [to_dict(h) for h in analysis.hypotheses]}


def verdict(runs: list) -> dict:
    """Whether the run failed: the episodes that count (verdict.py), and how many blips."""
    multi = len(runs) > 1
    episodes = [{**h.to_dict(), **({"process_rank": r.rank} if multi else {})}
                for r in runs for h in r.verdict()]
    return {"failed": bool(episodes), "episodes": episodes, "blips": sum(r.blips() for r in runs)}


def _capture(event: dict) -> dict:
    """What --json says of a capture: its file, and the samples to blame."""
    return {k: event.get(k) for k in ("path", "step", "layer", "signal", "state", "pinpoint",
                                      "blamed_indices")}
