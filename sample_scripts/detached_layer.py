"""A `.detach()` in forward() cuts the graph: the first layer gets no gradient.

Fault shown: a small ReLU classifier's forward() computes its first layer's features and
passes them on with `.detach()` (left over from logging them, or copied from code that
froze a pretrained encoder on purpose). Autograd stops there: the layers after the cut get
their gradients as usual, the first Linear (`embed`) gets none, and the optimizer skips it
(no `.grad`), so it keeps its random initial weights for the whole run. The loss still goes
down (the later layers make the best of random features), so nothing looks broken.

Expected detection under `neuraldbg run`: layer `embed` (Linear), signal `update`,
`null -> detached` at step 0 (no gradient while the layers after it get one), staying
detached; `hidden` and `out` update normally. With `--fixed` (no detach, nothing else
changed) the run stays healthy.

    python sample_scripts/detached_layer.py [--fixed] [--steps 120]
    neuraldbg run --fail-on detached sample_scripts/detached_layer.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=120)
parser.add_argument("--fixed", action="store_true", help="no .detach() in forward()")
args = parser.parse_args()

torch.manual_seed(0)

n_features, n_classes = 20, 4
X = torch.randn(2048, n_features)
y = (X @ torch.randn(n_features, n_classes)).argmax(dim=1)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(n_features, 64)
        self.act1 = nn.ReLU()
        self.hidden = nn.Linear(64, 64)
        self.act2 = nn.ReLU()
        self.out = nn.Linear(64, n_classes)
        self.last_features = None

    def forward(self, x):
        h = self.act1(self.embed(x))
        if not args.fixed:
            h = h.detach()          # the bug: meant only for the copy kept for logging
        self.last_features = h.detach()
        return self.out(self.act2(self.hidden(h)))


model = Classifier()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()

embed_before = model.embed.weight.detach().clone()
batch = 64
for step in range(args.steps):
    idx = torch.randint(0, len(X), (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    accuracy = (model(X).argmax(dim=1) == y).float().mean().item()
moved = (model.embed.weight - embed_before).norm().item()
print(f"detached_layer: detach {'removed' if args.fixed else 'in forward()'}, {args.steps} steps, "
      f"final loss {loss.item():.4f}, accuracy {accuracy:.3f}, embed weights moved by {moved:.4g}")
