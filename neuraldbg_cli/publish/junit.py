"""JUnit XML for CI systems: one test case per observed layer and signal, failed when it
entered a `--fail-on` state, with the hypothesis about it as the failure's text.

The shape is the one Jenkins, GitLab, Azure and GitHub's test reporters read: <testsuites>
holding a <testsuite> per trace (per rank), each with <properties> and <testcase classname
name time>, a <failure message type> or <error message type> inside a failed one."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from .. import errors, states
from ..errors import InputError
from ..inert import inert
from . import text

# Characters XML 1.0 cannot hold at all (not even escaped); a trace may carry any.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _x(value) -> str:
    """A string from the trace, made inert and storable."""
    return _storable(inert(value))


def _storable(s: str) -> str:
    """Text already made inert (text.py's), with what XML cannot hold replaced."""
    return _NOT_XML.sub("?", s)


def check_writable(path: str) -> None:
    errors.check_writable(path, "JUnit file")


def write(analysis, fail_on, path: str) -> None:
    try:
        Path(path).write_bytes(to_xml(analysis, fail_on))
    except OSError as e:
        raise InputError(f"cannot write JUnit file {path}: {e.strerror or e}") from None


def to_xml(analysis, fail_on) -> bytes:
    fail_on = set(fail_on or ())
    multi = len(analysis.runs) > 1
    top = ET.Element("testsuites", name="neuraldbg")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for run in analysis.runs:
        suite = _suite(analysis, run, fail_on, multi)
        top.append(suite)
        for key in totals:
            totals[key] += int(suite.get(key))
    for key, n in totals.items():
        top.set(key, str(n))
    top.set("time", "0")
    ET.indent(top)
    return ET.tostring(top, encoding="UTF-8", xml_declaration=True) + b"\n"


def _suite(analysis, run, fail_on: set, multi: bool) -> ET.Element:
    script = Path(run.script).stem or "script"      # (a dot in a classname reads as a package)
    classname = f"neuraldbg.{script}" + (f".rank{run.rank}" if multi else "")
    suite = ET.Element("testsuite", name=_x(classname), time="0", skipped="0")
    props = ET.SubElement(suite, "properties")
    for name, value in (("trace", run.path), ("script", run.script), ("rank", run.rank),
                        ("world_size", run.world_size), ("steps", run.steps),
                        ("status", run.status), ("fail_on", ",".join(sorted(fail_on)))):
        if value is not None:
            ET.SubElement(props, "property", name=name, value=_x(value))
    failures = errors = 0
    cases = _cases(run)
    for layer, signal in cases:
        case = ET.SubElement(suite, "testcase", classname=_x(classname),
                             name=_x(f"{layer} {signal}"), time="0")
        failures += _judge_case(case, analysis, run, layer, signal, fail_on, multi)
    errors += _run_case(suite, run, classname)
    skipped = _monitoring_case(suite, run, classname)
    suite.set("tests", str(len(cases) + 1 + skipped))
    suite.set("skipped", str(skipped))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    return suite


def _cases(run) -> list:
    """(layer, signal) pairs: every one the model events list as watched, in their order,
    then any other that has transitions (a schema-1 trace lists no signals)."""
    pairs = [(layer, signal) for layer, signals in run.observed.items() for signal in signals]
    seen = set(pairs)
    return pairs + [key for key in run.tracks if key not in seen]


def _judge_case(case, analysis, run, layer: str, signal: str, fail_on: set, multi: bool) -> int:
    """Marks the case failed (1) when an episode of its layer in a fail_on state counts
    (verdict.py); else notes the other states it entered, blips included, in its output (0)."""
    track = run.tracks.get((layer, signal))
    entered = {}            # state -> first step
    for t in track.transitions if track is not None else ():
        if t["to"] not in states.ok_names():
            entered.setdefault(t["to"], t["step"])
    lasting = {}            # state -> first step of a counted episode
    for h in run.verdict(fail_on):
        if (h.layer, h.signal) == (layer, signal):
            lasting.setdefault(h.state, h.step)
    for s, step in entered.items():     # a warning sign the gate names (anomalous)
        known = states.named(s)
        if s in fail_on and known is not None and not known.failure:
            lasting.setdefault(s, step)
    failed = list(lasting)
    if failed:
        said = [f"{s} at step {lasting[s]}" for s in failed]
        hyps = [text.hypothesis_for(analysis, layer, signal, s, run.rank) for s in failed]
        body = [text.full(h, multi) if h is not None else
                f"{s} at step {lasting[s]} (no hypothesis of its own: see neuraldbg explain)"
                for s, h in zip(failed, hyps)]
        ET.SubElement(case, "failure", message=_x(f"{layer} {signal}: {', '.join(said)}"),
                      type=_x(failed[0])).text = _storable("\n\n".join(body))
        return 1
    if entered:
        notes = ", ".join(f"{s} at step {step}" for s, step in entered.items())
        ET.SubElement(case, "system-out").text = _x(f"entered {notes} (not in --fail-on, or "
                                                    f"did not last: a blip)")
    return 0


def _run_case(suite, run, classname: str) -> int:
    """The run itself: an error when the script failed, was interrupted or was killed."""
    case = ET.SubElement(suite, "testcase", classname=_x(classname), name="run", time="0")
    if run.status == "completed" and run.exit_code in (0, 3, None):
        return 0
    if run.status is None:
        message, kind = "no run_end: the run was killed or is still running", "killed"
    else:
        message = f"{run.status} (exit {run.exit_code})" + (f": {run.error}" if run.error else "")
        kind = run.status
    ET.SubElement(case, "error", message=_x(message), type=_x(kind))
    return 1


def _monitoring_case(suite, run, classname: str) -> int:
    """Where a fault switched monitoring off, a skipped case says from which step: the cases
    above passed on the steps before it only (1), else nothing (0)."""
    if run.off is None:
        return 0
    from ..explain.report import unobserved

    case = ET.SubElement(suite, "testcase", classname=_x(classname), name="monitoring", time="0")
    ET.SubElement(case, "skipped", message=_x(unobserved([run])[0]))
    return 1
