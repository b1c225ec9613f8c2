"""Robustness of the monitor on unusual models and training loops.

Each case trains a small model a few steps inside `with NeuralDbg(...)` (in this process) and
checks: the run completes, no exception, no false failure transition on a healthy model, a
valid trace that ends with run_end, and nothing left installed in torch afterwards.
"""
from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conftest import SCRIPTS, assert_hooks_clean, run_neuraldbg, trace_events, train
from neuraldbg_cli import NeuralDbg

HEALTHY = ("normal", "healthy")


def failures(dbg) -> list:
    return [(t["step"], t["layer"], t["signal"], t["to"]) for t in dbg.transitions
            if t["to"] not in HEALTHY]


def observe(tmp_path, model, training, *, healthy=True, **kwargs):
    """Run `training()` under NeuralDbg(model); return (dbg, events)."""
    assert_hooks_clean()
    trace = tmp_path / "t.jsonl"
    with NeuralDbg(model, trace=str(trace), **kwargs) as dbg:
        training()
    assert_hooks_clean()
    events = trace_events(trace)
    end = events[-1]
    assert end["status"] == "completed" and end["error"] is None, end
    assert end["steps"] == dbg.steps
    if healthy:
        assert failures(dbg) == [], failures(dbg)
    return dbg, events


def layers_seen(dbg) -> set:
    return {t["layer"] for t in dbg.transitions}


@pytest.fixture(autouse=True)
def _seed(hooks_clean):
    torch.manual_seed(0)


# ---- odd outputs ----------------------------------------------------------------------
class TupleOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)

    def forward(self, x):
        h = self.fc(x)
        return h, h.detach().argmax(1)          # (float, int)


class DictOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return {"mask": torch.ones(len(x), dtype=torch.bool), "hidden": torch.relu(self.fc(x))}


@dataclasses.dataclass
class Output:
    """Like Hugging Face's ModelOutput: optional loss first, then logits."""
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None


@dataclasses.dataclass
class HFOutput(collections.OrderedDict):
    """An OrderedDict that is also a dataclass, the way transformers' ModelOutput is: the
    fields that are set are also its dict items."""
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v


class DataclassOut(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        return Output(loss=None, logits=self.fc(x))


class NoneOut(nn.Module):
    """A logging module: returns None."""

    def forward(self, x):
        return None


class Empty(nn.Module):
    """Returns an empty tensor (no row selected) and an empty-batch activation."""

    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x):
        sel = x[x.sum(1) > 1e9]                 # shape (0, F)
        return self.act(sel)


class Argmax(nn.Module):
    def forward(self, x):
        return x.argmax(dim=1)                   # an integer tensor


class OddModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.tup = TupleOut()
        self.dct = DictOut()
        self.dc = DataclassOut()
        self.log = NoneOut()
        self.empty = Empty()
        self.head = Argmax()

    def forward(self, x):
        h, _ = self.tup(x)
        d = self.dct(h)
        self.log(d["hidden"])
        self.empty(d["hidden"])
        out = self.dc(d["hidden"])
        self.head(d["hidden"])
        return out.logits


def test_odd_outputs_tuple_dict_dataclass_none_int_empty(tmp_path):
    model = OddModel()
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    dbg, events = observe(tmp_path, model, lambda: train(model, x, y, steps=4))
    assert dbg.steps == 4
    seen = layers_seen(dbg)
    assert {"tup.fc", "dct.fc", "dc.fc"} <= seen, seen
    assert not [e for e in events if e["event"] == "warning"]


