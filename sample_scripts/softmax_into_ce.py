"""Probabilities fed to `nn.CrossEntropyLoss` as if they were logits: training crawls.

Fault shown: a 5-class ReLU classifier ends its `forward` with
`torch.softmax(logits, dim=1)`, and is trained with `nn.CrossEntropyLoss()`, which applies
log_softmax itself: the loss takes a softmax of probabilities. Its inputs lie in [0, 1], so
the loss cannot fall below about 0.90 (all the probability on the right class still leaves
the four others at e^0), and the gradient reaching the logits is damped by the extra softmax.
Nothing errors and the loss does go down, but slowly, and the accuracy lags far behind.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`null -> mismatched` at step 0, cause `architecture`. With `--fixed` (`forward` returns the
logits, nothing else changed) the run stays healthy.

    python sample_scripts/softmax_into_ce.py [--fixed] [--steps 200]
    neuraldbg run --fail-on mismatched sample_scripts/softmax_into_ce.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true", help="return the logits from forward")
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 20, 5
X = torch.randn(2048, n_features)
y = (X @ torch.randn(n_features, n_classes)).argmax(dim=1)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_features, 64), nn.ReLU(),
            nn.Linear(64, 64), nn.ReLU(),
        )
        self.head = nn.Linear(64, n_classes)

    def forward(self, x):
        logits = self.head(self.body(x))
        if args.fixed:
            return logits
        return torch.softmax(logits, dim=1)


model = Classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    out = model(X)
    final = loss_fn(out, y).item()
    accuracy = (out.argmax(dim=1) == y).float().mean().item()
print(f"softmax_into_ce: forward returns {'logits' if args.fixed else 'probabilities'}, "
      f"{args.steps} steps, loss on all data {final:.4f}, accuracy {accuracy:.3f}")
