"""A base + classifier model trained with per-parameter-group learning rates (the head 10x slower).

Source: https://pytorch.org/docs/stable/optim.html#per-parameter-options  (official PyTorch docs,
torch.optim "Per-parameter options" example)
Bug: none. The optimizer is built from two parameter groups, as in the docs' example:
optim.SGD([{'params': model.base.parameters(), 'lr': 1e-2}, {'params': model.classifier.parameters()}],
lr=1e-3, momentum=0.9): model.base uses 1e-2 and model.classifier the default 1e-3, so the
update-to-weight ratio of the last layer is ten times smaller than the body's. That is intended.
The docs give no model or data: a two-layer ReLU base with a linear classifier on a synthetic
4-class problem (20 standardised features), cross-entropy, batch 64, is used here.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): loss 1.466 -> 0.567 and accuracy 0.780 after 400 steps (chance 0.25).
"""
# expect: healthy
import argparse

import torch
from torch import nn, optim

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(0)

# Four classes defined by a random two-layer teacher on 20 standardised features.
n, d, k = 4096, 20, 4
X = torch.randn(n, d)
teacher = torch.relu(X @ torch.randn(d, 32)) @ torch.randn(32, k)
y = teacher.argmax(1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.base = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.classifier = nn.Linear(64, k)

    def forward(self, x):
        return self.classifier(self.base(x))


model = Net()
optimizer = optim.SGD([
    {"params": model.base.parameters(), "lr": 1e-2},
    {"params": model.classifier.parameters()},
], lr=1e-3, momentum=0.9)
criterion = nn.CrossEntropyLoss()

first = None
for _ in range(args.steps):
    idx = torch.randint(0, n, (64,))
    loss = criterion(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if first is None:
        first = loss.item()

with torch.no_grad():
    logits = model(X)
    full_loss = criterion(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
print(f"param_groups: {args.steps} steps, loss {first:.3f} -> {full_loss:.3f}, accuracy {acc:.3f} "
      f"(lrs {[g['lr'] for g in optimizer.param_groups]})")
