"""`run --stop-on` under torchrun (2 CPU ranks, gloo): a NaN batch on rank 1 stops both ranks
at the same step, before its update, each exiting 3; nobody hangs in a collective."""
import shutil
import subprocess
import sys
import time

import pytest
import torch

from conftest import ENV, SAMPLES, run_end, trace_events

pytestmark = [pytest.mark.e2e, pytest.mark.distributed]


@pytest.mark.skipif(shutil.which("true") is None, reason="needs a POSIX system")
def test_a_nan_batch_on_rank_1_stops_both_ranks(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--standalone", "-m", "neuraldbg_cli", "run", "--stop-on", "nonfinite",
           "--trace", str(tmp_path / "run.jsonl"), str(SAMPLES / "ddp_bad_shard.py"),
           "--bad-step", "12", "--bad-rank", "1", "--steps", "30"]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=150,
                          env=ENV)
    assert time.monotonic() - started < 120, "no rank hung"
    assert proc.returncode != 0
    assert proc.stderr.count("exitcode  : 3") == 2, proc.stderr[-3000:]
    for rank in (0, 1):
        end = run_end(trace_events(tmp_path / f"run.rank{rank}.jsonl"))
        assert (end["status"], end["exit_code"], end["steps"]) == ("stopped", 3, 12)
        assert (end["stop"]["state"], end["stop"]["at"]) == ("nonfinite", 12)
        data = torch.load(end["stop"]["capture"] if end["stop"]["capture"].startswith("/")
                          else tmp_path / end["stop"]["capture"], weights_only=False)
        assert all(bool(torch.isfinite(v).all()) for v in data["model_state"].values()), \
            f"rank {rank}: the NaN update was never applied"
    # rank 1 read the NaN itself; rank 0 saw it come through the gradient all-reduce
    r1 = run_end(trace_events(tmp_path / "run.rank1.jsonl"))["stop"]
    r0 = run_end(trace_events(tmp_path / "run.rank0.jsonl"))["stop"]
    assert (r1["layer"], r0["signal"]) == ("(input)", "gradient")
