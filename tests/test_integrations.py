"""The Lightning and Hugging Face callbacks, with the real packages (tiny models built in the
test, random weights, nothing downloaded). Skipped where a package is not installed
(`pip install -e ".[test,lightning,huggingface]"`; `.ci/run` does)."""
from __future__ import annotations

import json
import logging
import warnings

import pytest
import torch
from torch import nn

from conftest import assert_hooks_clean


def events_of(path) -> list:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def failures_in(events) -> list:
    from neuraldbg_cli.states import failure_names

    bad = set(failure_names())
    return [e for e in events if e["event"] == "transition" and e["to"] in bad]


# ---- Lightning ----------------------------------------------------------------------------
@pytest.fixture
def pl():
    pl = pytest.importorskip("lightning.pytorch", reason="lightning not installed "
                             "(pip install -e '.[lightning]')")
    warnings.filterwarnings("ignore", module="lightning")
    return pl


def lightning_module(pl, lr_after=0.01, raise_at=20):
    class Regressor(pl.LightningModule):
        """The dying_relu story: SGD at 0.01, raised to `lr_after` at step `raise_at`."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                                     nn.Linear(32, 1))

        def training_step(self, batch, batch_idx):
            if self.global_step == raise_at:
                for g in self.optimizers().optimizer.param_groups:
                    g["lr"] = lr_after
            x, y = batch
            return nn.functional.smooth_l1_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    return Regressor()


def loader(n=2048, batch=64):
    torch.manual_seed(0)
    x = torch.rand(n, 16)
    y = x @ torch.randn(16, 1)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch,
                                       shuffle=True)


def fit(pl, module, callback, max_steps=60, **kw):
    trainer = pl.Trainer(max_steps=max_steps, callbacks=[callback], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1, **kw)
    trainer.fit(module, loader())
    return trainer


def test_lightning_healthy_fit_with_accumulation(pl, tmp_path):
    from neuraldbg_cli.integrations.lightning import NeuralDbgCallback

    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"))
    trainer = fit(pl, lightning_module(pl, lr_after=0.01), cb, max_steps=30,
                  accumulate_grad_batches=2)
    assert_hooks_clean()
    events = events_of(tmp_path / "t.jsonl")
    assert failures_in(events) == []
    assert cb.dbg.steps == trainer.global_step == 30        # accumulated micro-batches: one step
    assert events[-1]["event"] == "run_end" and events[-1]["status"] == "completed"
    framework = next(e for e in events if e["event"] == "framework")
    assert framework == {"event": "framework", "name": "lightning", "global_step": 30, "steps": 30}
    # layers named from the LightningModule
    layers = {e["layer"] for e in events if e["event"] == "summary"}
    assert {"net.0", "net.1", "net.4"} <= layers


def test_lightning_healthy_cnn_with_accumulation_and_one_cycle_is_clean(pl, tmp_path):
    """BatchNorm, Dropout, accumulation and a OneCycle schedule stepped per batch: no state
    other than normal/healthy is written, not even `anomalous`."""
    from neuraldbg_cli.integrations.lightning import NeuralDbgCallback

    class CNN(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(32, 10))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
            one_cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=120)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": one_cycle, "interval": "step"}}

    torch.manual_seed(0)
    y = torch.randint(0, 10, (3200,))
    x = torch.randn(10, 1, 16, 16)[y] + torch.randn(3200, 1, 16, 16)    # class templates
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32,
                                       shuffle=True)
    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"))
    trainer = pl.Trainer(max_steps=120, accumulate_grad_batches=2, callbacks=[cb], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(CNN(), data)
    events = events_of(tmp_path / "t.jsonl")
    assert cb.dbg.steps == trainer.global_step == 120
    odd = [(e["step"], e["layer"], e["to"]) for e in events
           if e["event"] == "transition" and e["to"] not in ("normal", "healthy")]
    assert odd == []
    losses = [e["stats"]["loss"] for e in events if e["event"] == "summary" and e["layer"] == "(loss)"]
    assert losses[-1] < 0.7 * losses[0]                     # it learned


def test_lightning_stops_on_a_dead_layer_and_logs_the_hypothesis(pl, tmp_path, caplog):
    from neuraldbg_cli.integrations.lightning import NeuralDbgCallback

    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"), stop_on="dead", fail_on="dead")
    with caplog.at_level(logging.INFO, logger="lightning.pytorch.callbacks.neuraldbg"):
        trainer = fit(pl, lightning_module(pl, lr_after=2.0), cb, max_steps=200)
    assert trainer.global_step < 60                         # stopped soon after it died
    assert cb.failed
    dead = [t for t in cb.dbg.failures(["dead"])]
    assert dead and dead[0]["layer"].startswith("net.")
    said = caplog.text
    assert "neuraldbg: stopping training" in said and "dead" in said
    assert "cause learning_rate" in said


def test_lightning_stop_on_nonfinite_withholds_the_nan_update_and_captures(pl, tmp_path):
    """Lightning computes the gradients inside optimizer.step(closure): the stop's check runs
    in on_before_optimizer_step, so the NaN gradient is never applied there either."""
    from neuraldbg_cli.integrations.lightning import NeuralDbgCallback

    module = lightning_module(pl)
    step = module.training_step

    def poisoned(batch, batch_idx):
        x, y = batch
        if module.global_step == 15:
            x = x.clone()
            x[3, 2] = float("nan")
        return step((x, y), batch_idx)

    module.training_step = poisoned
    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"), stop_on="nonfinite",
                           capture=str(tmp_path / "cap"))
    trainer = fit(pl, module, cb, max_steps=60)
    assert trainer.global_step <= 16
    assert all(bool(torch.isfinite(p).all()) for p in module.parameters())
    assert cb.dbg.stopped is not None and cb.dbg.stopped.state == "nonfinite"
    [path] = (tmp_path / "cap").iterdir()
    assert torch.load(path, weights_only=False)["pinpoint"]["rows"] == [3]
    end = events_of(tmp_path / "t.jsonl")[-1]
    assert end["event"] == "run_end" and end["status"] == "stopped"


def test_lightning_callback_takes_the_detectors_as_neuraldbg_does(pl, tmp_path):
    from neuraldbg_cli.errors import InputError
    from neuraldbg_cli.integrations.lightning import NeuralDbgCallback

    with pytest.raises(InputError, match="unknown signal 'activations'"):
        NeuralDbgCallback(detectors="activations")
    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"), detectors=["activation"])
    fit(pl, lightning_module(pl), cb, max_steps=5)
    assert {t["signal"] for t in cb.dbg.transitions} == {"activation"}


def test_lightning_names_submodules_called_directly(pl, tmp_path):
    """training_step calls self.generator(...) and self.discriminator(...), never the module
    itself: the layers are still named from it."""
    from neuraldbg_cli.integrations.lightning import NeuralDbgCallback

    class GAN(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.generator = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
            self.discriminator = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            x, _ = batch
            return self.discriminator(self.generator(x)).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"))
    fit(pl, GAN(), cb, max_steps=10)
    layers = {e["layer"] for e in events_of(tmp_path / "t.jsonl") if e["event"] == "summary"}
    assert {"generator.0", "generator.1", "discriminator.0", "discriminator.2"} <= layers
    assert not {"0", "1", "2"} & layers


def test_lightning_manual_optimisation_counts_each_optimizers_step(pl, tmp_path):
    """Manual optimisation with two optimizers: Lightning's global_step counts each
    optimizer's step; a step of the trace is a batch, numbered by global_step (16 batches:
    steps 0, 2, ..., 30 and 32 in all, not 16), with both optimizers' gradients in it."""
    from neuraldbg_cli.integrations.lightning import NeuralDbgCallback

    class GAN(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.generator = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
            self.discriminator = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            x, _ = batch
            opt_g, opt_d = self.optimizers()
            d_loss = self.discriminator(x).mean() - self.discriminator(self.generator(x).detach()).mean()
            opt_d.zero_grad()
            self.manual_backward(d_loss)
            opt_d.step()
            g_loss = self.discriminator(self.generator(x)).mean()
            opt_g.zero_grad()
            self.manual_backward(g_loss)
            opt_g.step()

        def configure_optimizers(self):
            return (torch.optim.Adam(self.generator.parameters(), lr=1e-4),
                    torch.optim.Adam(self.discriminator.parameters(), lr=1e-4))

    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"))
    trainer = fit(pl, GAN(), cb, max_steps=32)
    assert trainer.global_step == 32 and cb.dbg.steps == 32
    events = events_of(tmp_path / "t.jsonl")
    assert failures_in(events) == []
    summaries = [e for e in events if e["event"] == "summary"]
    grads = {e["layer"] for e in summaries if "grad_norm" in e["stats"]}
    assert {"generator.0", "discriminator.0"} <= grads
    assert {e["step"] for e in summaries if e["layer"] != "(loss)"} == {0, 10, 20, 30}
    assert {e["step"] for e in summaries if e["layer"] == "(loss)"} == set(range(0, 32, 2))
    assert all(e["step"] % 2 == 0 for e in events if e["event"] == "transition")


def test_lightning_exception_closes_the_trace(pl, tmp_path):
    from neuraldbg_cli.integrations.lightning import NeuralDbgCallback

    class Broken(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 1)

        def training_step(self, batch, batch_idx):
            if self.global_step == 3:
                raise RuntimeError("user bug")
            return self.fc(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"))
    with pytest.raises(RuntimeError, match="user bug"):
        fit(pl, Broken(), cb, max_steps=10)
    assert_hooks_clean()
    end = events_of(tmp_path / "t.jsonl")[-1]
    assert end["event"] == "run_end" and end["status"] == "failed" and "user bug" in end["error"]


# ---- Hugging Face -------------------------------------------------------------------------
@pytest.fixture
def hf():
    return pytest.importorskip("transformers", reason="transformers not installed "
                               "(pip install -e '.[huggingface]')")


class Pairs(torch.utils.data.Dataset):
    """Token ids and a label, a NaN-free classification task (labels from the first token)."""

    def __init__(self, n=256, vocab=100, length=12):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        ids = self.ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "labels": int(ids[0] % 2)}


def trainer_for(hf, model, dataset, callback, tmp_path, **kw):
    args = hf.TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16,
                                report_to=[], save_strategy="no", logging_strategy="no",
                                disable_tqdm=True, use_cpu=True, seed=0, **kw)
    return hf.Trainer(model=model, args=args, train_dataset=dataset, callbacks=[callback])


