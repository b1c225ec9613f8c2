"""A classifier trained with `nn.L1Loss` between its softmax and one-hot targets.

Fault shown: a 4-class ReLU classifier ends in `nn.Softmax(dim=1)` and is trained with
`nn.L1Loss()` (mean absolute error) against one-hot float targets, a regression loss used
for a classification. The L1 gradient has the same size however wrong the prediction is, and
through the softmax it shrinks as the right class's probability nears 0 or 1: examples the
model gets badly wrong barely pull, the loss falls slowly, and the accuracy stays low.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`null -> mismatched` at step 0, cause `architecture`. With `--fixed` (logits into
`nn.CrossEntropyLoss()` on the class indices, nothing else changed) the run stays healthy.

    python sample_scripts/mae_classification.py [--fixed] [--steps 200]
    neuraldbg run --fail-on mismatched sample_scripts/mae_classification.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true",
                    help="logits into nn.CrossEntropyLoss on the class indices")
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 20, 4
X = torch.randn(2048, n_features)
labels = (X @ torch.randn(n_features, n_classes)).argmax(dim=1)
one_hot = nn.functional.one_hot(labels, n_classes).float()

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, n_classes),
)
if args.fixed:
    loss_fn, y = nn.CrossEntropyLoss(), labels
else:
    model.append(nn.Softmax(dim=1))
    loss_fn, y = nn.L1Loss(), one_hot
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    accuracy = (model(X).argmax(dim=1) == labels).float().mean().item()
print(f"mae_classification: {'cross-entropy on logits' if args.fixed else 'L1 on softmax'}, "
      f"{args.steps} steps, final loss {loss.item():.4f}, accuracy {accuracy:.3f}")
