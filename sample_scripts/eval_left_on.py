"""Training left in eval() mode after the first validation pass.

Fault shown: a classifier with BatchNorm and Dropout(0.5), trained on 200 examples with 20%
wrong labels (where Dropout earns its keep), is validated every 25 steps; the validation
function calls `model.eval()` (right: Dropout off, BatchNorm on its running statistics)
but nothing calls `model.train()` afterwards. From the first validation on, every
training step runs in eval mode: Dropout no longer regularises, and BatchNorm normalises
with running statistics that are no longer updated instead of the batch's own. Nothing
crashes and the training loss goes down even faster (the model memorises the noisy labels),
which is why this goes unnoticed; the validation accuracy ends a few points lower.

Expected detection under `neuraldbg run`: the pseudo-layer `(loop)`, signal `loop`,
`normal -> eval_mode` at the first training step after the first validation (step 25),
with the model's class name (`Classifier`) in its stats. With `--fixed` (`model.train()`
after each validation pass, nothing else changed) the run stays healthy.

    python sample_scripts/eval_left_on.py [--fixed] [--steps 150] [--val-every 25]
    neuraldbg run --fail-on eval_mode sample_scripts/eval_left_on.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--val-every", type=int, default=25)
parser.add_argument("--fixed", action="store_true", help="call model.train() after validating")
args = parser.parse_args()

torch.manual_seed(0)

# 200 training examples with 20% of their labels wrong; 1000 clean validation examples.
n_features, n_classes, n_train = 20, 4, 200
X = torch.randn(n_train + 1000, n_features)
y = (X @ torch.randn(n_features, n_classes)).argmax(dim=1)
X_train, y_train, X_val, y_val = X[:n_train], y[:n_train].clone(), X[n_train:], y[n_train:]
wrong = torch.rand(n_train) < 0.2
y_train[wrong] = torch.randint(0, n_classes, (int(wrong.sum()),))


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_features, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(128, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.5),
            nn.Linear(128, n_classes),
        )

    def forward(self, x):
        return self.net(x)


model = Classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()


def validate():
    model.eval()
    with torch.no_grad():
        accuracy = (model(X_val).argmax(dim=1) == y_val).float().mean().item()
    if args.fixed:
        model.train()
    return accuracy


batch = 32
accuracy = None
eval_steps = 0
for step in range(args.steps):
    idx = torch.randint(0, len(X_train), (batch,))
    eval_steps += not model.training
    loss = loss_fn(model(X_train[idx]), y_train[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if (step + 1) % args.val_every == 0:
        accuracy = validate()

print(f"eval_left_on: model.train() after validation {'yes' if args.fixed else 'no'}, "
      f"{args.steps} steps ({eval_steps} trained in eval mode), final loss {loss.item():.4f}, "
      f"val accuracy {accuracy:.3f}")
