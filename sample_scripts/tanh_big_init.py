"""Saturated tanh layers from a too-large weight initialisation.

Fault shown: a tanh MLP (three hidden layers of 128) classifies 128 standardised features
(every input column has mean 0 and std 1, so the data is not the problem). Its init function
draws every Linear weight from N(0, 2.5^2), a "std" meant for something else; Xavier's scale
here is ~0.09, so the weights are ~28x too large. Each pre-activation is then a sum of 128
terms of std ~2.5: typically ~28 in magnitude, far in tanh's flat tails. All three tanh
layers (`net.1`, `net.3`, `net.5`) output +-1 for nearly every unit and input from the very
first forward; their derivative is ~0, so little gradient gets through them and the network
learns slowly and badly (after 150 steps: ~45% accuracy, against ~97% with Xavier init).

Expected detection under `neuraldbg run`: the `model` event shows each Linear's
`weight_rms` ~2.5 against an `init_rms` (Xavier) of 0.09-0.12; layers `net.1`, `net.3` and
`net.5` (Tanh), signal `activation`, `null -> saturated` at step 0, staying saturated. With
`--fixed` (Xavier-normal init, nothing else changed) the run stays healthy.

    python sample_scripts/tanh_big_init.py [--fixed] [--std 2.5] [--steps 150]
    neuraldbg run --fail-on saturated sample_scripts/tanh_big_init.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--std", type=float, default=2.5, help="std of the (bad) weight init")
parser.add_argument("--fixed", action="store_true", help="Xavier-normal init instead")
args = parser.parse_args()

torch.manual_seed(0)

# Standardised features (mean 0, std 1 per column): the input scale is right.
n_features, n_classes, width = 128, 4, 128
X = torch.randn(2048, n_features) @ torch.randn(n_features, n_features)
X = (X - X.mean(dim=0)) / X.std(dim=0)
y = (torch.tanh(X @ torch.randn(n_features, n_classes))).argmax(dim=1)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_features, width), nn.Tanh(),
            nn.Linear(width, width), nn.Tanh(),
            nn.Linear(width, width), nn.Tanh(),
            nn.Linear(width, n_classes),
        )

    def forward(self, x):
        return self.net(x)


def init_weights(module):
    if isinstance(module, nn.Linear):
        if args.fixed:
            nn.init.xavier_normal_(module.weight)
        else:
            nn.init.normal_(module.weight, std=args.std)
        nn.init.zeros_(module.bias)


model = Classifier()
model.apply(init_weights)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    h = model.net[1](model.net[0](X))
    saturated = (h.abs() > 0.99).float().mean().item()
    accuracy = (model(X).argmax(dim=1) == y).float().mean().item()
init = "xavier" if args.fixed else f"normal(std={args.std:g})"
print(f"tanh_big_init: init {init}, {args.steps} steps, final loss {loss.item():.4f}, "
      f"accuracy {accuracy:.3f}, |tanh| > 0.99 in net.1: {saturated:.0%}")