def test_a_module_with_a_scalar_output_of_either_sign(tmp_path):
    """A custom module returning a 0-d tensor (a penalty, a mean): judged by its magnitude;
    a negative value is not a negative norm, and nothing is switched off."""
    class Offset(nn.Module):
        def forward(self, h):
            return h.mean() - 5.0

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)
            self.offset = Offset()

        def forward(self, x):
            out = self.fc(x)
            return out + 0.0 * self.offset(out)

    model = M()
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    dbg, events = observe(tmp_path, model, lambda: train(model, x, y, steps=12))
    assert not [e for e in events if e["event"] == "warning"]
    offset = [t for t in dbg.transitions if t["layer"] == "offset"]
    assert [t["to"] for t in offset] == ["normal"] and offset[0]["stats"]["rms"] > 4.0


def test_hf_style_output_ordered_dict_dataclass(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)

        def forward(self, x):
            return HFOutput(logits=self.fc(x))

    model = M()
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    dbg, _ = observe(tmp_path, model, lambda: train(model, x, y, steps=3,
                                                      loss_of=lambda o: ((o["logits"] - y) ** 2).mean()))
    assert dbg.steps == 3 and "fc" in layers_seen(dbg)


def test_batch_size_one_no_false_nonfinite(tmp_path):
    model = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 16),
                          nn.GELU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 1))
    xs, ys = torch.randn(6, 1, 6), torch.randn(6, 1, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def training():
        for x, y in zip(xs, ys):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    dbg, events = observe(tmp_path, model, training, healthy=False)
    bad = [f for f in failures(dbg) if f[3] == "nonfinite"]
    assert bad == []
    for e in events:
        if e["event"] == "transition":
            # no NaN or inf written as strings (names, such as a loss's, are strings)
            assert not any(isinstance(v, str) and v.lower() in ("nan", "inf", "-inf")
                           for v in e["stats"].values()), e
    assert dbg.steps == 6


def test_bf16_submodule_and_cpu_autocast(tmp_path):
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 16)
            self.act = nn.ReLU()
            self.b = nn.Linear(16, 16).to(torch.bfloat16)
            self.c = nn.Linear(16, 1)

        def forward(self, x):
            h = self.act(self.a(x))
            h = self.b(h.to(torch.bfloat16)).float()
            return self.c(h)

    model = Mixed()
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def training():
        for i in range(6):
            ctx = torch.autocast(device_type="cpu", dtype=torch.bfloat16) if i % 2 else _null()
            with ctx:
                out = model(x)
            loss = ((out.float() - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    dbg, events = observe(tmp_path, model, training)
    assert dbg.steps == 6
    assert {"a", "act", "b", "c"} <= layers_seen(dbg)
    assert not [e for e in events if e["event"] == "warning"]


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_float16_model(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).half()
    x, y = torch.randn(16, 4).half(), torch.randn(16, 1).half()
    dbg, events = observe(tmp_path, model, lambda: train(model, x, y, steps=4))
    assert dbg.steps == 4
    assert not [e for e in events if e["event"] == "warning"]


def test_float64_model(tmp_path, capsys):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)).double()
    x, y = torch.randn(16, 4).double(), torch.randn(16, 1).double()
    dbg, events = observe(tmp_path, model, lambda: train(model, x, y, steps=4))
    assert capsys.readouterr().err == ""
    assert not [e for e in events if e["event"] == "warning"]
    assert dbg.steps == 4
    assert {"0", "1", "2"} <= layers_seen(dbg)


# ---- in-place ReLU, weight tying, frozen, sparse, no-grad parameters -------------------------
def test_inplace_relu_healthy_and_dead(tmp_path):
    healthy = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 1))
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    dbg, _ = observe(tmp_path, healthy, lambda: train(healthy, x, y, steps=4))
    assert "1" in layers_seen(dbg)

    dead = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 1))
    with torch.no_grad():
        dead[0].bias.fill_(-50.0)
    (tmp_path / "dead").mkdir()
    dbg, _ = observe(tmp_path / "dead", dead, lambda: train(dead, x, y, steps=4), healthy=False)
    assert (0, "1", "activation", "dead") in failures(dbg), failures(dbg)


