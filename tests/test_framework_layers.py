"""What frameworks' models look like to the monitor: Hugging Face's activation classes and
GPT-2's Conv1D (known by class name; the core never imports transformers), and a model
called with keyword arguments only, as the Trainer calls it (`model(**batch)`)."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from blocks import BasicBlock
from conftest import trace_events
from neuraldbg_cli import NeuralDbg


class GELUActivation(nn.Module):
    """As transformers.activations.GELUActivation."""
    def forward(self, x):
        return F.gelu(x)


class Conv1D(nn.Module):
    """As transformers.pytorch_utils.Conv1D: a Linear whose weight is (in, out)."""
    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], -1)


def mlp(bias: float):
    model = nn.Sequential(nn.Linear(16, 64), GELUActivation(), nn.Linear(64, 4))
    nn.init.constant_(model[0].bias, bias)
    return model


def run(tmp_path, model, steps=6, x=None, call=lambda m, x: m(x)):
    torch.manual_seed(0)
    x = torch.randn(32, 16) if x is None else x
    y = torch.randint(0, 4, (32,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(steps):
            loss = F.cross_entropy(call(model, x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return dbg


def test_a_hugging_face_gelu_stuck_in_its_flat_tail_is_saturated(tmp_path, hooks_clean):
    torch.manual_seed(0)
    dbg = run(tmp_path, mlp(bias=-30.0))
    found = [(t["layer"], t["kind"], t["to"]) for t in dbg.failures()]
    assert ("1", "smooth", "saturated") in found, found


def test_a_healthy_hugging_face_gelu_is_not_flagged(tmp_path, hooks_clean):
    torch.manual_seed(0)
    dbg = run(tmp_path, mlp(bias=0.0))
    assert not dbg.failures(), dbg.failures()
    kinds = {t["layer"]: t["kind"] for t in dbg.transitions}
    assert kinds["1"] == "smooth"


def test_gpt2_conv1d_is_a_weight_layer_with_its_fan_in_first(tmp_path, hooks_clean):
    torch.manual_seed(0)
    model = nn.Sequential(Conv1D(64, 16), GELUActivation(), Conv1D(4, 64))
    dbg = run(tmp_path, model)
    assert not dbg.failures(), dbg.failures()
    import json
    events = [json.loads(line) for line in open(tmp_path / "t.jsonl")]
    layers = next(e for e in events if e["event"] == "model")["layers"]
    first = next(l for l in layers if l["name"] == "0")
    assert first["kind"] == "param" and first["init_rule"] == "he"
    assert math.isclose(first["init_rms"], math.sqrt(2 / 16))      # fan-in 16, not 64


class KeywordModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, *, pixel_values, attention_mask=None):
        return self.net(pixel_values)


def keyword_call(model, x):
    return model(attention_mask=torch.ones(len(x), dtype=torch.long), pixel_values=x)


def test_a_model_called_with_keywords_only_has_its_input_observed(tmp_path, hooks_clean):
    x = torch.randn(32, 16)
    x[3, 5] = math.nan
    dbg = run(tmp_path, KeywordModel(), steps=3, x=x, call=keyword_call)
    first = dbg.failures()[0]
    assert (first["layer"], first["to"], first["step"]) == ("(input)", "nonfinite", 0), \
        dbg.failures()


def test_a_healthy_keyword_only_model_has_a_normal_input(tmp_path, hooks_clean):
    dbg = run(tmp_path, KeywordModel(), call=keyword_call)
    assert not dbg.failures(), dbg.failures()
    assert [t["to"] for t in dbg.transitions if t["layer"] == "(input)"] == ["normal"]


def test_a_dropout_does_not_echo_the_shift_of_the_layer_before_it(tmp_path, hooks_clean):
    """BERT-style Linear -> Dropout: a jump in the Linear's output is told once, by it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.1), nn.ReLU(), nn.Linear(64, 4))

    def jump(model, x):
        if jump.calls == 12:
            with torch.no_grad():
                model[0].weight.mul_(30.0)
        jump.calls += 1
        return model(x)
    jump.calls = 0
    dbg = run(tmp_path, model, steps=20, call=jump)
    shifted = {t["layer"] for t in dbg.transitions if t["to"] == "anomalous"}
    assert "0" in shifted and "1" not in shifted, dbg.transitions
    assert not [t for t in dbg.transitions if t["layer"] == "1"]


