"""The verdict (CONTRACT schema 3): only failures that last fail a run; blips are warnings.
Every reader counts the same episodes: run_end.failures, dbg.failures(), --fail-on and
explain's verdict."""
import json
import re

import pytest
import torch
from test_ci_outputs import parse_junit
from torch import nn

from conftest import run_end, run_neuraldbg, trace_events, train, transitions
from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.cli.main import main
from neuraldbg_cli.explain.analysis import analyze, to_json
from neuraldbg_cli.trace import read_trace
from neuraldbg_cli.verdict import Ledger, Rule
from tracemaker import TraceMaker


def _ledger(*transitions):
    ledger = Ledger(Rule())
    signal = "loss" if any(to == "stalled" for _, to, _ in transitions) else "activation"
    for step, to, stats in transitions:
        ledger.add({"step": step, "layer": "net.1", "signal": signal, "to": to, "stats": stats})
    return ledger


@pytest.mark.parametrize("story, steps, counted", [
    # a layer dead for 5 steps, then alive: a blip
    ([(0, "normal", {}), (40, "dead", {}), (45, "normal", {})], 100, 0),
    # dead for 10 steps before it came back: lasting
    ([(0, "normal", {}), (40, "dead", {}), (50, "normal", {})], 100, 1),
    # dead two steps before the run ended: it never recovered
    ([(0, "normal", {}), (98, "dead", {})], 100, 1),
    # one NaN step: at once
    ([(0, "normal", {}), (40, "nonfinite", {}), (41, "normal", {})], 100, 1),
    # dying and reviving again and again: from the 5th time
    ([(0, "normal", {})] + [(10 * k + d, s, {}) for k in range(1, 6)
                            for d, s in ((0, "dead"), (3, "normal"))], 100, 1),
    # ... but five short deaths a thousand steps apart are five blips (a converged, noisy
    # loss spiking now and then: MAML's tasks, sampled anew each step)
    ([(0, "normal", {})] + [(1000 * k + d, s, {}) for k in range(1, 6)
                            for d, s in ((0, "dead"), (3, "normal"))], 6000, 0),
    # ... and five within the window (500 steps) count from the 5th
    ([(0, "normal", {})] + [(120 * k + d, s, {}) for k in range(1, 6)
                            for d, s in ((0, "dead"), (3, "normal"))], 1000, 1),
])
def test_only_failures_that_last_count(story, steps, counted):
    ledger = _ledger(*story)
    assert len(ledger.counted(steps, ended=True)) == counted
    assert ledger.blip_count(steps, ended=True) + counted == \
        sum(1 for _, to, _ in story if to != "normal")


def test_a_stall_counts_only_while_the_run_ends_in_it():
    slow_start = _ledger((0, "normal", {}), (100, "stalled", {}), (250, "normal", {}))
    assert not slow_start.counted(400, ended=True)
    stuck = _ledger((0, "normal", {}), (100, "stalled", {"update_median": 1e-5}))
    assert not stuck.counted(300, ended=False)           # (the run may still learn)
    assert len(stuck.counted(400, ended=True)) == 1
    no_signal = _ledger((0, "normal", {}), (100, "stalled", {"no_signal": True}))
    assert not no_signal.counted(400, ended=True)


def test_the_rule_is_read_from_the_trace_thresholds():
    rule = Rule.of({"hold_steps": 3, "recurring": 2, "recurring_within": 50, "at_end": []}, every=2)
    assert (rule.hold_steps, rule.recurring, rule.recurring_within, rule.at_end, rule.every) == \
        (3, 2, 50, frozenset(), 2)
    assert rule.counts("dead", held=6, open_=False, ended=True)
    assert not rule.counts("dead", held=5, open_=False, ended=True)
    assert Rule.of(None) == Rule()      # a trace from before the verdict: the defaults


