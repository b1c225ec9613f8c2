"""Every weight initialised to zero: the hidden units stay copies of one another.

Fault shown: a sigmoid MLP (20 -> 64 -> 64 -> 4) whose `init_weights`, applied with
`model.apply`, sets every Linear's weight and bias to zero, as one might to "start from
nothing". Every hidden unit then computes the same value, and since the layer after it holds
the same weights for each of them, every unit gets the same gradient: no step can tell them
apart. Each hidden layer trains as if it were a single unit; the loss falls a little and
stalls far above what the model can reach. Nothing looks broken from the loss alone.

Expected detection under `neuraldbg run`: layers `0` and `2` (Linear), signal `update`,
`normal -> symmetric` at step 4 (the first reading, at the 5th step), staying symmetric; the
output layer `4`, whose rows (one per class) differ, is not flagged. With `--fixed` (the
init function uses `nn.init.xavier_uniform_` for the weights, nothing else changed) the run
stays healthy.

    python sample_scripts/zero_init.py [--fixed] [--steps 300]
    neuraldbg run --fail-on symmetric sample_scripts/zero_init.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--fixed", action="store_true",
                    help="initialise the weights with xavier_uniform_ instead of zeros")
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 20, 4
X = torch.randn(2048, n_features)
y = (torch.tanh(X @ torch.randn(n_features, 16)) @ torch.randn(16, n_classes)).argmax(dim=1)

model = nn.Sequential(
    nn.Linear(n_features, 64), nn.Sigmoid(),
    nn.Linear(64, 64), nn.Sigmoid(),
    nn.Linear(64, n_classes),
)


def init_weights(m):
    if isinstance(m, nn.Linear):
        if args.fixed:
            nn.init.xavier_uniform_(m.weight)
        else:
            nn.init.zeros_(m.weight)
        nn.init.zeros_(m.bias)


model.apply(init_weights)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    logits = model(X)
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    final = loss_fn(logits, y).item()
    w = model[0].weight
    spread = (w - w[:1]).abs().max().item()
print(f"zero_init: {'xavier' if args.fixed else 'zero'} init, {args.steps} steps, loss on all "
      f"data {final:.4f}, accuracy {accuracy:.3f}, largest difference between two hidden "
      f"units' weights {spread:.3g}")