class CheckpointedLM(nn.Module):
    """Token ids in, blocks under torch.utils.checkpoint (as gradient_checkpointing=True in
    transformers): the blocks run again during backward."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.reentrant = reentrant
        self.emb = nn.Embedding(50, 16)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 32), GELUActivation(),
                                                  nn.Linear(32, 16)) for _ in range(2))
        self.head = nn.Linear(16, 4)

    def forward(self, ids):
        from torch.utils.checkpoint import checkpoint

        h = self.emb(ids)
        for block in self.blocks:
            h = h + checkpoint(block, h, use_reentrant=self.reentrant)
        return self.head(h.mean(1))


@pytest.mark.parametrize("reentrant", [False, True])
def test_gradient_checkpointing_recomputation_is_not_a_model_call(tmp_path, hooks_clean,
                                                                  reentrant):
    """A block recomputed in backward is not an outermost call: the (input) of a model fed
    token ids stays unobserved (it had the blocks' hidden states), no block becomes a model
    of its own, and its layers keep their names."""
    import json

    torch.manual_seed(0)
    ids = torch.randint(0, 50, (32, 8))
    dbg = run(tmp_path, CheckpointedLM(reentrant), steps=8, x=ids)
    assert not dbg.failures(), dbg.failures()
    events = [json.loads(line) for line in open(tmp_path / "t.jsonl")]
    assert not [e for e in events if e.get("layer") == "(input)"]
    assert len([e for e in events if e["event"] == "model"]) == 1
    layers = {e["layer"] for e in events if e["event"] == "summary"}
    assert {"emb", "blocks.0.0", "blocks.1.2", "head"} <= layers


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_dead_layer_inside_a_checkpointed_block_is_found(tmp_path, hooks_clean, reentrant):
    """A reentrant checkpoint runs its region's forward without gradients and again in
    backward with them: its layers are read there. They were never read at all (open_clip's
    blocks showed gradients only), so a ReLU dead in every block went unseen."""
    from torch.utils.checkpoint import checkpoint

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.act, self.out = nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32)
            nn.init.constant_(self.fc.bias, -20.0)

        def forward(self, x):
            return x + self.out(self.act(self.fc(x)))

    torch.manual_seed(0)
    blocks = nn.ModuleList([Block(), Block()])
    model = nn.Sequential(nn.Linear(16, 32), *blocks, nn.Linear(32, 4))
    model.forward = lambda x: model[3](checkpoint(blocks[1], checkpoint(
        blocks[0], model[0](x), use_reentrant=reentrant), use_reentrant=reentrant))
    dbg = run(tmp_path, model, steps=12)
    dead = {(t["layer"], t["step"]) for t in dbg.failures() if t["to"] == "dead"}
    assert dead == {("1.act", 0), ("2.act", 0)}, dbg.transitions
    assert len([e for e in trace_events(tmp_path / "t.jsonl") if e["event"] == "model"]) == 1


def resnet():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         BasicBlock(8), BasicBlock(8), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 4))


def train_images(tmp_path, model, steps=8, micro=1):
    torch.manual_seed(0)
    x, y = torch.randn(16, 3, 8, 8), torch.randint(0, 4, (16,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl"), fail_on="dead") as dbg:
        for _ in range(steps):
            opt.zero_grad()
            for part in range(micro):
                rows = slice(part * 16 // micro, (part + 1) * 16 // micro)
                F.cross_entropy(model(x[rows]), y[rows]).backward()
            opt.step()
    return dbg


def summarised(tmp_path) -> set:
    import json

    return {e["layer"] for e in map(json.loads, open(tmp_path / "t.jsonl"))
            if e["event"] == "summary"}


def test_a_shared_relu_dead_at_its_first_call_is_found(tmp_path, hooks_clean):
    """torchvision's BasicBlock: its relu after bn1 outputs zero everywhere (a bias at -10),
    the same module after the skip is alive. Merged, the two calls read as 0% dead."""
    model = resnet()
    with torch.no_grad():
        model[3].bn1.bias.fill_(-10.0)
    dbg = train_images(tmp_path, model)
    dead = {(t["layer"], t["step"]) for t in dbg.failures(["dead"])}
    assert ("3.relu", 0) in dead, dbg.failures()
    assert not {layer for layer, _ in dead} - {"3.relu"}
    assert dbg.failed                                        # --fail-on dead fails the run
    assert "3.relu#2" in summarised(tmp_path)                # the second call, on its own


def test_a_healthy_resnet_has_two_sites_per_block_relu_and_no_failure(tmp_path, hooks_clean):
    dbg = train_images(tmp_path, resnet(), micro=2)          # two micro-batches a step
    assert not dbg.failures(), dbg.failures()
    layers = summarised(tmp_path)
    assert {"3.relu", "3.relu#2", "4.relu", "4.relu#2", "2"} <= layers
    assert not [l for l in layers if l.endswith("#3")]       # micro-batches merge per site


def test_an_activation_shared_by_a_loop_of_layers_is_a_layer_per_call(tmp_path, hooks_clean):
    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(16, 16) for _ in range(3))
            self.act = nn.ReLU()
            self.head = nn.Linear(16, 4)

        def forward(self, x):
            for layer in self.layers:
                x = self.act(layer(x))
            return self.head(x)

    torch.manual_seed(0)
    model = Deep()
    with torch.no_grad():
        model.layers[1].bias.fill_(-20.0)       # the second layer's units all below zero
    dbg = run(tmp_path, model, steps=6)
    dead = {t["layer"] for t in dbg.failures(["dead"])}
    assert "act#2" in dead and "act" not in dead, dbg.failures()
    assert {"act", "act#2", "act#3"} <= summarised(tmp_path)


def test_submodules_called_on_their_own_are_named_in_their_model(tmp_path, hooks_clean):
    """A LightningModule's training_step calls self.generator and self.discriminator, never
    the module that holds them: the layers are still named in it, as Lightning names them
    (they were '0, 1, 2' and 'Sequential.0, ...')."""
    class GAN(nn.Module):
        def __init__(self):
            super().__init__()
            self.generator = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
            self.discriminator = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 1))

    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        torch.manual_seed(0)
        gan = GAN()                 # built while observed, as under `neuraldbg run`
        opt = torch.optim.Adam(gan.parameters(), lr=1e-3)
        for _ in range(4):
            loss = gan.discriminator(gan.generator(torch.randn(8, 16))).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    models = [e for e in trace_events(tmp_path / "t.jsonl") if e["event"] == "model"]
    assert [m["root"] for m in models] == ["GAN"]
    assert [l["name"] for l in models[0]["layers"]] == [
        "generator.0", "generator.1", "generator.2",
        "discriminator.0", "discriminator.1", "discriminator.2"]
    assert {"generator.0", "discriminator.2"} <= summarised(tmp_path)


def test_a_replaced_head_is_not_named_in_the_model_it_left(tmp_path, hooks_clean):
    """A module taken out of a model (its place given to a new head) and called on its own
    is a model of its own again, named by the script's variable that holds it."""
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
        old = model[0]
        model[0] = nn.Linear(16, 16)
        opt = torch.optim.SGD([*model.parameters(), *old.parameters()], lr=0.01)
        for _ in range(3):
            loss = model(torch.randn(8, 16)).sum() + old(torch.randn(8, 16)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    models = [e for e in trace_events(tmp_path / "t.jsonl") if e["event"] == "model"]
    assert [[l["name"] for l in m["layers"]] for m in models] == [["0", "1"], ["old"]]


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.attn(x, x, x, need_weights=False)[0].mean(1))


def test_multihead_attention_output_is_observed(tmp_path, hooks_clean):
    """nn.MultiheadAttention never calls its out_proj: its own output (out_proj's) is read,
    so an attention whose output turns non-finite is named, not the layer after it."""
    torch.manual_seed(0)
    model = Attention()
    with torch.no_grad():
        model.attn.out_proj.weight[0, 0] = math.inf
    dbg = run(tmp_path, model, steps=3, x=torch.randn(32, 5, 16))
    first = min(dbg.failures(), key=lambda t: (t["step"], t["signal"] != "activation"))
    assert (first["layer"], first["signal"], first["to"]) == ("attn", "activation", "nonfinite")


def test_a_healthy_attention_is_observed_and_not_flagged(tmp_path, hooks_clean):
    torch.manual_seed(0)
    dbg = run(tmp_path, Attention(), steps=30, x=torch.randn(32, 5, 16))
    assert not dbg.failures(), dbg.failures()
    assert "attn" in summarised(tmp_path)


def test_models_whose_names_collide_take_the_scripts_names_for_them(tmp_path, hooks_clean):
    """A CycleGAN calls two generators and two discriminators, each through a variable: the
    later ones are named by it ('G_BA.model.0'), not 'Gen.model.0' and 'Disc#2.model.0'.
    A model the script holds in no variable of the calling frame keeps its class name."""
    class Gen(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))

        def forward(self, x):
            return self.model(x)

    class Disc(Gen):
        pass

    G_AB, G_BA, D_A, D_B, extra = Gen(), Gen(), Disc(), Disc(), [Disc()]
    opt = torch.optim.Adam([p for m in (G_AB, G_BA, D_A, D_B, extra[0]) for p in m.parameters()])
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")):
        for _ in range(3):
            a, b = torch.randn(8, 4), torch.randn(8, 4)
            loss = (D_B(G_AB(a)).mean() + D_A(G_BA(b)).mean() + extra[0](a).mean())
            opt.zero_grad()
            loss.backward()
            opt.step()
    models = [e for e in trace_events(tmp_path / "t.jsonl") if e["event"] == "model"]
    assert [m["layers"][0]["name"] for m in models] == [
        "model.0", "D_B.model.0", "G_BA.model.0", "D_A.model.0", "Disc.model.0"]


