"""Raw pixel values into a tanh network: the first tanh layer saturates in the first steps.

Fault shown: a tanh MLP classifies 8x8 grey-level "digits" (10 classes) whose pixels are the
raw integers 0..16 as floats, as in scikit-learn's digits set, fed in without scaling. The
first Linear layer sums 64 inputs averaging about 8: its outputs are several units in size,
so its tanh (`1` in the `nn.Sequential`) already sits at -1 or +1 for about two thirds of
its values at step 0. The first layer's gradients, proportional to its inputs, are about 16
times those of scaled pixels: its first updates push it further into saturation, which is
total (nearly every value at +-1) within about 100 steps. From then on the first layer
cannot learn and passes on an almost fixed code: the loss stays high and the accuracy is
little better than a guess.

Expected detection under `neuraldbg run`: layer `1` (Tanh), signal `activation`,
`normal -> saturated` at about step 26, staying saturated, cause `input_data` (the model's
input is not standardised); at step 0 under half of its units count as saturated (the
threshold is 70%), the first updates take it past. With `--fixed` (the pixels scaled to
[-0.5, 0.5], `X / 16 - 0.5`, nothing else changed) the run stays healthy.

    python sample_scripts/unscaled_pixels.py [--fixed] [--steps 200]
    neuraldbg run --fail-on saturated sample_scripts/unscaled_pixels.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true", help="scale the pixels to [-0.5, 0.5]")
args = parser.parse_args()

torch.manual_seed(0)

# 10 classes of noisy 8x8 images around one prototype each, pixels the integers 0..16.
n_classes, n = 10, 2048
base = 16 * torch.rand(64)                                  # what all the digits share
prototypes = (base + 2 * torch.randn(n_classes, 64)).clamp(0, 16)
y = torch.randint(0, n_classes, (n,))
X = (prototypes[y] + 3 * torch.randn(n, 64)).clamp(0, 16).round()
if args.fixed:
    X = X / 16 - 0.5

model = nn.Sequential(
    nn.Linear(64, 64),
    nn.Tanh(),
    nn.Linear(64, 64),
    nn.Tanh(),
    nn.Linear(64, n_classes),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, n, (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    hidden = model[1](model[0](X))
    saturated = (hidden.abs() > 0.99).float().mean().item()
    logits = model(X)
    final = loss_fn(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
print(f"unscaled_pixels: pixels {'scaled' if args.fixed else 'raw 0..16'}, {args.steps} steps, "
      f"loss on all data {final:.4f}, accuracy {accuracy:.3f}, first tanh saturated "
      f"(|a| > 0.99) {saturated:.1%}")
