"""`nn.NLLLoss` fed probabilities instead of log-probabilities: the loss goes negative.

Fault shown: a 5-class ReLU classifier ends in `nn.Softmax(dim=1)` and is trained with
`nn.NLLLoss()`, which expects log-probabilities (`nn.LogSoftmax`): it only picks the
right class's value and negates it. Fed probabilities, the "loss" is minus the right class's
probability, between -1 and 0: it starts near -0.2 and falls below zero, which looks like
progress, but its gradient, p(1 - p), vanishes exactly where the model is most wrong
(p near 0). Training goes slowly and the accuracy stays low; the true cross-entropy barely
improves.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`null -> mismatched` at step 0, cause `architecture`. With `--fixed` (`nn.LogSoftmax(dim=1)`
instead of the softmax, nothing else changed) the run stays healthy.

    python sample_scripts/nll_on_probabilities.py [--fixed] [--steps 200]
    neuraldbg run --fail-on mismatched sample_scripts/nll_on_probabilities.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true", help="end the model in nn.LogSoftmax(dim=1)")
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
    nn.LogSoftmax(dim=1) if args.fixed else nn.Softmax(dim=1),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.NLLLoss()

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    out = model(X)
    accuracy = (out.argmax(dim=1) == y).float().mean().item()
    # the cross-entropy the author meant to minimise, measured the same way for both
    log_probs = out if args.fixed else out.clamp_min(1e-12).log()
    cross_entropy = loss_fn(log_probs, y).item()
print(f"nll_on_probabilities: NLLLoss on {'log-probabilities' if args.fixed else 'probabilities'}, "
      f"{args.steps} steps, final loss {loss.item():.4f}, cross-entropy {cross_entropy:.4f}, "
      f"accuracy {accuracy:.3f}")
