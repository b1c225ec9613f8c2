"""ReLU layers dead from initialisation.

Fault shown: the classifier's init function sets every Linear bias to the "prior
probability" value -log((1 - p) / p) ~= -4.6 (p = 0.01), a trick meant only for the output
layer of a detector (RetinaNet's focal-loss prior), applied here to every layer by
`model.apply`. With inputs of unit scale, the hidden pre-activations are all below zero, so
the first hidden ReLU outputs zero for every unit and every input from the very first
forward; no gradient reaches the layers before it, and nothing ever revives it. The loss
plateaus at the class prior.

Expected detection under `neuraldbg run`: layer `body.1` (ReLU), signal `activation`,
`null -> dead` at step 0 (and `body.3` too, as it only ever sees zeros); the Linear layers
below them have `null -> vanishing` gradients at step 0.

    python sample_scripts/dead_init.py [--steps N]
    neuraldbg run sample_scripts/dead_init.py
"""
import argparse
import math

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 20, 4
X = torch.randn(1024, n_features)
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
        return self.head(self.body(x))


PRIOR = 0.01


def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.constant_(m.bias, -math.log((1 - PRIOR) / PRIOR))   # bug: every layer


model = Classifier()
model.apply(init_weights)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

for step in range(args.steps):
    idx = torch.randint(0, len(X), (64,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

print(f"dead_init: {args.steps} steps, final loss {loss.item():.4f}")