def _dead_for(steps_dead: int, tmp_path):
    """A ReLU killed by a bias of -100 at step 20 and revived `steps_dead` steps later."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    bias = model[0].bias.detach().clone()

    def before(step):
        with torch.no_grad():
            if step == 20:
                model[0].bias.fill_(-100.0)
            if step == 20 + steps_dead:
                model[0].bias.copy_(bias)
    trace = tmp_path / f"dead{steps_dead}.jsonl"
    with NeuralDbg(trace=str(trace)) as dbg:
        train(model, x, y, 60, opt=opt, before_step=before)
    return dbg, trace


def test_a_layer_dead_for_five_steps_is_a_blip_everywhere(tmp_path, capsys):
    dbg, trace = _dead_for(5, tmp_path)
    events = trace_events(trace)
    dead = [e for e in events if e.get("to") == "dead"]
    assert [(e["layer"], e["step"]) for e in dead] == [("1", 20)]     # recorded as it happened
    assert dbg.failures() == [] and not dbg.failed
    end = run_end(events)
    assert end["failures"] == 0 and end["blips"] >= 1
    verdict = to_json(analyze([read_trace(str(trace))]))["verdict"]
    assert verdict["failed"] is False and verdict["blips"] >= 1
    assert main(["explain", "--fail-on", "dead", str(trace)]) == 0
    assert "Verdict: passed" in capsys.readouterr().out


def test_a_layer_dead_for_twenty_steps_fails_everywhere(tmp_path, capsys):
    dbg, trace = _dead_for(20, tmp_path)
    assert [(t["layer"], t["step"]) for t in dbg.failures(["dead"])] == [("1", 20)]
    assert run_end(trace_events(trace))["failures"] >= 1
    verdict = to_json(analyze([read_trace(str(trace))]))["verdict"]
    assert verdict["failed"] is True
    assert {"layer": "1", "signal": "activation", "state": "dead", "step": 20} .items() <= \
        next(e for e in verdict["episodes"] if e["state"] == "dead").items()
    assert main(["explain", "--fail-on", "dead", str(trace)]) == 3
    assert "Verdict: failed" in capsys.readouterr().out


def test_a_story_that_did_not_last_is_never_an_answer(tmp_path):
    t = TraceMaker(lr=0.01).tr(50, "net.1", "dead", dead_ratio=0.95).tr(53, "net.1", "normal")
    a = analyze([read_trace(t.end(200).write(tmp_path / "t.jsonl"))])
    assert a.hypotheses and all(h.confidence < 0.5 for h in a.hypotheses)
    doc = to_json(a)
    assert doc["verdict"] == {"failed": False, "episodes": [], "blips": 1}
    assert json.dumps(doc)


BLIP_SCRIPT = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 4), torch.randn(32, 1)
bias = model[0].bias.detach().clone()
for step in range(60):
    with torch.no_grad():
        if step == 20:
            model[0].bias.fill_(-100.0)      # dead for 5 steps, then revived
        if step == 25:
            model[0].bias.copy_(bias)
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.e2e
def test_the_summary_line_the_gate_and_junit_count_a_blip_alike(tmp_path):
    script = tmp_path / "blip.py"
    script.write_text(BLIP_SCRIPT)
    junit = tmp_path / "j.xml"
    proc, events = run_neuraldbg(tmp_path, script,
                                 options=["--fail-on", "dead", "--junit", str(junit)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"no failure detected \(\d+ blips?: failures that did not last\)", proc.stderr)
    assert [(e["layer"], e["step"]) for e in events if e.get("to") == "dead"] == [("1", 20)]
    assert run_end(events)["failures"] == 0
    assert parse_junit(junit).find(".//failure") is None


HOGWILD = '''
import torch
import torch.multiprocessing as mp
from torch import nn


def train(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    model = nn.Linear(4, 1)
    model.share_memory()
    workers = [mp.Process(target=train, args=(model,)) for _ in range(2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join()
    print("trained in", len(workers), "processes")
'''


@pytest.mark.e2e
def test_a_run_that_trains_only_in_child_processes_says_nothing_was_observed(tmp_path, capsys):
    """pytorch/examples' mnist_hogwild trains in mp.Process children, which are not observed:
    forked, they wrote their own steps into the parent's trace; now they write nothing, and
    the summary line and explain say no step was, never "every layer stayed normal"."""
    script = tmp_path / "hogwild.py"
    script.write_text(HOGWILD)
    proc, events = run_neuraldbg(tmp_path, script)
    assert proc.returncode == 0 and "trained in 2 processes" in proc.stdout, proc.stderr[-2000:]
    assert "neuraldbg: no training step observed in this process" in proc.stderr
    assert run_end(events)["steps"] == 0
    assert main(["explain", str(tmp_path / "trace.jsonl")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Verdict: none, no training step was observed" in out
    assert "No training step was observed in this process" in out and "stayed normal" not in out


CRASH_IN_FIRST_STEP = '''
import torch
from torch import nn

net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
OPTIMIZER
out = net(torch.randn(32, 8))
target = torch.randint(0, 4, (32, 2)).t()
loss = nn.functional.cross_entropy(out.repeat(2, 1), target.view(-1))   # a transposed view: raises
'''


@pytest.mark.e2e
@pytest.mark.parametrize("optimizer", ["opt = torch.optim.Adam(net.parameters(), lr=1e-3)",
                                       "# (updated by hand: no optimizer)"])
def test_a_run_that_crashed_in_its_first_step_has_no_verdict(tmp_path, capsys, optimizer):
    """A script that fails after its first forward, before any backward() or optimizer step:
    no step was observed, so the verdict is none, never "passed" with "every gradient
    healthy" (no gradient was computed); the crash stays in view. Without an optimizer too,
    where each forward would otherwise be a step."""
    script = tmp_path / "crash.py"
    script.write_text(CRASH_IN_FIRST_STEP.replace("OPTIMIZER", optimizer))
    proc, events = run_neuraldbg(tmp_path, script)
    assert proc.returncode == 1 and "RuntimeError: view size" in proc.stderr, proc.stderr[-2000:]
    assert ("neuraldbg: no training step observed in this process (the run ended before its "
            "first step was completed)") in proc.stderr
    assert run_end(events)["steps"] == 0 and transitions(events, layer="1")   # (its forward was seen)
    out = _explained(tmp_path, capsys)
    assert "| 0 steps | failed (exit 1): RuntimeError: view size" in out
    assert "Verdict: none, no training step was observed" in out
    assert "No training step was completed: the run ended during its first step" in out
    assert "Verdict: passed" not in out and "gradient healthy" not in out, out


TORCH_FUNC_ENSEMBLE = '''
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

torch.manual_seed(0)
x = torch.randn(64, 2)
y = (x[:, 0] * x[:, 1] > 0).long()


def mlp():
    return nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))


model = mlp()


def loss_of(w):
    return nn.functional.cross_entropy(functional_call(model, w, (x,)), y)


def step(w):        # one SGD step written by hand: no torch.optim
    g, loss = grad_and_value(loss_of)(w)
    return loss, {k: w[k] - 0.2 * g[k] for k in w}


ws, _ = stack_module_state([mlp() for _ in range(2)])
for _ in range(20):
    loss, ws = vmap(step)(ws)
print("trained", loss.tolist())
'''


@pytest.mark.e2e
def test_training_under_torch_func_says_the_transforms_are_why_no_step_was_observed(
        tmp_path, capsys):
    """functorch's parallel_train: a model ensemble trained under vmap and grad, its SGD step
    written by hand. Calls inside a transform are not read, so no step is observed; the
    summary line and explain name the transforms, not child processes."""
    script = tmp_path / "ensemble.py"
    script.write_text(TORCH_FUNC_ENSEMBLE)
    proc, events = run_neuraldbg(tmp_path, script)
    assert proc.returncode == 0 and "trained" in proc.stdout, proc.stderr[-2000:]
    assert ("neuraldbg: no training step observed in this process (training under torch.func "
            "transforms is not observed)") in proc.stderr
    assert run_end(events)["steps"] == 0 and run_end(events)["torch_func"] is True
    out = _explained(tmp_path, capsys)
    assert "Verdict: none, no training step was observed" in out
    assert "the model was called under torch.func transforms (vmap, grad)" in out
    assert "child processes" not in out, out


def _explained(tmp_path, capsys) -> str:
    """What `neuraldbg explain` prints for the run's trace, its whitespace folded."""
    assert main(["explain", str(tmp_path / "trace.jsonl")]) == 0
    return " ".join(capsys.readouterr().out.split())


