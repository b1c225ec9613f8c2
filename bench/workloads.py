"""The benchmark's training workloads: synthetic, seeded, each a step function and its sizes."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

Step = Callable[[int], None]


@dataclass(frozen=True)
class Workload:
    """A training loop to measure, and how long to run it in each section.

    build(compile_model=False) seeds torch, builds model, optimizer and data, and returns
    step(i), one training step on batch i (cycled). timed_steps: steps per timing round;
    warmup: untimed steps before them (the monitor registers layers in its first step);
    memory_steps: steps of one memory process; each with a --quick size. ratio_target: the
    bound on the median over rounds of monitored/plain loop time. count_steps: the steps the
    instructions section counts after the warm-up (callgrind runs a training step 1000x
    slower: a few steps, but for a model whose step is mostly Python).
    """

    name: str
    build: Callable[..., Step]
    description: str
    timed_steps: int
    quick_timed_steps: int
    warmup: int
    memory_steps: int
    quick_memory_steps: int
    ratio_target: float
    count_steps: int = 2
    quick_count_steps: int = 1

    def steps(self, quick: bool) -> int:
        return self.quick_timed_steps if quick else self.timed_steps

    def child_steps(self, quick: bool) -> int:
        return self.quick_memory_steps if quick else self.memory_steps

    def counted_steps(self, quick: bool) -> int:
        return self.quick_count_steps if quick else self.count_steps


def _batches(n, make):
    """A fixed pool of synthetic batches, cycled: data generation stays out of the loop."""
    return [make() for _ in range(n)]


def _classifier(model, data, opt, compile_model) -> Step:
    run = torch.compile(model) if compile_model else model
    loss_fn = nn.CrossEntropyLoss()

    def step(i):
        x, y = data[i % len(data)]
        loss = loss_fn(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def _sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def build_mlp(compile_model=False) -> Step:
    """4-layer ReLU MLP 784-1024-1024-512-10, batch 256, SGD with momentum."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10))
    data = _batches(4, lambda: (torch.randn(256, 784), torch.randint(0, 10, (256,))))
    return _classifier(model, data, _sgd(model), compile_model)


class VGG(nn.Module):
    """VGG-style: (conv3x3-BN-ReLU) x2 then max-pool, three times (32-64-128 channels), then
    global average pooling and a linear classifier; 3x32x32 inputs."""

    def __init__(self, widths=(32, 64, 128), classes=10):
        super().__init__()
        layers, c = [], 3
        for w in widths:
            for _ in range(2):
                layers += [nn.Conv2d(c, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU()]
                c = w
            layers.append(nn.MaxPool2d(2))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(c, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def build_cnn(compile_model=False) -> Step:
    """VGG-style CNN with BatchNorm, batch 64 of 3x32x32, SGD with momentum."""
    torch.manual_seed(0)
    model = VGG()
    data = _batches(4, lambda: (torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))))
    return _classifier(model, data, _sgd(model), compile_model)


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock, as torchvision writes it: one in-place ReLU module
    called twice, the shortcut added in place (the identity, or a strided 1x1 conv and
    BatchNorm where the shape changes)."""

    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


def build_resnet(compile_model=False) -> Step:
    """A ResNet's first two stages at 56x56: stem conv-BN-ReLU to 64 channels, two
    BasicBlocks at 64, two at 128 (the first strided, with a projection), global average
    pool, linear; batch 16, SGD with momentum. The residual blocks' maps are millions of
    values: what reading large maps costs shows."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64),
                          nn.ReLU(inplace=True),
                          BasicBlock(64, 64), BasicBlock(64, 64), BasicBlock(64, 128, 2),
                          BasicBlock(128, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(128, 10))
    data = _batches(2, lambda: (torch.randn(16, 3, 56, 56), torch.randint(0, 10, (16,))))
    return _classifier(model, data, _sgd(model), compile_model)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP (GPT-style)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        # A module, not F.gelu, so that the monitor's smooth-activation path is exercised.
        self.act = nn.GELU()
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(self.act(self.fc(self.ln2(x))))


class TinyLM(nn.Module):
    """4-layer GELU transformer LM: vocab 1000, 128-dim, 4 heads, context 64."""

    def __init__(self, vocab=1000, d=128, heads=4, layers=4, context=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def build_transformer(compile_model=False) -> Step:
    """4-layer GELU transformer LM, 16 sequences x 64 tokens, next-token loss, AdamW."""
    torch.manual_seed(0)
    model = TinyLM()
    run = torch.compile(model) if compile_model else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loss_fn = nn.CrossEntropyLoss()
    data = _batches(4, lambda: torch.randint(0, 1000, (16, 65)))

    def step(i):
        seq = data[i % len(data)]
        logits = run(seq[:, :-1])
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), seq[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def build_tiny(compile_model=False) -> Step:
    """Tiny ReLU MLP 32-64-64-10, batch 32: Python per-call cost dominates."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    data = _batches(16, lambda: (torch.randn(32, 32), torch.randint(0, 10, (32,))))
    return _classifier(model, data, _sgd(model), compile_model)


class StackBlock(nn.Module):
    """Linear-LayerNorm-GELU: the shape of a transformer's MLP stack, many modest modules."""

    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.ln(self.fc(x)))


def build_stack(compile_model=False) -> Step:
    """32 blocks of Linear(256, 256)-LayerNorm-GELU and a linear classifier, batch 64, AdamW:
    about 100 modules of modest size, so per-layer work at the step end shows."""
    torch.manual_seed(0)
    model = nn.Sequential(*(StackBlock(256) for _ in range(32)), nn.Linear(256, 10))
    data = _batches(4, lambda: (torch.randn(64, 256), torch.randint(0, 10, (64,))))
    return _classifier(model, data, torch.optim.AdamW(model.parameters(), lr=1e-3), compile_model)


WORKLOADS = {w.name: w for w in (
    Workload("mlp", build_mlp, "ReLU MLP 784-1024-1024-512-10, batch 256",
             timed_steps=40, quick_timed_steps=10, warmup=3,
             memory_steps=200, quick_memory_steps=40, ratio_target=1.05),
    Workload("cnn", build_cnn, "VGG-style CNN 6 conv+BN+ReLU, batch 64x3x32x32",
             timed_steps=15, quick_timed_steps=4, warmup=2,
             memory_steps=60, quick_memory_steps=12, ratio_target=1.05),
    Workload("resnet", build_resnet, "ResNet stages 64-128 ch at 56x56, 4 BasicBlocks, batch 16",
             timed_steps=8, quick_timed_steps=2, warmup=2,
             memory_steps=20, quick_memory_steps=4, ratio_target=1.05),
    Workload("transformer", build_transformer, "GELU transformer LM 4x128d, 16x64 tokens",
             timed_steps=40, quick_timed_steps=10, warmup=3,
             memory_steps=200, quick_memory_steps=40, ratio_target=1.05),
    Workload("stack", build_stack, "32 x Linear(256)-LayerNorm-GELU, batch 64, AdamW",
             timed_steps=60, quick_timed_steps=15, warmup=3,
             memory_steps=200, quick_memory_steps=40, ratio_target=1.10),
    # Per-call Python cost dominates a model this small, so its target is looser.
    Workload("tiny", build_tiny, "tiny ReLU MLP 32-64-64-10, batch 32",
             timed_steps=2000, quick_timed_steps=500, warmup=20,
             memory_steps=2000, quick_memory_steps=500, ratio_target=1.5,
             count_steps=2000, quick_count_steps=500),
)}
