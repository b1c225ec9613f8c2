"""`run --stop-on`: training stops where a counted failure is confirmed, before the update
that would carry it; exit 3, `run_end.status` `stopped`; a healthy run is left alone."""
import subprocess
import sys

import pytest
import torch
from torch import nn

from conftest import ENV, SAMPLES, SCRIPTS, run_end, run_neuraldbg, trace_events
from neuraldbg_cli import NeuralDbg, TrainingStopped

pytestmark = pytest.mark.e2e


def test_a_nan_sample_stops_the_run_before_its_update(tmp_path):
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "nan_sample.py", "--workers", "2",
                                 options=["--stop-on", "nonfinite"])
    assert proc.returncode == 3, proc.stderr
    end = run_end(events)
    assert end["status"] == "stopped" and end["exit_code"] == 3
    stop = end["stop"]
    assert (stop["state"], stop["layer"], stop["signal"]) == ("nonfinite", "(input)", "activation")
    # the script's `finally` ran, and no NaN was written into its weights
    assert "weights finite: True" in proc.stdout
    taken = int(proc.stdout.split("nan_sample: ")[1].split()[0])
    assert stop["at"] == stop["step"] == taken == end["steps"], "stopped at the NaN's step"
    assert "training stopped at step" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_script_that_swallows_the_stop_applies_no_update_and_exits_3(tmp_path):
    proc, events = run_neuraldbg(tmp_path, SCRIPTS / "swallow_stop.py",
                                 options=["--stop-on", "nonfinite"])
    assert proc.returncode == 3, proc.stderr
    # every later optimizer step raises again: no update is applied after the stop
    assert "raised 7 times (TrainingStopped), weights finite: True" in proc.stdout
    end = run_end(events)
    assert end["status"] == "stopped" and end["stop"]["at"] == 5


def test_a_dying_relu_run_stops_on_dead(tmp_path):
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "dying_relu.py",
                                 options=["--stop-on", "dead"])
    assert proc.returncode == 3, proc.stderr
    stop = run_end(events)["stop"]
    assert (stop["state"], stop["layer"]) == ("dead", "1")
    first = next(e for e in events if e["event"] == "transition" and e["to"] == "dead")
    assert stop["step"] == first["step"] and stop["at"] > stop["step"], \
        "stopped once the episode counts (held), not at its first sight"
    assert run_end(events)["steps"] == stop["at"] < 80


def test_a_healthy_run_with_stop_on_is_unchanged(tmp_path):
    plain = subprocess.run([sys.executable, str(SAMPLES / "healthy.py")], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path, env=ENV)
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "healthy.py",
                                 options=["--stop-on", "nonfinite,dead", "--capture", "cap"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == plain.stdout, "the same training, to the last printed digit"
    assert run_end(events)["status"] == "completed" and "stop" not in run_end(events)
    assert not (tmp_path / "cap").exists() and not (tmp_path / "neuraldbg-capture").exists()
    assert not [e for e in events if e["event"] == "capture"]


def test_the_python_api_raises_training_stopped_in_optimizer_step(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    trace = tmp_path / "t.jsonl"
    with pytest.raises(TrainingStopped) as stopped:
        with NeuralDbg(model, trace=str(trace), stop_on="nonfinite",
                       capture=str(tmp_path / "cap")) as dbg:
            for step in range(6):
                x = torch.randn(16, 4)
                if step == 3:
                    x[0, 0] = float("inf")
                before = [p.detach().clone() for p in model.parameters()]
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
    assert (stopped.value.state, stopped.value.at) == ("nonfinite", 3)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters())), \
        "the step that raised applied nothing"
    assert dbg.stopped is not None and dbg.stopped.capture
    end = run_end(trace_events(trace))
    assert (end["status"], end["exit_code"]) == ("stopped", 3)


def test_stop_on_holds_references_to_the_step_not_copies(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NeuralDbg(model, trace=str(tmp_path / "t.jsonl"), stop_on="nonfinite") as dbg:
        for _ in range(3):
            x, y = torch.randn(16, 4), torch.randn(16, 1)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        evidence = dbg.session.stopper.evidence
        assert len(evidence.forwards) == 1, "the current step only: no history"
        assert evidence.forwards[0].args[0] is x and evidence.targets is y
    assert not (tmp_path / "neuraldbg-capture").exists()


@pytest.mark.parametrize("option,message", [
    (["--stop-on", "deadd"], "--stop-on: unknown state 'deadd'"),
    (["--capture", "afile"], "cannot write capture folder afile: it is a file"),
])
def test_bad_stop_options_are_one_line_and_exit_2(tmp_path, option, message):
    (tmp_path / "afile").write_text("")
    proc, _ = run_neuraldbg(tmp_path, SAMPLES / "healthy.py", options=option)
    assert proc.returncode == 2 and message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_version_is_printed():
    from neuraldbg_cli import __version__
    proc = subprocess.run([sys.executable, "-m", "neuraldbg_cli", "--version"],
                          capture_output=True, text=True, timeout=60, env=ENV)
    assert proc.returncode == 0 and proc.stdout.strip() == f"neuraldbg {__version__}"


def test_the_callbacks_stop_withholds_the_update_without_raising(tmp_path):
    """The Lightning and Hugging Face callbacks' form of the same stop (stop_mode "skip"):
    the trainer is asked to stop at the batch's end, so nothing is raised, and no update is
    applied from the failing step on."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with NeuralDbg(model, trace=str(tmp_path / "t.jsonl"), stop_on="nonfinite",
                   capture=str(tmp_path / "cap"), stop_mode="skip") as dbg:
        for step in range(6):
            x = torch.randn(16, 4)
            if step == 3:
                x[0, 0] = float("nan")
            if step == 3:
                before = [p.detach().clone() for p in model.parameters()]
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    assert dbg.stopped is not None and dbg.stopped.at == 3
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters())), \
        "neither the NaN step nor any later one changed the weights"
    assert run_end(trace_events(tmp_path / "t.jsonl"))["status"] == "stopped"


def test_a_blip_does_not_stop_the_run(tmp_path):
    """The loss of nan_sample.py's clean run spikes twice and recovers: blips. The second
    spike's recovery is confirmed only 8 healthy steps later (hysteresis), after the spike
    would have held 10 steps: the stop waits for it, and agrees with --fail-on."""
    proc, events = run_neuraldbg(tmp_path, SAMPLES / "nan_sample.py", "--corrupt", "none",
                                 options=["--stop-on", "spiking", "--fail-on", "spiking"])
    spikes = [e for e in events if e["event"] == "transition" and e["to"] == "spiking"]
    assert len(spikes) == 2, "the scenario: two spikes, each recovered"
    assert proc.returncode == 0, proc.stderr
    assert run_end(events)["status"] == "completed" and run_end(events)["blips"] == 2
    assert "64 steps taken" in proc.stdout
