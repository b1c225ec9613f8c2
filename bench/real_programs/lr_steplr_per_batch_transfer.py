"""PyTorch's transfer-learning tutorial with its StepLR(step_size=7, gamma=0.1) stepped every batch instead of every epoch.

Source: https://github.com/pytorch/tutorials/pull/640  (merged pull request "Update transfer_learning_tutorial.py":
"scheduler.step() per epoch not per batch", thanked by soumith; the same bug class in
https://github.com/ivadomed/ivadomed/pull/55: "Scheduler was incorrectly stepped in the batch loop instead of
in the epoch loop ... causing the LR to be updated after each batch instead of after each epoch")
Program: beginner_source/transfer_learning_tutorial.py: nn.CrossEntropyLoss, optim.SGD(lr=0.001, momentum=0.9),
lr_scheduler.StepLR(step_size=7, gamma=0.1) ("Decay LR by a factor of 0.1 every 7 epochs"), batch 4,
train/val phases with model.train()/model.eval().
Bug: scheduler.step() inside the batch loop: after 7 batches the LR is 1e-4, after 70 batches 1e-13: training
stops in the first epoch.
Fix (--fixed): scheduler.step() once per epoch, after the batch loop (the PR's).
Ported: a small conv net trained from scratch stands for the ImageNet-pretrained ResNet-18 (no weights here);
synthetic 2-class 16x16 images (ants/bees stand-in: a bright blob in the upper or lower half, with
noise and a random column), 240 training images (hymenoptera has 244: 60 batches an epoch), 100 val images,
5 epochs (the source 25).
Printed metric (plain python): val accuracy and train loss per epoch, the last LR.
"""
# ruff: noqa: E501
# expect: cause=learning_rate
import argparse

import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim import lr_scheduler

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--fixed", action="store_true", help="step the scheduler once per epoch")
args = parser.parse_args()
torch.manual_seed(0)


def make(n):
    y = torch.randint(0, 2, (n,))
    x = 0.5 * torch.randn(n, 3, 16, 16)
    col = torch.randint(2, 14, (n,))
    for i in range(n):
        r0 = 2 if y[i] == 0 else 10
        x[i, :, r0:r0 + 4, col[i] - 2:col[i] + 2] += 1.5
    return x, y


xs, ys = make(240)
xv, yv = make(100)

model_ft = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Linear(32, 2))
criterion = nn.CrossEntropyLoss()
optimizer_ft = optim.SGD(model_ft.parameters(), lr=0.001, momentum=0.9)
exp_lr_scheduler = lr_scheduler.StepLR(optimizer_ft, step_size=7, gamma=0.1)

for epoch in range(args.epochs):
    for phase in ["train", "val"]:
        model_ft.train() if phase == "train" else model_ft.eval()
        x, y = (xs, ys) if phase == "train" else (xv, yv)
        perm = torch.randperm(len(x)) if phase == "train" else torch.arange(len(x))
        running_loss, running_corrects = 0.0, 0
        for i in range(0, len(x), 4):
            inputs, labels = x[perm[i:i + 4]], y[perm[i:i + 4]]
            optimizer_ft.zero_grad()
            with torch.set_grad_enabled(phase == "train"):
                outputs = model_ft(inputs)
                _, preds = torch.max(outputs, 1)
                loss = criterion(outputs, labels)
                if phase == "train":
                    loss.backward()
                    optimizer_ft.step()
                    if not args.fixed:
                        exp_lr_scheduler.step()      # the bug: once per batch
            running_loss += loss.item() * inputs.size(0)
            running_corrects += torch.sum(preds == labels.data).item()
        if phase == "train" and args.fixed:
            exp_lr_scheduler.step()
        print(f"epoch {epoch} {phase} loss {running_loss / len(x):.4f} acc {running_corrects / len(x):.3f}")
print(f"final lr {optimizer_ft.param_groups[0]['lr']:.3g}")
