"""A swinging loss from Adam at a learning rate 300x too high.

Fault shown: a small GELU classifier (two hidden layers of 64) learns four Gaussian clusters
with Adam at lr 0.3, a value copied from an SGD recipe; Adam's default of 1e-3 is what it
needs. Adam normalises each step to about lr per weight, so every step moves every weight by
~0.3 whatever the gradient: within ten steps the weights are huge, the logits too, and the
model is right with total confidence (the loss rounds to exactly 0 in float32) until a step
flips a few decisions and it is wrong with total confidence. The loss swings
0 -> 11 -> 0 -> 12 -> 0 -> 28 -> 0 -> 25 -> ... Nothing turns NaN and no unit dies (GELU has
no dead zone, and no more than ~60% of its units sit in its negative tail): nothing in the
layers' outputs looks broken, only the loss does.

Expected detection under `neuraldbg run`: the `hparams` event at step 0 (Adam, lr 0.3, never
changed); the pseudo-layer `(loss)`, signal `loss`, `normal -> spiking` from step ~9, again
and again; no `dead`, no `saturated`, no `nonfinite`. (The relative updates are ~1 in the
first steps but fall below the `too_large` threshold, 0.3, before its warm-up ends, as the
weights grow; and at the steps where the loss is exactly 0 every layer's gradient is exactly
0, which the gradient detector writes as `vanishing`.) With `--fixed` (lr 1e-3, nothing
else changed) the run stays healthy.

    python sample_scripts/adam_high_lr.py [--fixed] [--lr 0.3] [--steps 200]
    neuraldbg run --fail-on spiking sample_scripts/adam_high_lr.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--lr", type=float, default=0.3, help="Adam's (too high) learning rate")
parser.add_argument("--fixed", action="store_true", help="Adam's usual learning rate (1e-3)")
args = parser.parse_args()
lr = 1e-3 if args.fixed else args.lr

torch.manual_seed(0)

# Four Gaussian clusters in 16 dimensions, standardised.
n_features, n_classes = 16, 4
centers = 1.5 * torch.randn(n_classes, n_features)
y = torch.randint(0, n_classes, (2048,))
X = centers[y] + torch.randn(2048, n_features)
X = (X - X.mean(dim=0)) / X.std(dim=0)

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.GELU(),
    nn.Linear(64, 64),
    nn.GELU(),
    nn.Linear(64, n_classes),
)
optimizer = torch.optim.Adam(model.parameters(), lr=lr)
loss_fn = nn.CrossEntropyLoss()

batch = 64
losses = []
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())

with torch.no_grad():
    accuracy = (model(X).argmax(dim=1) == y).float().mean().item()
late = losses[len(losses) // 2:]
print(f"adam_high_lr: lr {lr:g}, {args.steps} steps, loss in the second half "
      f"{min(late):.3g}..{max(late):.3g}, accuracy {accuracy:.3f}")
