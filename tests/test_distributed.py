"""torchrun with 2 CPU ranks (gloo): one trace per rank, and the rank where a fault began."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "sample_scripts" / "ddp_bad_shard.py"
FAILURES = {"dead", "saturated", "anomalous", "nonfinite", "vanishing", "exploding"}


def torchrun(tmp_path, *script_args, fail_on="nonfinite"):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--standalone", "-m", "neuraldbg_cli", "run", "--fail-on", fail_on,
           "--trace", str(tmp_path / "run.jsonl"), str(SAMPLE), *script_args]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180)


def events(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def failures(evs):
    return [e for e in evs if e["event"] == "transition" and e["to"] in FAILURES]


@pytest.mark.skipif(shutil.which("true") is None, reason="needs a POSIX system")
def test_bad_shard_on_rank1_is_traced_per_rank_and_explained(tmp_path):
    proc = torchrun(tmp_path, "--bad-step", "12", "--bad-rank", "1")
    assert proc.returncode != 0, "each rank exits 3 on its own findings, so torchrun fails"
    r0, r1 = events(tmp_path / "run.rank0.jsonl"), events(tmp_path / "run.rank1.jsonl")
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

    out = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "explain", "--json",
                          str(tmp_path / "run.rank0.jsonl"), str(tmp_path / "run.rank1.jsonl")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    top = json.loads(out.stdout)["hypotheses"][0]
    assert (top["process_rank"], top["symptom"], top["cause"], top["step"]) == (1, "nonfinite", "input_data", 12)


def test_healthy_two_rank_run_raises_no_alarm(tmp_path):
    proc = torchrun(tmp_path, "--bad-step", "-1", "--steps", "20", fail_on="dead,nonfinite")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "final loss" in proc.stdout
    for rank in (0, 1):
        evs = events(tmp_path / f"run.rank{rank}.jsonl")
        assert failures(evs) == []
        assert evs[-1]["status"] == "completed" and evs[-1]["steps"] == 20