def test_weight_tying_module_called_twice(tmp_path):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20, 8)
            self.block = nn.Linear(8, 8)
            self.act = nn.ReLU()
            self.out = nn.Linear(8, 20, bias=False)
            self.out.weight = self.emb.weight      # tied parameters

        def forward(self, ids):
            h = self.emb(ids)
            h = self.act(self.block(h))
            h = self.act(self.block(h)) + h          # the same modules twice per step
            return self.out(h)

    model = Tied()
    ids = torch.randint(0, 20, (8, 5))

    def loss_of(logits):
        return nn.functional.cross_entropy(logits.reshape(-1, 20), ids.reshape(-1))

    dbg, events = observe(tmp_path, model, lambda: train(model, ids, None, steps=5, lr=0.1,
                                                           loss_of=loss_of))
    assert dbg.steps == 5
    model_ev = [e for e in events if e["event"] == "model"]
    assert len(model_ev) == 1
    names = [layer["name"] for layer in model_ev[0]["layers"]]
    assert names.count("block") == 1 and names.count("act") == 1
    per_layer = collections.Counter((t["layer"], t["signal"]) for t in dbg.transitions)
    assert per_layer[("block", "activation")] == 1


def test_frozen_parameters(tmp_path):
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    for p in model[0].parameters():
        p.requires_grad_(False)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    # All parameters are given to the optimizer, frozen ones included (they have no grad).
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    dbg, _ = observe(tmp_path, model, lambda: train(model, x, y, steps=4, opt=opt))
    grads = {t["layer"] for t in dbg.transitions if t["signal"] == "gradient"}
    assert grads == {"2", "4"}, grads
    assert "0" in layers_seen(dbg)             # its activation is still observed


def test_sparse_embedding_sgd(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 8, sparse=True)
            self.fc = nn.Linear(8, 1)

        def forward(self, ids):
            return self.fc(self.emb(ids).mean(1))

    model = M()
    ids, y = torch.randint(0, 100, (16, 4)), torch.randn(16, 1)
    dbg, events = observe(tmp_path, model, lambda: train(model, ids, y, steps=4, lr=0.1))
    assert dbg.steps == 4
    assert {"emb", "fc"} <= {t["layer"] for t in dbg.transitions if t["signal"] == "gradient"}
    assert not [e for e in events if e["event"] == "warning"]


def test_parameter_without_gradient(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)
            self.unused = nn.Linear(4, 4)        # in the optimizer, never called
            self.scale = nn.Parameter(torch.ones(1))  # never used either

        def forward(self, x):
            return self.fc(x)

    model = M()
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def training():
        for _ in range(4):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()

    dbg, _ = observe(tmp_path, model, training)
    assert dbg.steps == 4
    assert "unused" not in layers_seen(dbg)


