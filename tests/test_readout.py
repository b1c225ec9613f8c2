"""The step's one read, deferred on an accelerator: step k is judged once its numbers have
arrived, at a later step end or at close, with its transitions still dated to step k. The
deferral is run on the CPU here with a stand-in for CUDA events; on a CUDA device a monitored
step must not synchronise at all."""
import pytest
import torch
from torch import nn

from neuraldbg_cli import NeuralDbg
from neuraldbg_cli.observe import readout as readout_mod
from neuraldbg_cli.observe.readout import Readout


class LateEvent:
    """A CUDA event stand-in that completes one query after it was recorded (the device is
    one step behind), or when waited for."""
    waits = 0
    recorded = 0

    def record(self):
        LateEvent.recorded += 1
        self.done = False
        self.asked = 0

    def query(self):
        self.asked += 1
        return self.done or self.asked > 1

    def synchronize(self):
        LateEvent.waits += 1
        self.done = True


def deferred() -> Readout:
    return Readout(defer=lambda t: True, pin=False, event=LateEvent)


def test_steps_come_back_in_order_once_ready_and_all_at_drain():
    r = deferred()
    assert r.submit([torch.tensor(1.0), torch.tensor(2.0)], "step 0") == []
    assert r.submit([torch.tensor(3.0)], "step 1") == [([1.0, 2.0], "step 0")]
    assert r.submit([torch.tensor(4.0)], "step 2") == [([3.0], "step 1")]
    assert r.drain() == [([4.0], "step 2")] and r.drain() == []


def test_a_device_far_behind_is_waited_for_beyond_a_few_steps():
    class Never(LateEvent):
        def query(self):
            return self.done
    r = Readout(defer=lambda t: True, pin=False, event=Never)
    out = [r.submit([torch.tensor(float(i))], i) for i in range(readout_mod._MAX_PENDING + 2)]
    assert [job for batch in out for _, job in batch] == [0, 1], "pending stays bounded"


def test_a_direct_read_after_deferred_ones_keeps_the_order():
    r = Readout(defer=lambda t: t.dim() == 0 and t.item() < 10, pin=False, event=LateEvent)
    assert r.submit([torch.tensor(1.0)], "a") == []
    assert r.submit([torch.tensor(50.0)], "b") == [([1.0], "a"), ([50.0], "b")]


def run(deferral: bool, steps=12, crash_at=None):
    """A model whose first ReLU dies at step 5 (its bias pushed far below zero)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 1))
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    dbg = NeuralDbg(model, trace=f"{'late' if deferral else 'direct'}.jsonl")
    try:
        with dbg:
            if deferral:
                dbg.session.monitor.judge.readout = deferred()
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            for step in range(steps):
                if step == 5:
                    with torch.no_grad():
                        model[0].bias.fill_(-100.0)
                if step == crash_at:
                    raise RuntimeError("crash")
                loss = ((model(x) - y) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    except RuntimeError:
        pass
    return dbg


@pytest.mark.parametrize("crash_at", [None, 7])
def test_deferred_judging_writes_the_same_transitions_dated_the_same(tmp_path, monkeypatch, crash_at):
    monkeypatch.chdir(tmp_path)
    direct = run(False, crash_at=crash_at)
    LateEvent.recorded = 0
    late = run(True, crash_at=crash_at)
    assert LateEvent.recorded == late.steps, "every step deferred"
    assert late.steps == direct.steps
    assert late.transitions == direct.transitions
    dead = [t for t in direct.transitions if t["to"] == "dead"]
    assert [(t["layer"], t["step"]) for t in dead][:1] == [("1", 5)]


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA device: the deferred read exists to spare it a sync")
def test_a_monitored_cuda_step_does_not_synchronize(tmp_path):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)).to(dev)
    x, y = torch.randn(64, 8, device=dev), torch.randn(64, 1, device=dev)
    with NeuralDbg(model, trace=str(tmp_path / "t.jsonl")) as dbg:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step():
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        step()                                  # the first step may set things up
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(5):
                step()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    assert dbg.steps == 6
    assert {t["signal"] for t in dbg.transitions} == {"activation", "gradient", "update", "loss",
                                                      "loop"}
    assert all(t["step"] == 0 for t in dbg.transitions), "every layer normal from step 0"
