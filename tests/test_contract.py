"""Trace-schema lines of the contract, checked in-process: layer names, first observations,
the (input) pseudo-layer, learning-rate events, functional activations, steps (and `run
--every` once through the command)."""
import gc
import weakref

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conftest import run_neuraldbg, trace_events, train
from neuraldbg_cli import NeuralDbg

pytestmark = pytest.mark.usefixtures("hooks_clean")


def test_layer_names_are_qualified_names_in_the_outermost_module(tmp_path):
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
            self.head = nn.Linear(8, 1)

        def forward(self, x):
            return self.head(self.encoder(x))

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        net.encoder(torch.randn(2, 4)).sum().backward()     # a submodule called on its own first
        train(net, torch.randn(8, 4), torch.randn(8, 1), 3, opt=opt)
    evs = trace_events(tmp_path / "t.jsonl")
    layers = {e["layer"] for e in evs if e["event"] == "transition"}
    assert {"encoder.0", "encoder.1", "head", "(input)"} <= layers
    assert not {"0", "1"} & layers


def test_a_bare_module_is_the_root(tmp_path):
    lin = nn.Linear(3, 2)
    opt = torch.optim.SGD(lin.parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        train(lin, torch.randn(4, 3), torch.randn(4, 2), 2, opt=opt)
    evs = [e for e in trace_events(tmp_path / "t.jsonl") if e["event"] == "transition"]
    assert {(e["layer"], e["signal"], e["from"], e["to"]) for e in evs} == {
        ("(root)", "activation", None, "normal"), ("(root)", "gradient", None, "healthy"),
        ("(root)", "update", None, "normal"), ("(input)", "activation", None, "normal"),
        ("(loss)", "loss", None, "normal"), ("(loop)", "loop", None, "normal"),
        # the hand-written loss of `train`, read off the autograd graph
        ("(output)", "output", None, "normal")}
    assert all(e["step"] == 0 for e in evs)


def test_two_models_get_distinct_names(tmp_path):
    torch.manual_seed(0)
    gen = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 2))

    class Critic(nn.Sequential):
        pass

    critic = Critic(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = torch.optim.SGD([*gen.parameters(), *critic.parameters()], lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        for _ in range(3):
            loss = critic(gen(torch.randn(8, 2))).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    evs = trace_events(tmp_path / "t.jsonl")
    layers = {e["layer"] for e in evs if e["event"] == "transition"}
    assert {"0", "1", "2", "critic.0", "critic.1", "critic.2"} <= layers    # (the script's name)
    assert [e["root"] for e in evs if e["event"] == "model"] == ["Sequential", "Critic"]


def test_learning_rate_changes_are_recorded_at_the_step_that_used_them(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 if s < 5 else 1.02 ** (s - 5))

    def before(step):
        if step == 10:
            for g in opt.param_groups:
                g["lr"] = 0.5

    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        for step in range(14):
            before(step)
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    hp = [e for e in trace_events(tmp_path / "t.jsonl") if e["event"] == "hparams"]
    assert hp[0]["step"] == 0 and hp[0]["lr"] == [0.01] and hp[0]["momentum"] == 0.9
    jump = [e for e in hp if e["step"] == 10]
    assert jump and jump[0]["lr"] == [0.5] and jump[0]["previous_lr"] is not None
    assert len(hp) <= 4, "small schedule moves (2% a step) are not written every step"


def test_functional_relu_dead_is_caught_on_the_next_layer(tmp_path):
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.fc3 = nn.Linear(6, 32), nn.Linear(32, 32), nn.Linear(32, 1)
            with torch.no_grad():
                self.fc2.bias.fill_(-30.0)

        def forward(self, x):
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))

    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with NeuralDbg(net, trace=str(tmp_path / "t.jsonl")) as dbg:
        train(net, torch.randn(16, 6), torch.randn(16, 1), 4, opt=opt)
    dead = [(e["layer"], e["step"], e["stats"].get("observed")) for e in dbg.failures(("dead",))]
    assert dead == [("fc3", 0, "input")]
    assert dbg.steps == 4