# ---- when forwards happen ---------------------------------------------------------------
def test_forwards_outside_training_steps_no_grad(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    dead_x = torch.full((16, 4), -1e3)          # would kill the ReLU if it were observed

    def training():
        with torch.no_grad():
            for _ in range(3):
                model(dead_x)                    # before the first step, no gradients
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(2):
            train(model, x, y, steps=2, opt=opt)
            model.eval()
            with torch.inference_mode():
                model(dead_x)                    # evaluation between steps
            model.train()
            with torch.no_grad():
                model(dead_x)

    dbg, events = observe(tmp_path, model, training)
    assert dbg.steps == 4
    assert events[-1]["steps"] == 4


def test_dry_run_forward_before_optimizer_is_not_a_step(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def training():
        model(x)                                 # e.g. a shape check, gradients enabled
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        train(model, x, y, steps=5, opt=opt)

    dbg, events = observe(tmp_path, model, training)
    assert dbg.steps == 5
    hp = [e for e in events if e["event"] == "hparams"]
    assert hp and hp[0]["step"] == 0, hp


def test_an_rnn_cell_looped_by_hand_without_an_optimizer_steps_once_a_sequence(tmp_path):
    """pytorch/tutorials' char-RNN classifier: its RNN cell is called once a character and
    the weights are stepped by hand (`p.data.add_(p.grad.data, alpha=-lr)`), no optimizer.
    Each character was a step (96,126 steps for 15,000 names); once backward() is seen, a
    step is a backward(): the characters before the first one are a step each."""
    class RNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.i2h, self.i2o = nn.Linear(24, 16), nn.Linear(24, 3)

        def forward(self, x, h):
            both = torch.cat((x, h), 1)
            return F.log_softmax(self.i2o(both), 1), self.i2h(both)

    torch.manual_seed(0)
    rnn = RNN()

    def training():
        for it in range(30):
            h = torch.zeros(1, 16)
            rnn.zero_grad()
            for _ in range(5):
                out, h = rnn(torch.randn(1, 8), h)
            F.nll_loss(out, torch.tensor([it % 3])).backward()
            for p in rnn.parameters():
                p.data.add_(p.grad.data, alpha=-0.005)

    dbg, events = observe(tmp_path, None, training)
    assert dbg.steps == 4 + 30, dbg.steps
    assert events[-1]["steps"] == 4 + 30


def test_lazy_module_api(tmp_path):
    model = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    with NeuralDbg(model, trace=str(tmp_path / "t.jsonl")) as dbg:
        model(x)
        train(model, x, y, steps=3, opt=torch.optim.SGD(model.parameters(), lr=0.01))
    assert_hooks_clean()
    assert "0" in layers_seen(dbg)


class _RelativeStep(torch.optim.Optimizer):
    """A rate of its own and `lr=None` in its groups, as Hugging Face's Adafactor has with
    `relative_step=True` (T5's documented setting)."""

    def __init__(self, params):
        super().__init__(params, {"lr": None})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-0.05)


def test_an_optimizer_without_a_learning_rate_keeps_the_gradients_watched(tmp_path):
    """lr None in its groups (before: "gradient monitoring switched off: TypeError" at the
    first step, and a 12-layer sigmoid MLP's vanishing gradients went unreported)."""
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    dbg, events = observe(tmp_path, None, lambda: train(model, x, y, 5, opt=_RelativeStep(
        model.parameters())))
    assert not [e for e in events if e["event"] == "warning"], events
    assert {"0", "2"} <= {t["layer"] for t in dbg.transitions if t["signal"] == "gradient"}


def test_lazy_convolutions_and_batchnorms_as_d2l_builds_them_stay_observed(tmp_path):
    """d2l.ai builds its nets of LazyConv2d, LazyBatchNorm2d and LazyLinear and materialises
    them with a dummy batch before training: every layer is watched, with no fault (before:
    each BatchNorm's reading switched off at that first call, "weight scales unavailable")."""
    x, y = torch.randn(64, 1, 8, 8), torch.randint(0, 2, (64,))
    net = nn.Sequential(nn.LazyConv2d(8, 3, padding=1), nn.LazyBatchNorm2d(), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.LazyLinear(2))

    def training():
        net(x[:2])
        train(net, x, None, steps=25, opt=torch.optim.SGD(net.parameters(), lr=0.1),
              loss_of=lambda out: F.cross_entropy(out, y))

    dbg, events = observe(tmp_path, None, training)
    assert not [e for e in events if e["event"] == "warning"], \
        [e for e in events if e["event"] == "warning"]
    assert ("1", "norm") in {(t["layer"], t["signal"]) for t in dbg.transitions}


@pytest.mark.e2e
def test_lazy_module_cli(tmp_path):
    r, events = run_neuraldbg(tmp_path, SCRIPTS / "lazy_train.py")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "lazy ok" in r.stdout
    assert events[-1]["status"] == "completed"


def test_gradient_accumulation(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def training():
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        accumulate(model, opt, x, y)

    dbg, _ = observe(tmp_path, model, training)
    assert dbg.steps == 3


def accumulate(model, opt, x, y, steps=3, chunks=4):
    for _ in range(steps):
        opt.zero_grad()
        for chunk in range(chunks):
            loss = ((model(x[chunk::chunks]) - y[chunk::chunks]) ** 2).mean()
            loss.backward()
        opt.step()


def test_gradient_accumulation_optimizer_created_before_block(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)     # the usual notebook order
    dbg, events = observe(tmp_path, model, lambda: accumulate(model, opt, x, y))
    assert dbg.steps == 3
    assert [e["step"] for e in events if e["event"] == "hparams"] == [0]


def test_lbfgs_closure(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    calls = []

    def training():
        opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)

        def closure():
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            calls.append(1)
            return loss

        for _ in range(3):
            opt.step(closure)

    dbg, _ = observe(tmp_path, model, training)
    assert len(calls) > 3                        # several forwards inside one step
    assert dbg.steps == 3


@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_torch_func_transforms_maml(tmp_path, transform):
    """MAML as torch.func writes it: the tasks' losses under vmap, or an inner step taken
    with torch.func.grad. The calls inside a transform are not read (their tensors are
    the transform's: a norm of one read at the step end fails); everything outside is."""
    model = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def task_loss(params, x, y):
        return nn.functional.mse_loss(torch.func.functional_call(model, params, (x,)), y)

    def adapted_loss(params, x, y):     # one inner step, then the loss on the same task
        grads = torch.func.grad(task_loss)(params, x, y)
        fast = {k: p - 0.01 * grads[k] for k, p in params.items()}
        return task_loss(fast, x, y)

    def training():
        for _ in range(12):
            x = torch.randn(5, 10, 1)
            params = dict(model.named_parameters())
            if transform == "vmap":
                loss = torch.func.vmap(task_loss, in_dims=(None, 0, 0))(params, x, torch.sin(x)).mean()
            else:
                loss = sum(adapted_loss(params, xi, torch.sin(xi)) for xi in x) / 5
            opt.zero_grad()
            loss.backward()
            opt.step()

    dbg, events = observe(tmp_path, model, training)
    assert dbg.steps == 12
    assert not [e for e in events if e["event"] == "warning"]
    observed = {(t["layer"], t["signal"]) for t in dbg.transitions}
    assert {("(loss)", "loss"), ("0", "gradient"), ("2", "gradient")} <= observed, observed


def test_gan_two_optimizers(tmp_path):
    G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
    D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    bce = nn.BCEWithLogitsLoss()
    real = torch.randn(16, 8)

    def training():
        opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
        opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
        for _ in range(5):
            z = torch.randn(16, 4)
            fake = G(z)
            d_loss = bce(D(real), torch.ones(16, 1)) + bce(D(fake.detach()), torch.zeros(16, 1))
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = bce(D(fake), torch.ones(16, 1))
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()

    dbg, events = observe(tmp_path, None, training)
    assert dbg.steps == 5
    models = [e for e in events if e["event"] == "model"]
    names = [layer["name"] for m in models for layer in m["layers"]]
    assert len(names) == len(set(names)), names      # G's and D's layers are told apart
    grads = {t["layer"] for t in dbg.transitions if t["signal"] == "gradient"}
    assert len(grads) == 4, grads                    # 2 Linear in G, 2 in D
    hp = [e for e in events if e["event"] == "hparams"]
    assert len(hp) == 2


@pytest.mark.parametrize("schedule,steps", [
    ("delayed actor", 100),                 # (+2: the first handover, and the one back)
    ("phases", 40),
    ("delayed actor, then the actor alone", 100 + 30),
])
def test_two_optimizers_pace_the_steps_as_the_loop_does(tmp_path, schedule, steps):
    """CleanRL's SAC steps its critic every iteration and its actor twice every other one:
    the critic paces the steps (before: the pace passed back and forth, 4996 steps for 2499
    iterations). Training in phases hands the pace over to the optimizer that goes on."""
    critic, actor = nn.Linear(4, 1), nn.Linear(4, 1)
    x = torch.randn(16, 4)

    def step(opt, model):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    def training():
        q_opt = torch.optim.SGD(critic.parameters(), lr=1e-3)
        a_opt = torch.optim.SGD(actor.parameters(), lr=1e-3)
        if schedule == "phases":
            for opt, model in ((q_opt, critic), (a_opt, actor)):
                for _ in range(20):
                    step(opt, model)
            return
        for i in range(100):
            step(q_opt, critic)
            for _ in range(2 if i % 2 == 0 else 0):
                step(a_opt, actor)
        for _ in range(30 if schedule.endswith("alone") else 0):
            step(a_opt, actor)

    dbg, _ = observe(tmp_path, None, training)
    assert steps <= dbg.steps <= steps + 2, dbg.steps


def test_very_deep_model(tmp_path):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.act = nn.Tanh()

        def forward(self, x):
            return x + 0.1 * self.act(self.fc(x))

    model = nn.Sequential(*[Block() for _ in range(150)], nn.Linear(8, 1))  # 301 leaf layers
    x, y = torch.randn(8, 8), torch.randn(8, 1)
    dbg, events = observe(tmp_path, model, lambda: train(model, x, y, steps=3))
    assert dbg.steps == 3
    model_ev = [e for e in events if e["event"] == "model"][0]
    assert len([la for la in model_ev["layers"] if la["kind"] != "container"]) == 301
    assert {"0.fc", "149.act", "150"} <= layers_seen(dbg)


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_long_run_trace_and_memory_stay_flat(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    trace = tmp_path / "t.jsonl"
    rss = {}
    lines = {}
    with NeuralDbg(model, trace=str(trace)) as dbg:
        for step in range(1, 3001):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step in (500, 3000):
                rss[step] = _rss_kb()
                lines[step] = [line for line in trace.read_text().splitlines()
                               if '"event": "summary"' not in line]
    assert_hooks_clean()
    assert dbg.steps == 3000
    events = trace_events(trace)
    assert lines[3000] == lines[500], lines          # no event per step
    # but curves: a summary per layer at every 10th step for 1000 steps, then every 20th,
    # then every 40th; the loss at every step for 100 steps, then every 2nd, 4th, ... 32nd
    summaries = collections.Counter(e["layer"] for e in events if e["event"] == "summary")
    loss = summaries.pop("(loss)")
    assert set(summaries.values()) == {100 + 50 + 25}, summaries
    assert loss == 100 + 50 * 4 + 1400 // 32 + 1, loss
    assert len(events) - summaries.total() - loss < 40, collections.Counter(e["event"] for e in events)
    assert rss[3000] <= rss[500] * 1.05, rss
    assert failures(dbg) == []


# ---- exceptions inside the block -------------------------------------------------------
def test_exception_in_block_closes_trace_and_unhooks(tmp_path):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    trace = tmp_path / "t.jsonl"
    with pytest.raises(RuntimeError, match="user bug"):
        with NeuralDbg(model, trace=str(trace)):
            train(model, x, y, steps=2)
            model(x)                              # a forward of a step that never ends
            raise RuntimeError("user bug")
    assert_hooks_clean()
    events = trace_events(trace)
    assert events[-1]["status"] == "failed"
    assert events[-1]["error"] == "RuntimeError: user bug"
    assert events[-1]["steps"] == 2


def test_two_blocks_in_a_row_and_nested_optimizer_creation(tmp_path):
    """A second `with` block after the first starts from scratch."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    for i in range(2):
        with NeuralDbg(model, trace=str(tmp_path / f"t{i}.jsonl")) as dbg:
            train(model, x, y, steps=3)
        assert dbg.steps == 3
        assert_hooks_clean()
        assert trace_events(tmp_path / f"t{i}.jsonl")[-1]["steps"] == 3


# ---- torch.compile under `neuraldbg run` -------------------------------------------------
@pytest.mark.e2e
def test_compiled_dead_relu_flagged_at_step_0(tmp_path):
    r, events = run_neuraldbg(tmp_path, SCRIPTS / "compile_dead.py", options=["--fail-on", "dead"],
                              timeout=300)
    assert r.returncode == 3, r.stderr[-3000:]
    assert "compiled ok" in r.stdout
    dead = [e for e in events if e["event"] == "transition" and e["to"] == "dead"]
    assert any(e["layer"] == "act" and e["step"] == 0 and e["from"] is None for e in dead), dead
    assert events[-1]["status"] == "completed" and events[-1]["steps"] == 4
    layers = {e["layer"] for e in events if e["event"] == "transition"}
    assert not any(n.startswith("_orig_mod") for n in layers), layers


# ---- common layers with structured outputs, kwargs-only calls, activation checkpointing -----------
class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.bn = nn.BatchNorm1d(8)
        self.lstm = nn.LSTM(8, 8, batch_first=True)           # (out, (h, c))
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)  # (out, weights or None)
        self.enc = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.1,
                                              batch_first=True)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(8, 1)

    def forward(self, *, inputs):                               # called with keywords only
        h = self.bn(self.conv(inputs)).transpose(1, 2)          # (B, T, 8)
        h, _ = self.lstm(h)
        a, _ = self.attn(h, h, h, need_weights=False)
        h = self.enc(h + a)
        return self.head(self.drop(h.mean(1)))


def test_common_layers_and_kwargs_only_call(tmp_path):
    model = Mixed()
    x, y = torch.randn(8, 4, 6), torch.randn(8, 1)

    def training():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(4):
            loss = ((model(inputs=x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    dbg, events = observe(tmp_path, model, training)
    assert dbg.steps == 4
    assert {"conv", "bn", "lstm", "head"} <= layers_seen(dbg), layers_seen(dbg)
    assert not [e for e in events if e["event"] == "warning"]


def test_activation_checkpointing(tmp_path):
    from torch.utils.checkpoint import checkpoint

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
            self.head = nn.Linear(8, 1)

        def forward(self, x):
            return self.head(checkpoint(self.block, x, use_reentrant=False))

    model = M()
    x, y = torch.randn(16, 8), torch.randn(16, 1)

    def training():
        train(model, x, y, steps=4, opt=torch.optim.SGD(model.parameters(), lr=0.01))

    dbg, events = observe(tmp_path, model, training)
    assert dbg.steps == 4
    assert len([e for e in events if e["event"] == "model"]) == 1
    assert {"block.0", "block.1", "head"} <= layers_seen(dbg)


def test_module_created_in_forward_does_not_grow_trace(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 8)
            self.out = nn.Linear(8, 1)

        def forward(self, x):
            return self.out(nn.ReLU()(self.fc(x)))    # a new module at each call

    model = M()
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def training():
        train(model, x, y, steps=200, opt=torch.optim.SGD(model.parameters(), lr=0.01))

    # model=None observes every module, as `neuraldbg run` does.
    dbg, events = observe(tmp_path, None, training)
    assert dbg.steps == 200
    told = [e for e in events if e["event"] != "summary"]
    assert len(told) < 40, collections.Counter(e.get("layer") for e in told).most_common(5)
    # curves for the layers that last, not one per ReLU made
    assert {e["layer"] for e in events if e["event"] == "summary"} <= {"(input)", "fc", "out",
                                                                        "(loss)"}


def test_exception_in_forward_caught_by_script(tmp_path):
    """An exception inside a submodule, caught by the script (a fallback), does not confuse
    the step and nesting bookkeeping."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def training():
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(6):
            if i % 2:
                try:
                    model(torch.randn(3, 5))              # shape error in layer 0
                except RuntimeError:
                    pass
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    dbg, _ = observe(tmp_path, model, training)
    assert dbg.steps == 6
