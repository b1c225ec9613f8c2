"""Rich rendering of an explanation: run line, ranked hypotheses, then the timeline. Every string
that came from a trace goes through `inert` (a trace is data from elsewhere)."""
from __future__ import annotations

from rich.console import Group
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

from .. import states
from ..inert import inert
from ..trace import PSEUDO_LAYERS
from .timeline import Timeline

SHOWN = 5           # origins shown in full; the rest get one line each (all are in --json)
LIKELY = 0.5        # below this a hypothesis is a weak signal, not an answer
_STYLES = {"muted": "dim", "title": "bold", "cause": "bold cyan", "fix": "green", "position": "bold"}


def theme() -> Theme:
    """The report's styles by name: `state.NAME` for every registered state, as of now."""
    return Theme({**{f"state.{n}": states.named(n).style for n in states.state_names()},
                  **_STYLES})


THEME = theme()     # the built-in states; a state registered later needs theme()


def render(analysis) -> Group:
    """The whole report, one renderable for Console.print."""
    origins = [h for h in analysis.hypotheses if h.origin is None]
    parts = [run_line(analysis.runs), verdict_line(analysis.runs),
             *unobserved_lines(analysis.runs), *evidence_lines(analysis.runs), Text(),
             *hypotheses(origins, multi=len(analysis.runs) > 1, runs=analysis.runs)]
    if analysis.episodes:
        parts += [Text(), Timeline(analysis)]
    return Group(*parts)


def run_line(runs) -> Text:
    """One line on the run: script, ranks, steps, status, exit."""
    steps = max((r.steps for r in runs if r.steps is not None), default=None)
    text = Text(inert(runs[0].script), style="title")
    for bit in (_ranks(runs), f"{steps} steps" if steps is not None else "steps unknown",
                _status(runs)):
        if bit:
            text.append(f" | {inert(bit)}")
    return text


def verdict_line(runs) -> Text:
    """Whether the run failed: its lasting failures (verdict.py), and how many blips."""
    lasting = [(r, h) for r in runs for h in r.verdict()]
    blips = sum(r.blips() for r in runs)
    blip_note = f"; {blips} blip{'s' * (blips != 1)} (failures that did not last)" if blips else ""
    if not lasting and _unobserved_run(runs):
        return Text("Verdict: none, no training step was observed", style="state.dead")
    if not lasting:
        return Text(f"Verdict: passed, no lasting failure{blip_note}", style="state.healthy")
    r, first = lasting[0]
    where = f" on rank {r.rank}" if len(runs) > 1 else ""
    text = Text("Verdict: failed", style="state.dead")
    text.append(inert(f", {len(lasting)} lasting failure{'s' * (len(lasting) != 1)}; first: "
                      f"{first.layer} {first.signal} {first.state} at step {first.step}{where}, "
                      f"held {first.steps} steps{blip_note}"))
    return text


def unobserved_lines(runs) -> list:
    """Where a fault switched monitoring off: the verdict covers the steps before it only."""
    return [Text(line, style="state.dead") for line in unobserved(runs)]


def unobserved(runs) -> list:
    """The same as plain lines (JUnit, GitHub, the HTML report say it in these words)."""
    return [inert(f"Not observed from step {r.off['step']}"
                  f"{f' on rank {r.rank}' if len(runs) > 1 else ''} on: monitoring was "
                  f"switched off ({r.off['message']})") for r in runs if r.off is not None]


def no_failure(runs) -> str:
    """What a report without hypotheses says: of every step, of the steps observed, or that
    none was (and why, as far as the trace tells)."""
    if _unobserved_run(runs):
        return NO_STEP_ENDED if any(r.tracks for r in runs) else \
            NO_STEP_TORCH_FUNC if any(r.torch_func for r in runs) else NO_STEP
    return ("No failure found in the steps observed." if any(r.off for r in runs) else
            "No failure found: every layer stayed normal and every gradient healthy.")


NO_STEP = ("No training step was observed in this process: no optimizer step, and no forward "
           "with gradients (training in child processes, as torch.multiprocessing starts them, "
           "is not observed).")
NO_STEP_ENDED = ("No training step was completed: the run ended during its first step, before "
                 "its update; the forward seen until then showed no failure.")
NO_STEP_TORCH_FUNC = ("No training step was observed in this process: the model was called under "
                      "torch.func transforms (vmap, grad), and training there, updated without a "
                      "torch.optim step, is not observed.")


