"""A classifier head replaced after the optimizer was built: the new head never learns.

Fault shown: a small ReLU network (`body`, `head`) is set up for 10 classes, its optimizer
is built, and only then is the head swapped for one with the task's 4 classes
(`model.head = nn.Linear(64, 4)`), the usual fine-tuning step done in the wrong order. The
optimizer still holds the old head's parameters (now unused) and not the new one's: the new
head gets gradients at every step but nothing ever applies them, so it keeps its random
initial weights. The body adapts to that random, fixed projection instead, so the loss still
falls and nothing looks broken from the loss alone; only the head's weights tell.

Expected detection under `neuraldbg run`: layer `head` (Linear), signal `update`,
`normal -> frozen` at step 2 (once it held still for 3 steps; `in_no_optimizer` in its
stats), staying frozen; the body's layers update normally. With `--fixed` (the optimizer built after the
head is replaced, nothing else changed) the run stays healthy.

    python sample_scripts/replaced_head.py [--fixed] [--steps 150]
    neuraldbg run --fail-on frozen sample_scripts/replaced_head.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--fixed", action="store_true",
                    help="build the optimizer after replacing the head")
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 20, 4
X = torch.randn(2048, n_features)
y = (X @ torch.randn(n_features, n_classes)).argmax(dim=1)


class Net(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_features, 64), nn.ReLU(),
            nn.Linear(64, 64), nn.ReLU(),
        )
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(self.body(x))


model = Net(classes=10)                 # the pretrained setup: 10 classes
if not args.fixed:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
model.head = nn.Linear(64, n_classes)   # this task has 4
if args.fixed:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

head_before = model.head.weight.detach().clone()
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
moved = (model.head.weight - head_before).norm().item()
print(f"replaced_head: optimizer built {'after' if args.fixed else 'before'} the head swap, "
      f"{args.steps} steps, loss on all data {final:.4f}, accuracy {accuracy:.3f}, "
      f"head weights moved by {moved:.4g}")