def tiny_bert(hf):
    torch.manual_seed(0)
    config = hf.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=64, num_labels=2,
                           max_position_embeddings=32)
    return hf.BertForSequenceClassification(config)


def test_huggingface_healthy_bert_with_accumulation(hf, tmp_path):
    from neuraldbg_cli.integrations.huggingface import NeuralDbgCallback

    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"))
    trainer = trainer_for(hf, tiny_bert(hf), Pairs(), cb, tmp_path, max_steps=24,
                          gradient_accumulation_steps=2, learning_rate=5e-4)
    trainer.train()
    assert_hooks_clean()
    events = events_of(tmp_path / "t.jsonl")
    assert failures_in(events) == [], failures_in(events)
    assert cb.dbg.steps == trainer.state.global_step == 24
    framework = next(e for e in events if e["event"] == "framework")
    assert framework["name"] == "transformers" and framework["global_step"] == 24
    layers = {e["layer"] for e in events if e["event"] == "summary"}
    assert "bert.encoder.layer.0.intermediate.dense" in layers
    assert "(input)" in layers      # model(**inputs): the keyword-only input is observed


def test_huggingface_stops_on_nonfinite(hf, tmp_path, caplog):
    from neuraldbg_cli.integrations.huggingface import NeuralDbgCallback

    class Head(nn.Module):
        """A regression head that meets a NaN feature batch at its 6th call."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 16)
            self.act = nn.ReLU()
            self.out = nn.Linear(16, 1)
            self.calls = 0

        def forward(self, x, labels):
            self.calls += 1
            if self.calls == 6:
                x = x * float("nan")
            pred = self.out(self.act(self.fc(x)))
            return {"loss": nn.functional.mse_loss(pred.squeeze(-1), labels)}

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 512

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"x": torch.randn(8, generator=g), "labels": torch.randn((), generator=g)}

    cb = NeuralDbgCallback(trace=str(tmp_path / "t.jsonl"), stop_on="nonfinite",
                           capture=str(tmp_path / "cap"))
    head = Head()
    trainer = trainer_for(hf, head, Rows(), cb, tmp_path, max_steps=30, learning_rate=1e-2)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    assert trainer.state.global_step < 12
    assert cb.dbg.failures(["nonfinite"])
    assert "neuraldbg: stopping training" in caplog.text
    # the same stop as `run`'s: the NaN update withheld, the evidence kept
    assert all(bool(torch.isfinite(p).all()) for p in head.parameters())
    assert cb.dbg.stopped is not None and len(list((tmp_path / "cap").iterdir())) == 1
