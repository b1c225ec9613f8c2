"""Per-class sigmoids fed to `F.cross_entropy` as if they were logits: training crawls.

Fault shown: a 5-class ReLU classifier ends in `nn.Sigmoid()`, one probability per class,
and is trained with `F.cross_entropy`, which expects raw logits and applies log_softmax
itself. Its inputs lie in (0, 1), so the loss cannot fall below about 0.90 (the right class
at 1 and the four others at 0 still leave them e^0 in the softmax), and the sigmoid's
derivative (0.25 at most) damps the gradient reaching the logits. The loss goes down, but
slowly, and the accuracy lags far behind.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`null -> mismatched` at step 0, cause `architecture`. With `--fixed` (the logits into
`F.cross_entropy`, no sigmoid, nothing else changed) the run stays healthy.

    python sample_scripts/sigmoid_into_ce.py [--fixed] [--steps 200]
    neuraldbg run --fail-on mismatched sample_scripts/sigmoid_into_ce.py     # exits 3
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true", help="no sigmoid: logits into the loss")
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 20, 5
X = torch.randn(2048, n_features)
y = (X @ torch.randn(n_features, n_classes)).argmax(dim=1)

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, n_classes),
)
if not args.fixed:
    model.append(nn.Sigmoid())
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = F.cross_entropy(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    out = model(X)
    final = F.cross_entropy(out, y).item()
    accuracy = (out.argmax(dim=1) == y).float().mean().item()
print(f"sigmoid_into_ce: {'logits' if args.fixed else 'sigmoids'} into F.cross_entropy, "
      f"{args.steps} steps, loss on all data {final:.4f}, accuracy {accuracy:.3f}")
