"""A conv net with BatchNorm after every layer trained on MNIST-like digits with a minibatch of 2.

Source: https://github.com/microsoft/CNTK/issues/905  (GitHub issue "question on MNIST model 03_ConvBatchNorm")
Bug: the MNIST example 03_ConvBatchNorm reaches < 1% error with its default minibatchSize 64, but the
reporter's runs with a tiny minibatch give "no useful result at all (error rate > 50%)", while the same
net without BatchNorm (02_Convolution) trains fine at minibatch 1. The answer: BatchNorm estimates its
statistics from the minibatch and needs a reasonably large one. Ported to PyTorch: conv5x5-BN-ReLU-pool
twice, dense-BN-ReLU, dense; SGD. PyTorch refuses BatchNorm1d on a batch of 1 in training
("Expected more than 1 value per channel"), so the buggy run uses the smallest batch it accepts, 2.
Layer sizes and lr are this port's (the issue does not give the CNTK config); data synthetic: 10 noisy
class templates of 28x28.
Fix (--fixed): the example's default minibatch of 64 (same number of epochs).
Printed metric (plain python): test error in eval mode (running statistics), 0.083 buggy, 0.000 fixed.
"""
# ruff: noqa: E501
# expect: cause=input_data
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--fixed", action="store_true", help="minibatch 64 instead of 2")
args = parser.parse_args()
torch.manual_seed(0)

# synthetic MNIST-like data: smooth class templates plus noise, values in 0..1
templates = torch.nn.functional.avg_pool2d(torch.rand(10, 1, 28, 28), 5, 1, 2)
templates = (templates - templates.amin()) / (templates.amax() - templates.amin())
def make(n):
    y = torch.randint(0, 10, (n,))
    x = (templates[y] + 0.35 * torch.randn(n, 1, 28, 28)).clamp(0, 1)
    return x, y
x_train, y_train = make(1024)
x_test, y_test = make(1000)

model = nn.Sequential(
    nn.Conv2d(1, 16, 5, padding=2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 5, padding=2), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.BatchNorm1d(128), nn.ReLU(),
    nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
bs = 64 if args.fixed else 2

for epoch in range(args.epochs):
    model.train()
    perm = torch.randperm(len(x_train))
    for i in range(0, len(x_train), bs):
        idx = perm[i:i + bs]
        opt.zero_grad()
        loss = loss_fn(model(x_train[idx]), y_train[idx])
        loss.backward()
        opt.step()

model.eval()
with torch.no_grad():
    err = (model(x_test).argmax(1) != y_test).float().mean().item()
print(f"norm_bn_batch2_cntk_mnist: minibatch {bs}, {args.epochs} epochs, test error {err:.3f}")