def test_a_float_mask_passed_to_the_model_is_not_its_input(tmp_path, hooks_clean):
    """A seq2seq transformer called as model(src, tgt, src_mask, tgt_mask) with token ids and
    nn.Transformer's causal mask (0 and -inf): the first floating-point argument is the mask,
    which is not a NaN batch (it failed the run as `(input)` nonfinite)."""
    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.t = nn.Transformer(16, 2, 1, 1, 32, dropout=0.0)
            self.out = nn.Linear(16, 50)

        def forward(self, src, tgt, src_mask, tgt_mask):
            return self.out(self.t(self.emb(src), self.emb(tgt), src_mask, tgt_mask))
    torch.manual_seed(0)
    model = Seq2Seq()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    mask = nn.Transformer.generate_square_subsequent_mask(6)
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(4):
            src = torch.randint(0, 50, (6, 4))
            out = model(src, src.flip(0), None, mask)
            loss = F.cross_entropy(out.reshape(-1, 50), src.flip(0).reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not dbg.failures(), dbg.failures()


@pytest.mark.parametrize("parametrize", ["spectral_norm", "weight_norm"])
def test_a_parametrized_layer_owns_its_weight(tmp_path, hooks_clean, parametrize):
    """An SN-GAN discriminator's hinge loss, every margin active: the biases' gradients are
    exactly -1 + 1 = 0. The weight of a layer under torch.nn.utils.parametrizations lives in
    `parametrizations.weight.original`; judged on its bias alone, the head's gradient read
    `vanishing` for 40 steps and failed the run. The layer is one leaf Linear, whose gradient
    is its weight's, and the modules computing the weight are not layers."""
    wrap = getattr(nn.utils.parametrizations, parametrize)
    torch.manual_seed(0)
    d = nn.Sequential(wrap(nn.Linear(16, 64)), nn.LeakyReLU(0.1), wrap(nn.Linear(64, 1)))
    opt = torch.optim.Adam(d.parameters(), lr=1e-4, betas=(0.0, 0.9))
    with NeuralDbg(trace=str(tmp_path / "t.jsonl")) as dbg:
        for _ in range(40):
            real, fake = torch.randn(64, 16) + 1.0, torch.randn(64, 16) - 1.0
            loss = F.relu(1.0 - d(real)).mean() + F.relu(1.0 + d(fake)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not dbg.failures()
    events = trace_events(tmp_path / "t.jsonl")
    (model,) = [e for e in events if e["event"] == "model"]
    assert [(la["name"], la["kind"], la["params"]) for la in model["layers"]] == \
        [("0", "param", sum(p.numel() for p in d[0].parameters())), ("1", "other", 0),
         ("2", "param", sum(p.numel() for p in d[2].parameters()))]
    grad = next(e for e in events if e.get("layer") == "2" and e.get("signal") == "gradient")
    assert grad["to"] == "healthy" and grad["stats"]["grad_norm"] > 1.0