def _outlier_batches(trace, every: int, steps: int) -> NeuralDbg:
    """A regression that converges, with one batch of shifted targets every `every` steps:
    each gives a one-step spike of the loss, after which the loss drops back."""
    torch.manual_seed(0)
    w = torch.randn(8, 1)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    with NeuralDbg(trace=str(trace)) as dbg:
        for i in range(steps):
            x = torch.randn(64, 8)
            y = x @ w + 0.05 * torch.randn(64, 1) + (6.0 if i % every == every - 1 else 0.0)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return dbg


def test_an_outlier_batch_every_few_hundred_steps_is_a_blip_each_time(tmp_path):
    """The hysteresis forgets recoveries older than the verdict's window: every spike is told
    and recovered from. Remembering every recovery of the run held the loss in `spiking` from
    the fifth spike (step 749) to the end: a failure, blamed on the learning rate."""
    trace = tmp_path / "t.jsonl"
    dbg = _outlier_batches(trace, every=150, steps=1600)
    events = trace_events(trace)
    spikes = [t["step"] for t in transitions(events, layer="(loss)", to="spiking")]
    assert spikes == [s for s in range(149, 1600, 150)]
    assert dbg.failures() == [] and run_end(events)["failures"] == 0
    assert run_end(events)["blips"] == len(spikes)


def test_a_loss_that_spikes_every_few_dozen_steps_still_fails(tmp_path):
    """Spikes more often than the hysteresis forgets: the loss is held in `spiking`, a
    failure, and the trace is not flooded (15 spikes; told at every swing: 31 changes)."""
    trace = tmp_path / "t.jsonl"
    dbg = _outlier_batches(trace, every=40, steps=600)
    assert [(t["layer"], t["to"]) for t in dbg.failures()][:1] == [("(loss)", "spiking")]
    assert len(transitions(trace_events(trace), layer="(loss)")) <= 600 // 40
