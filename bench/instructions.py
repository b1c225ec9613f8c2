"""The `instructions` section: machine instructions per training step, plain and monitored,
counted by valgrind's callgrind.

Wall time on a shared machine moves by more than most changes to the monitor do (a few
hundredths of the ratio from one run to the next); a count of instructions does not move
with the machine's load, so it can tell a change of 1% from none. It is not time: Python
runs fewer instructions a cycle than a matrix product, so the monitor's share of the time
is larger than its share of the instructions (the tiny model: 1.76 in instructions, 2.1-2.4
in time). Use it to compare versions, and the `timing` section for the targets.

Each workload runs twice in fresh processes (`child.py count`, plain and under `neuraldbg
run`), one torch thread each: its warm-up steps, then its counted steps (`Workload.
count_steps`) inside one call of functools.reduce, the only place callgrind counts. The two
processes run side by side: load does not change what they count. Under callgrind a step
runs about 1000 times slower (the stack's: 30 s), so the larger models count 2 steps, which
early in a run include the densest summaries; the tiny model counts the timing section's
2,000 (2 minutes).
"""
from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor

from loop import ALL
from processes import spawn

# The C function that child.py's `count` runs the counted steps in.
_MARKER = "functools_reduce"


def available() -> bool:
    return shutil.which("valgrind") is not None


def run_instructions(name: str, steps: int, warmup: int, tmp: str, monitoring=ALL) -> dict:
    """Instructions per step of workload `name`, plain and monitored, and their ratio."""
    def count(monitored: bool) -> int:
        out = os.path.join(tmp, f"callgrind-{name}-{'monitored' if monitored else 'plain'}.out")
        prefix = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
                  f"--toggle-collect={_MARKER}", f"--callgrind-out-file={out}"]
        # (one thread: an OpenMP thread waiting for work spins for as long as the machine
        # makes it wait, which would put the load back into the count)
        spawn("count", name, steps, monitored, tmp, f"count-{monitored}", warmup=warmup,
              monitoring=monitoring, prefix=prefix,
              env_extra={"BENCH_THREADS": "1", "OMP_NUM_THREADS": "1"})
        return _total(out)

    with ThreadPoolExecutor(2) as pool:
        plain, monitored = pool.map(count, (False, True))
    return {"steps": steps, "warmup": warmup, "plain_per_step": plain / steps,
            "monitored_per_step": monitored / steps, "ratio": monitored / plain}


def _total(path: str) -> int:
    """The instructions counted, from a callgrind output file's `summary:` (or `totals:`)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"no instruction total in {path}")
