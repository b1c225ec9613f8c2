"""BatchNorm fed batches that are not shuffled: each batch holds a single class.

Fault shown: a BatchNorm MLP classifies 10 classes of 32 features (one cluster per class). The
dataset was written out class by class, 64 records at a time (a shard per class, in turn),
and the DataLoader reads it with `shuffle=False`: every batch of 64 holds one class. In
training mode BatchNorm normalises each batch with its own mean, which here is the class
itself: the class signal is subtracted away, and the running statistics it keeps for
evaluation follow each class in turn. Nothing errors; evaluation (with the running
statistics) is near chance.

Expected detection under `neuraldbg run`: the first BatchNorm layer (`1`, BatchNorm1d), signal
`norm`, `normal -> drift` once its warm-up is over (about step 20): each batch's mean lies
most of a running standard deviation from the running mean; `explain` ranks that drift first
with cause `input_data`. Its healthy twin is `--shuffle` (DataLoader(shuffle=True), nothing
else changed): each batch is then a fair sample of the classes, its statistics lie near the
running ones (about 0.1 running standard deviations), no layer changes state, and evaluation
accuracy is near 1.

    python sample_scripts/bn_unshuffled.py [--shuffle | --fixed] [--epochs 4]
    neuraldbg run --fail-on drift sample_scripts/bn_unshuffled.py     # exits 3
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--shuffle", "--fixed", dest="shuffle", action="store_true",
                    help="shuffle the DataLoader (the healthy twin)")
args = parser.parse_args()

torch.manual_seed(0)

# 10 clusters of 32 features, stored class by class in shards of 64 records.
n_classes, shard, shards = 10, 64, 6
prototypes = 1.5 * torch.randn(n_classes, 32)
y = torch.arange(n_classes).repeat_interleave(shard).repeat(shards)
X = prototypes[y] + torch.randn(len(y), 32)

model = nn.Sequential(
    nn.Linear(32, 64),
    nn.BatchNorm1d(64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.BatchNorm1d(64),
    nn.ReLU(),
    nn.Linear(64, n_classes),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
loader = DataLoader(TensorDataset(X, y), batch_size=shard, shuffle=args.shuffle)

for epoch in range(args.epochs):
    model.train()
    for xb, yb in loader:
        loss = loss_fn(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

model.eval()
with torch.no_grad():
    accuracy = (model(X).argmax(dim=1) == y).float().mean().item()
print(f"bn_unshuffled: shuffle={args.shuffle}, {args.epochs} epochs, final training loss "
      f"{loss.item():.4f}, evaluation accuracy {accuracy:.3f}")
