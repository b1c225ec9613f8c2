#!/usr/bin/env python
"""The verdict on real programs: buggy/fixed pairs ported from public bug reports, and correct
programs that look odd (a benchmark, not a test).

    python bench/real_programs.py                 # every program in bench/real_programs/
    python bench/real_programs.py -k out_ -k loop_   # those whose name holds any of these
    python bench/real_programs.py --json score.json  # also each run's verdict and top cause
    PYTHONPATH=/path/to/other/checkout python bench/real_programs.py    # another version

Each file in bench/real_programs/ is one program: buggy as it stands, fixed with `--fixed`,
its source cited in its docstring, and one line `# expect: cause=CAUSE` (or `# expect:
healthy` for a correct program, run once). Each run goes through `neuraldbg run --quiet` and
`neuraldbg explain --json`, as a user's would, with default thresholds. Scored:

- detected: the buggy run's verdict failed (at least one lasting failure; for a version from
  before the verdict, any failure transition);
- fixed clean: the fixed run's verdict did not fail (a healthy program's run, likewise);
- right cause: the top hypothesis of the buggy run names the expected cause;
- and the most state changes of any layer and signal within any 500 steps of a run (bounded
  at 8 by hysteresis, which remembers a layer's recoveries for the verdict's 500 steps).
"""
from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE / "real_programs"
_EXPECT = re.compile(r"^# expect:\s*(.+)$", re.M)


def expectation(path: Path) -> dict:
    """{"cause": ..., "symptom": ..., "layer": ...} or {"healthy": True} from `# expect:`."""
    found = _EXPECT.search(path.read_text(encoding="utf-8"))
    if found is None:
        raise SystemExit(f"{path.name}: no '# expect:' line")
    text = found.group(1).strip()
    if text == "healthy":
        return {"healthy": True}
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


def observe(script: Path, fixed: bool, tmp: str) -> dict:
    """One run under neuraldbg, explained: its verdict and its top hypothesis."""
    trace = os.path.join(tmp, f"{script.stem}{'-fixed' * fixed}.jsonl")
    cmd = [sys.executable, "-m", "neuraldbg_cli", "run", "--quiet", "--trace", trace, str(script)]
    started = time.perf_counter()
    # (one thread each: torch's small ops on several threads of a busy machine run 10x slower)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    # (run from elsewhere: `python -m` puts the working folder first on sys.path, which would
    # hide another version given by PYTHONPATH)
    run = subprocess.run(cmd + ["--fixed"] * fixed, capture_output=True, text=True,
                         timeout=600, env=env, cwd=tmp)
    seconds = time.perf_counter() - started
    out = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "explain", "--json", trace],
                         capture_output=True, text=True, timeout=300, cwd=tmp)
    if out.returncode != 0:
        return {"error": (run.stderr or out.stderr).strip().splitlines()[-1:], "seconds": seconds}
    doc = json.loads(out.stdout)
    top = doc["hypotheses"][0] if doc["hypotheses"] else None
    changes: dict = {}      # (layer, signal) -> the steps of its changes after its first state
    entered = False         # some failure transition (a version from before the verdict)
    with open(trace, encoding="utf-8") as f:
        for line in f:
            e = json.loads(line)
            if e.get("event") == "transition":
                entered = entered or e["to"] not in ("normal", "healthy", "anomalous")
                if e.get("from") is not None:
                    key = (e["layer"], e["signal"])
                    changes.setdefault(key, []).append(e["step"])
    verdict = doc.get("verdict", {"failed": entered})
    return {"exit": run.returncode, "failed": bool(verdict.get("failed")),
            "episodes": verdict.get("episodes", []), "blips": verdict.get("blips", 0),
            "top": None if top is None else {k: top[k] for k in
                                             ("symptom", "layer", "step", "cause", "confidence")},
            "flips": max(map(_most_within, changes.values()), default=0),
            "seconds": round(seconds, 1)}


def _most_within(steps: list, window: int = 500) -> int:
    """The most of `steps` (in order) within any `window` steps."""
    return max(bisect.bisect_left(steps, s + window) - i for i, s in enumerate(steps))


def score(name: str, expect: dict, buggy: dict | None, fixed: dict) -> dict:
    row = {"program": name, "expect": expect, "buggy": buggy, "fixed": fixed,
           "clean": not fixed.get("failed", True) and "error" not in fixed}
    if buggy is not None:
        top = buggy.get("top") or {}
        row["detected"] = bool(buggy.get("failed"))
        row["right_cause"] = row["detected"] and top.get("cause") == expect.get("cause")
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", action="append", default=[], metavar="TEXT",
                        help="only programs whose file name holds TEXT (repeatable)")
    parser.add_argument("--json", metavar="FILE", help="write every run's result to FILE")
    parser.add_argument("--jobs", type=int, default=2, help="programs run at once (default 2)")
    args = parser.parse_args()
    scripts = sorted(p for p in PROGRAMS.glob("*.py")
                     if not args.k or any(k in p.name for k in args.k))
    if not scripts:
        raise SystemExit("no program matched")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        jobs = []
        for script in scripts:
            expect = expectation(script)
            buggy = None if expect.get("healthy") else pool.submit(observe, script, False, tmp)
            fixed = pool.submit(observe, script, not expect.get("healthy"), tmp)
            jobs.append((script.stem, expect, buggy, fixed))
        rows = [score(name, expect, b.result() if b else None, f.result())
                for name, expect, b, f in jobs]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(table(rows))
    return 0


def table(rows: list) -> str:
    """The Markdown table of every program, then the totals."""
    lines = ["| program | expected | buggy: verdict, top hypothesis | fixed: verdict |",
             "| --- | --- | --- | --- |"]
    for r in rows:
        expect = "healthy" if r["expect"].get("healthy") else r["expect"].get("cause", "?")
        lines.append(f"| {r['program']} | {expect} | {_told(r['buggy'])} | "
                     f"{_verdict(r['fixed'])} |")
    pairs = [r for r in rows if r["buggy"] is not None]
    healthy = [r for r in rows if r["buggy"] is None]
    lines += ["", f"pairs: {len(pairs)}; detected {sum(r['detected'] for r in pairs)}/{len(pairs)}, "
              f"fixed clean {sum(r['clean'] for r in pairs)}/{len(pairs)}, right top cause "
              f"{sum(r['right_cause'] for r in pairs)}/{len(pairs)}",
              f"correct programs that look odd: clean {sum(r['clean'] for r in healthy)}/"
              f"{len(healthy)}",
              f"most state changes of any layer and signal within 500 steps: "
              f"{_most_flips(rows)} (the bound is 8)"]
    return "\n".join(lines)


def _most_flips(rows: list) -> int:
    return max((run.get("flips", 0) for r in rows for run in (r["buggy"], r["fixed"]) if run),
               default=0)


def _verdict(run: dict) -> str:
    if "error" in run:
        return f"error: {' '.join(run['error'])}"
    if not run["failed"]:
        return "passed" + (f" ({run['blips']} blips)" if run["blips"] else "")
    if not run["episodes"]:         # (a version from before the verdict)
        return "**failed**"
    first = run["episodes"][0]
    return f"**failed**: {first['layer']} {first['state']} at {first['step']}"


def _told(run: dict | None) -> str:
    if run is None:
        return "(correct program)"
    top = run.get("top")
    said = f"; {top['symptom']} {top['layer']} @{top['step']}, {top['cause']} {top['confidence']}" \
        if top else "; no hypothesis"
    return _verdict(run) + said


if __name__ == "__main__":
    sys.exit(main())
