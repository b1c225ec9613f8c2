"""GitHub Actions: workflow annotations for the top hypotheses, and a Markdown summary of the
run appended to the job's step summary ($GITHUB_STEP_SUMMARY). Used when GITHUB_ACTIONS=true.

Annotations are workflow commands (`::error title=...::message`) printed to stderr: the
runner reads commands on both streams, and stdout belongs to the script (or to --json)."""
from __future__ import annotations

import os
from pathlib import Path

from .. import states
from ..inert import inert
from . import text

ANNOTATED = 5       # hypotheses annotated at most (the rest are in the summary)


def active(env=None) -> bool:
    return (os.environ if env is None else env).get("GITHUB_ACTIONS") == "true"


def _data(s: str) -> str:
    """A command's message: %, CR and LF escaped as the runner expects."""
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(s: str) -> str:
    """A command's property value: also : and , escaped."""
    return _data(s).replace(":", "%3A").replace(",", "%2C")


def annotations(analysis, fail_on, env=None) -> list:
    """One workflow command per likely origin, an error where its state fails the gate,
    else a warning; attached to the script when it lies in the workspace."""
    from ..explain.report import unobserved

    env = os.environ if env is None else env
    fail_on = set(fail_on or ())
    multi = len(analysis.runs) > 1
    script = _in_workspace(analysis.runs[0].script, env.get("GITHUB_WORKSPACE"))
    chosen = text.likely(analysis)[:ANNOTATED]
    for state in sorted(fail_on):       # a state that fails the gate is annotated, always
        first = min((h for h in analysis.hypotheses if h.symptom == state),
                    key=lambda h: h.step, default=None)
        if first is not None and first not in chosen:
            chosen.append(first)
    # a verdict that covers only part of the run says so first
    out = [f"::warning title={_prop('neuraldbg: monitoring switched off')}::{_data(line)}"
           for line in unobserved(analysis.runs)]
    for h in chosen:
        level = "error" if h.symptom in fail_on and fails(h) else "warning"
        props = [f"title={_prop(f'neuraldbg: {h.symptom} {h.signal} in {text.where(h)}')}"]
        if script:
            props.insert(0, f"file={_prop(script)}")
        message = "\n".join([text.headline(h, multi), *text.body(h)])
        out.append(f"::{level} {','.join(props)}::{_data(message)}")
    return out


def fails(h) -> bool:
    """A hypothesis whose failure counts (verdict.py), or a warning sign the gate names."""
    known = states.named(h.symptom)
    return h.counted or known is None or not known.failure


def _in_workspace(script: str, workspace: str | None) -> str | None:
    """The script's path relative to the workspace (what an annotation's file= wants)."""
    if not workspace or not script:
        return None
    try:
        return Path(script).resolve().relative_to(Path(workspace).resolve()).as_posix()
    except (ValueError, OSError):
        return None


def _line(s) -> str:
    """Markdown text on one line (a line break would end a list item or a heading)."""
    return inert(s).replace("\n", " ")


def _cell(s) -> str:
    """A Markdown table cell: no pipe can break the table either."""
    return _line(s).replace("|", "\\|")


def summary(analysis, fail_on) -> str:
    """The step summary: the run, the gate's verdict, the hypotheses as a table, the top
    ones in full."""
    from ..explain.report import no_failure, run_line, unobserved
    from ..explain.runs import gate

    fail_on = set(fail_on or ())
    failed = gate(analysis.runs, fail_on)
    origins = [h for h in analysis.hypotheses if h.origin is None]
    lines = ["## neuraldbg", "", _line(run_line(analysis.runs).plain), ""]
    lines += [f"**{_line(line)}**\n" for line in unobserved(analysis.runs)]
    if failed:
        lines += [f"**Failed**: {', '.join(failed)} detected (--fail-on {','.join(sorted(fail_on))}).", ""]
    if not origins:
        lines.append(no_failure(analysis.runs))
        return "\n".join(lines) + "\n"
    lines += ["| # | state | layer | step | cause | confidence |",
              "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {h.position} | {_cell(h.symptom)} {_cell(h.signal)} | {_cell(text.where(h))} "
              f"| {h.step} | {_cell(h.cause)} | {h.confidence:.2f} |" for h in origins[:20]]
    if len(origins) > 20:
        lines.append(f"\n... and {len(origins) - 20} more (neuraldbg explain --json)")
    for h in text.likely(analysis)[:3]:
        lines += ["", f"### #{h.position} {_line(text.headline(h, len(analysis.runs) > 1))}", "",
                  _line(h.summary), ""]
        lines += [f"- {_line(e)}" for e in h.evidence]
        lines += ["", f"**Fix**: {_line(h.fix)}"]
    return "\n".join(lines) + "\n"


def publish(analysis, fail_on, err, env=None) -> None:
    """Under GitHub Actions: annotations to `err`, the summary appended to its file (a
    summary that cannot be written is a warning: the run's own result stands)."""
    env = os.environ if env is None else env
    for line in annotations(analysis, fail_on, env):
        print(line, file=err)
    path = env.get("GITHUB_STEP_SUMMARY")
    if path:
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(summary(analysis, fail_on))
        except OSError as e:
            print(f"neuraldbg: warning: step summary {path} not written ({e.strerror or e})",
                  file=err)
