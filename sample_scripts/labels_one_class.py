"""Labels scaled like pixels: `y = (y / 255).long()` turns every label into class 0.

Fault shown: a 10-class ReLU classifier on 8x8 grey-level images (pixels 0..255) and their
integer labels 0..9. The preprocessing meant to scale the images to [0, 1] but was applied
to the labels: `y = (y / 255).long()` truncates every label to 0. Nothing errors: the model
learns at once to answer class 0 for everything, the training loss drops to almost zero
and looks perfect, and the accuracy against the real labels is that of one class in ten.

Expected detection under `neuraldbg run`: the pseudo-layer `(output)`, signal `output`,
`normal -> one_class` at about step 50 (once every target has been the same class for 50
steps), cause `input_data`. With `--fixed` (the labels untouched and the images scaled
instead, nothing else changed) the run stays healthy.

    python sample_scripts/labels_one_class.py [--fixed] [--steps 200]
    neuraldbg run --fail-on one_class sample_scripts/labels_one_class.py     # exits 3
"""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--fixed", action="store_true", help="scale the images, not the labels")
args = parser.parse_args()

torch.manual_seed(0)

# 10 classes of noisy 8x8 images around one prototype each, stored as raw grey levels.
n_classes, n = 10, 2048
prototypes = 255 * torch.rand(n_classes, 64)
labels = torch.randint(0, n_classes, (n,))
X = (prototypes[labels] + 60 * torch.randn(n, 64)).clamp(0, 255).round()
y = labels.clone()

if args.fixed:
    X = X / 255
else:
    y = (y / 255).long()            # meant for the images: every label becomes 0

model = nn.Sequential(
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, 64),
    nn.ReLU(),
    nn.Linear(64, n_classes),
)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()

batch = 64
for step in range(args.steps):
    idx = torch.randint(0, n, (batch,))
    loss = loss_fn(model(X[idx]), y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    predicted = model(X).argmax(dim=1)
    accuracy = (predicted == labels).float().mean().item()
print(f"labels_one_class: {'images' if args.fixed else 'labels'} divided by 255, {args.steps} "
      f"steps, final loss {loss.item():.4f}, accuracy on the real labels {accuracy:.3f}, "
      f"{predicted.unique().numel()} distinct classes predicted")