def test_outputs_of_layers_after_eval_passes_do_not_count(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NeuralDbg(model, trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(3):
            train(model, torch.randn(8, 4), torch.randn(8, 1), 1, opt=opt)
            model.eval()
            with torch.no_grad():
                model(torch.full((8, 4), float("nan")))      # would be nonfinite if counted
            model.train()
    assert dbg.steps == 3 and dbg.failures() == []


@pytest.mark.e2e          # inductor runs the C++ compiler in subprocesses: seconds, not ms
def test_model_compiled_in_place_is_named_and_observed(tmp_path):
    """model.compile() runs even the outermost hooks inside compiled code."""
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)
            with torch.no_grad():
                self.fc1.bias.fill_(-50.0)

        def forward(self, x):
            return self.fc2(self.act(self.fc1(x)))

    net = Net()
    net.compile()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        train(net, torch.randn(16, 8), torch.randn(16, 1), 3, opt=opt)
    assert [(e["layer"], e["step"], e["from"]) for e in dbg.failures(("dead",))] == [("act", 0, None)]
    assert ("fc1", "vanishing") in {(e["layer"], e["to"]) for e in dbg.failures()}


def test_every_nth_step_observes_only_those_steps(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def before(step):
        if step == 7:
            with torch.no_grad():
                model[0].bias.fill_(-100.0)         # the ReLU dies from step 7 on

    with NeuralDbg(trace=str(tmp_path / "t.jsonl"), every=3) as dbg:
        train(model, x, y, 20, opt=opt, before_step=before)
    evs = trace_events(tmp_path / "t.jsonl")
    assert evs[0]["every"] == 3 and dbg.steps == 20
    assert all(e["step"] % 3 == 0 for e in evs if e["event"] == "transition")
    assert [(e["layer"], e["step"]) for e in dbg.failures(("dead",))] == [("1", 9)]


def test_every_nth_step_calls_modules_without_hooks_in_between(tmp_path):
    """Between observed steps the module hooks are gone (torch's fast path): `--every N`
    costs what it saves; the steps are still counted by the optimizer's hooks."""
    from torch.nn.modules import module as nn_module

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    before = len(nn_module._global_forward_hooks)
    hooked = []
    with NeuralDbg(trace=str(tmp_path / "t.jsonl"), every=3) as dbg:
        train(model, x, y, 9, before_step=lambda step: hooked.append(
            len(nn_module._global_forward_hooks) > before))
    assert hooked == [True, False, False] * 3 and dbg.steps == 9
    assert len(nn_module._global_forward_hooks) == before


def test_every_must_be_positive():
    with pytest.raises(ValueError):
        NeuralDbg(every=0)


@pytest.mark.e2e
def test_every_option_of_run(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import torch\nm = torch.nn.Linear(2, 1)\n"
                      "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
                      "for _ in range(5):\n"
                      "    m(torch.randn(3, 2)).sum().backward(); opt.step(); opt.zero_grad()\n")
    proc, evs = run_neuraldbg(tmp_path, script, options=["--every", "2"])
    assert proc.returncode == 0, proc.stderr
    assert evs[0]["every"] == 2 and evs[-1]["steps"] == 5


def test_a_layer_first_trained_later_has_its_gradient_observed_from_then(tmp_path):
    torch.manual_seed(0)

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 1), nn.Linear(8, 1)
            self.use_b = False

        def forward(self, x):
            h = self.body(x)
            return self.a(h) + (self.b(h) if self.use_b else 0)

    net = TwoHeads()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def switch(step):
        net.use_b = step >= 3
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        train(net, torch.randn(8, 4), torch.randn(8, 1), 6, opt=opt, before_step=switch)
    first = {e["layer"]: e["step"] for e in trace_events(tmp_path / "t.jsonl")
             if e["event"] == "transition" and e["signal"] == "gradient" and e["from"] is None}
    assert first == {"body": 0, "a": 0, "b": 3}


def test_a_model_and_optimizer_dropped_between_phases_are_released(tmp_path):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        first = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        train(first, x, y, 3, opt=torch.optim.SGD(first.parameters(), lr=0.01))
        gone = weakref.ref(first[0].weight)
        del first
        second = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        train(second, x, y, 3, opt=torch.optim.SGD(second.parameters(), lr=0.01))
        gc.collect()
        assert gone() is None, "the monitor keeps the first phase's parameters alive"
    evs = trace_events(tmp_path / "t.jsonl")
    models = [e for e in evs if e["event"] == "model"]
    assert [m["step"] for m in models] == [0, 3]
    second_names = {layer["name"] for layer in models[1]["layers"]}
    later = {e["layer"] for e in evs if e["event"] == "transition" and e["step"] >= 3}
    assert later and later <= second_names | {"(input)"}, later
    assert len([e for e in evs if e["event"] == "hparams"]) == 2


def test_a_tensor_learning_rate_is_recorded_when_it_changes(tmp_path):
    reads = []

    class Counted(torch.Tensor):        # counts host reads (each one a device sync on a GPU)
        def __float__(self):
            reads.append(1)
            return super().__float__()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01).as_subclass(Counted))

    def schedule(step):
        if step == 3:
            opt.param_groups[0]["lr"].fill_(0.1)     # in place, as tensor schedules do
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        train(model, torch.randn(8, 4), torch.randn(8, 1), 6, opt=opt, before_step=schedule)
    hp = [(e["step"], round(e["lr"][0], 6)) for e in trace_events(tmp_path / "t.jsonl")
          if e["event"] == "hparams"]
    assert hp == [(0, 0.01), (3, 0.1)], hp              # (float32 values, rounded)
    assert len(reads) == 2, "read at every step, not only when it changed"
