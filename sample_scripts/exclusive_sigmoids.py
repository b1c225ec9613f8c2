"""Independent sigmoids for mutually exclusive classes: a multi-label loss on a one-class task.

Fault shown: each example belongs to exactly one of 4 classes, stored as one-hot float
targets of shape (N, 4), and a ReLU classifier ends in `nn.Sigmoid()` trained with
`nn.BCELoss()`, the multi-label setup: four independent yes/no questions instead of one
choice among four. Nothing ties the outputs together (a row's probabilities need not sum to
1), and the loss is averaged over the 4 columns, so each example pulls its own class a
quarter as hard as under a softmax. This one is a slow learner rather than a dead end: the
loss falls and, at the same learning rate, the accuracy trails the softmax version's by a
wide margin at 200 steps and catches up only after about three times as many.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`null -> mismatched` at step 0, cause `architecture`. With `--fixed` (logits into
`nn.CrossEntropyLoss()` on the class indices, nothing else changed) the run stays healthy.

    python sample_scripts/exclusive_sigmoids.py [--fixed] [--steps 200]
    neuraldbg run --fail-on mismatched sample_scripts/exclusive_sigmoids.py     # exits 3
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
one_hot = nn.functional.one_hot(labels, n_classes).float()     # exactly one 1 per row

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
    model.append(nn.Sigmoid())
    loss_fn, y = nn.BCELoss(), one_hot
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    out = model(X)
    accuracy = (out.argmax(dim=1) == labels).float().mean().item()
print(f"exclusive_sigmoids: {'softmax cross-entropy' if args.fixed else 'sigmoids + BCE'}, "
      f"{args.steps} steps, final loss {loss.item():.4f}, accuracy {accuracy:.3f}")
