"""Class labels 0..3 used as `nn.BCEWithLogitsLoss` targets: a one-logit model for 4 classes.

Fault shown: a ReLU network with one logit per row (`nn.Linear(64, 1)`), the binary setup,
is trained with `nn.BCEWithLogitsLoss()` on a 4-class task whose labels 0..3 are passed as
the float targets. BCE expects probabilities in [0, 1]: for a target above 1 the loss has
no minimum at all, it is unbounded below and falls forever as the logit grows. The
optimizer pushes the rows of classes 1, 2 and 3 to ever larger logits and class 0's to
negative ones: the loss goes negative and keeps falling (about -100 after 200 steps, the
logits in the hundreds), which looks like progress, while one logit still cannot tell
classes 1, 2 and 3 apart.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`null -> unreachable` at step 0, cause `input_data`. With `--fixed` (a 4-way head trained
with `nn.CrossEntropyLoss()` on the labels, nothing else changed) the run stays healthy.

    python sample_scripts/bce_targets_out_of_range.py [--fixed] [--steps 200]
    neuraldbg run --fail-on unreachable sample_scripts/bce_targets_out_of_range.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true",
                    help="a 4-way head with nn.CrossEntropyLoss on the labels")
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 20, 4
X = torch.randn(2048, n_features)
labels = (X @ torch.randn(n_features, n_classes)).argmax(dim=1)

if args.fixed:
    head, loss_fn, y = nn.Linear(64, n_classes), nn.CrossEntropyLoss(), labels
else:
    head, loss_fn, y = nn.Linear(64, 1), nn.BCEWithLogitsLoss(), labels.float().unsqueeze(1)

model = nn.Sequential(
    nn.Linear(n_features, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    head,
)
# Adam bounds each step: with SGD the growing logits overflow to NaN within 60 steps.
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    out = model(X)
    # one logit can only say "0" or "not 0": count "not 0" as class 1, its best guess
    predicted = out.argmax(dim=1) if args.fixed else (out[:, 0] > 0).long()
    accuracy = (predicted == labels).float().mean().item()
setup = "4-way cross-entropy" if args.fixed else "BCE on labels 0..3"
print(f"bce_targets_out_of_range: {setup}, {args.steps} steps, final loss {loss.item():.4f}, "
      f"accuracy {accuracy:.3f}, largest |output| {out.abs().max().item():.3g}")