def _unobserved_run(runs) -> bool:
    """A run that ended having completed no step: a clean verdict would say nothing, even
    where the forward of a first step was seen (a crash before its optimizer step)."""
    return all(r.steps == 0 for r in runs)


def evidence_lines(runs) -> list:
    """Where --stop-on stopped training, and the capture: its file and the samples to blame."""
    from ..stopping import pinpointed

    out = []
    for r in runs:
        on = f" on rank {r.rank}" if len(runs) > 1 else ""
        stop = r.stop or {}
        if isinstance(stop.get("at"), int):
            out.append(Text(inert(f"Stopped{on} at step {stop['at']}, before its update: "
                                  f"{stop.get('layer')} {stop.get('signal')} {stop.get('state')}"),
                            style="state.dead"))
        c = r.capture
        if c is not None:
            said = pinpointed(c.get("pinpoint"), c.get("blamed_indices")
                              if isinstance(c.get("blamed_indices"), list) else None)
            out.append(Text(inert(f"Evidence{on}: {c['path']} (step {c.get('step')}, "
                                  f"{c.get('layer')} {c.get('state')})"
                                  + (f"; {said}" if said else ""))))
    return out


def _ranks(runs) -> str:
    if len(runs) == 1 and runs[0].world_size == 1:
        return ""
    which = "ranks " * (len(runs) > 1) or "rank "
    return f"{which}{', '.join(str(r.rank) for r in runs)} of {runs[0].world_size}"


def _status(runs) -> str:
    said = {(r.status, r.exit_code, r.error) for r in runs}
    if len(said) > 1:
        return "; ".join(f"rank {r.rank} {_one_status(r)}" for r in runs)
    return _one_status(runs[0])


def _one_status(run) -> str:
    if run.status is None:
        return "no run_end (killed?)"
    code = f" (exit {run.exit_code})" if run.exit_code is not None else ""
    return f"{run.status}{code}" + (f": {run.error}" if run.error else "")


def hypotheses(origins, multi: bool = False, runs=()) -> list:
    """runs: the runs read (whether each step of them was observed)."""
    likely = [h for h in origins if h.confidence >= LIKELY]
    if not origins:
        return [Text(no_failure(runs), style="state.healthy")]
    if likely:
        heading = "Hypotheses, most likely first"
    elif any(r.verdict() for r in runs):    # (a failure that lasted, of an unclear cause)
        heading = "The failure's cause is unclear (nothing with confidence >= 0.5); weak hypotheses:"
    else:
        heading = "No likely failure (nothing with confidence >= 0.5); weak signals:"
    out = [Text(heading, style="title")]
    for n, h in enumerate(origins[:SHOWN]):
        out += [Text()] * (n > 0) + [hypothesis(h, multi)]
    for h in origins[SHOWN:SHOWN * 2]:
        out.append(Text(inert(f"#{h.position} {h.symptom} {h.signal} in {h.layer} at step {h.step} "
                              f"({h.cause}, confidence {h.confidence:.2f})"), style="muted"))
    if len(origins) > SHOWN * 2:
        out.append(Text(f"... and {len(origins) - SHOWN * 2} more (see --json)", style="muted"))
    return out


def hypothesis(h, multi: bool = False) -> Group:
    """One origin: headline, summary, evidence, fix."""
    head = Text(f"#{h.position} ", style="position")
    head.append(h.symptom, style=f"state.{h.symptom}")
    where = h.layer if h.layer in PSEUDO_LAYERS else f"{h.layer} ({h.module_type})"
    head.append(inert(f" {h.signal} in {where} at step {h.step}"))
    head.append(f" on rank {h.process_rank}" if multi else "")
    head.append(" | cause ")
    head.append(h.cause, style="cause")
    head.append(f" | confidence {h.confidence:.2f}")
    body = Table.grid(padding=(0, 1))
    body.add_column(width=3, no_wrap=True)
    body.add_column()
    body.add_row("", Text(inert(h.summary)))
    for e in h.evidence:
        body.add_row(Text("-", style="muted"), Text(inert(e), style="muted"))
    body.add_row(Text("fix", style="fix"), Text(inert(h.fix)))
    if h.alternatives:
        body.add_row("", Text(inert(f"also consistent with: {', '.join(h.alternatives)}"), style="muted"))
    return Group(head, Padding(body, (0, 0, 0, 1), expand=False))
