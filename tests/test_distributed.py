"""torchrun with 2 CPU ranks (gloo): one trace per rank, and the rank where a fault began."""
import json
import shutil
import subprocess
import sys

import pytest

from conftest import ENV, SAMPLES, failures, trace_events
from neuraldbg_cli.cli import main

pytestmark = [pytest.mark.e2e, pytest.mark.distributed]


def torchrun(tmp_path, *script_args, fail_on="nonfinite"):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--standalone", "-m", "neuraldbg_cli", "run", "--fail-on", fail_on,
           "--trace", str(tmp_path / "run.jsonl"), str(SAMPLES / "ddp_bad_shard.py"),
           *script_args]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180,
                          env=ENV)


@pytest.mark.skipif(shutil.which("true") is None, reason="needs a POSIX system")
def test_bad_shard_on_rank1_is_traced_per_rank_and_explained(tmp_path, capsys):
    proc = torchrun(tmp_path, "--bad-step", "12", "--bad-rank", "1")
    assert proc.returncode != 0, "each rank exits 3 on its own findings, so torchrun fails"
    paths = [tmp_path / f"run.rank{rank}.jsonl" for rank in (0, 1)]
    r0, r1 = (trace_events(p) for p in paths)
    for rank, evs in ((0, r0), (1, r1)):
        start = evs[0]
        assert (start["event"], start["rank"], start["world_size"]) == ("run_start", rank, 2)
        assert evs[-1]["event"] == "run_end" and evs[-1]["exit_code"] == 3
        names = {layer["name"] for e in evs if e["event"] == "model" for layer in e["layers"]}
        assert names == {"0", "1", "2", "3", "4"}, "DDP's 'module.' prefix is removed"
    bad_input = [e for e in failures(r1) if e["layer"] == "(input)"]
    assert [(e["step"], e["to"]) for e in bad_input] == [(12, "nonfinite")]
    assert not [e for e in failures(r0) if e["layer"] == "(input)"], "rank 0's data was fine"
    assert min(e["step"] for e in failures(r0)) == 12, "rank 0 fails through the all-reduce"

    capsys.readouterr()
    rc = main(["explain", "--json", *map(str, paths)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    top = json.loads(out)["hypotheses"][0]
    assert (top["process_rank"], top["symptom"], top["cause"], top["step"]) == \
        (1, "nonfinite", "input_data", 12)


def test_healthy_two_rank_run_raises_no_alarm(tmp_path):
    proc = torchrun(tmp_path, "--bad-step", "-1", "--steps", "20", fail_on="dead,nonfinite")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "final loss" in proc.stdout
    for rank in (0, 1):
        evs = trace_events(tmp_path / f"run.rank{rank}.jsonl")
        assert failures(evs) == []
        assert evs[-1]["status"] == "completed" and evs[-1]["steps"] == 20
