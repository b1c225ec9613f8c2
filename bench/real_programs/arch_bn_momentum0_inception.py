"""Cadene's Inception-v4 trained on a new dataset with BatchNorm momentum 0: the running statistics never move.

Source: https://github.com/Cadene/pretrained-models.pytorch/issues/5  (GitHub issue "BatchNorm momentum
set to 0 in Inception models": "Setting momentum to 0 prevents the running mean and var from being
updated during training. When training one of these models on a different dataset, this causes a
significant discrepancy between train and eval modes."; fixed in commit 5076675 "Fix BN momentum in
inception*": momentum=0 -> momentum=0.1, "default pytorch value")
Program: pretrainedmodels/inceptionv4.py at fd347f4: BasicConv2d = Conv2d(bias=False) ->
BatchNorm2d(eps=0.001, momentum=0, affine=True) -> ReLU; the stem (three BasicConv2d, Mixed_3a, Mixed_4a,
Mixed_5a) and Inception_A blocks, average pool, Linear; trained with the repository's test/imagenet.py
settings (SGD lr 0.1, momentum 0.9, weight decay 1e-4, cross-entropy) and evaluated in eval() mode.
Bug: momentum=0 in every BasicConv2d: in training each batch is normalised with its own statistics, but
the running mean and variance stay at their initial 0 and 1, so eval() normalises with statistics that
have nothing to do with the data.
Fix (--fixed): the commit's, momentum=0.1.
Ported: widths / 8, 2 Inception_A blocks of the 4 (no Reduction/B/C stages), 75x75 inputs (the stem
and Mixed_5a bring them to 7x7 as 299x299 to 35x35), synthetic 10-class textured images normalised
with mean 0.5 and std 0.5 (the model's input settings), batch 32, 120 steps (of 256-image ImageNet
epochs), training from scratch (the same running statistics whether or not ImageNet's were loaded first).
Printed metric (plain python): test accuracy in eval() mode (and in train() mode): buggy 0.105 (1.000);
fixed 1.000 (1.000); the training loss is the same (0.002) in both.
"""
# expect: cause=architecture
# ruff: noqa: E501
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=120)
parser.add_argument("--fixed", action="store_true", help="BatchNorm momentum 0.1")
args = parser.parse_args()

torch.manual_seed(0)
MOMENTUM = 0.1 if args.fixed else 0


class BasicConv2d(nn.Module):
    def __init__(self, in_planes, out_planes, kernel_size, stride, padding=0):
        super(BasicConv2d, self).__init__()
        self.conv = nn.Conv2d(in_planes, out_planes, kernel_size=kernel_size, stride=stride, padding=padding,
                              bias=False)
        self.bn = nn.BatchNorm2d(out_planes, eps=0.001, momentum=MOMENTUM, affine=True)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class Mixed_3a(nn.Module):
    def __init__(self):
        super().__init__()
        self.maxpool = nn.MaxPool2d(3, stride=2)
        self.conv = BasicConv2d(8, 12, kernel_size=3, stride=2)

    def forward(self, x):
        return torch.cat((self.maxpool(x), self.conv(x)), 1)


class Mixed_4a(nn.Module):
    def __init__(self):
        super().__init__()
        self.branch0 = nn.Sequential(BasicConv2d(20, 8, kernel_size=1, stride=1),
                                     BasicConv2d(8, 12, kernel_size=3, stride=1))
        self.branch1 = nn.Sequential(BasicConv2d(20, 8, kernel_size=1, stride=1),
                                     BasicConv2d(8, 8, kernel_size=(1, 7), stride=1, padding=(0, 3)),
                                     BasicConv2d(8, 8, kernel_size=(7, 1), stride=1, padding=(3, 0)),
                                     BasicConv2d(8, 12, kernel_size=(3, 3), stride=1))

    def forward(self, x):
        return torch.cat((self.branch0(x), self.branch1(x)), 1)


class Mixed_5a(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = BasicConv2d(24, 24, kernel_size=3, stride=2)
        self.maxpool = nn.MaxPool2d(3, stride=2)

    def forward(self, x):
        return torch.cat((self.conv(x), self.maxpool(x)), 1)


class Inception_A(nn.Module):
    def __init__(self):
        super().__init__()
        self.branch0 = BasicConv2d(48, 12, kernel_size=1, stride=1)
        self.branch1 = nn.Sequential(BasicConv2d(48, 8, kernel_size=1, stride=1),
                                     BasicConv2d(8, 12, kernel_size=3, stride=1, padding=1))
        self.branch2 = nn.Sequential(BasicConv2d(48, 8, kernel_size=1, stride=1),
                                     BasicConv2d(8, 12, kernel_size=3, stride=1, padding=1),
                                     BasicConv2d(12, 12, kernel_size=3, stride=1, padding=1))
        self.branch3 = nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
                                     BasicConv2d(48, 12, kernel_size=1, stride=1))

    def forward(self, x):
        return torch.cat((self.branch0(x), self.branch1(x), self.branch2(x), self.branch3(x)), 1)


class InceptionV4(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            BasicConv2d(3, 4, kernel_size=3, stride=2),
            BasicConv2d(4, 4, kernel_size=3, stride=1),
            BasicConv2d(4, 8, kernel_size=3, stride=1, padding=1),
            Mixed_3a(), Mixed_4a(), Mixed_5a(), Inception_A(), Inception_A())
        self.classif = nn.Linear(48, num_classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classif(x)


# 10 classes of 75x75 colour textures (a class = an oriented stripe pattern in its own colours), pixels in
# [0, 1], normalised as the model's settings say (mean 0.5, std 0.5)
g = torch.Generator().manual_seed(2)
angles, freqs, colours = torch.rand(10, generator=g) * 3.14, 0.3 + 0.5 * torch.rand(10, generator=g), \
    torch.rand(10, 3, generator=g)


def make(n):
    y = torch.randint(0, 10, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(75.0), torch.arange(75.0), indexing="ij")
    a, f = angles[y].view(n, 1, 1), freqs[y].view(n, 1, 1)
    phase = 6.28 * torch.rand(n, 1, 1, generator=g)
    stripes = 0.5 + 0.5 * torch.sin(f * (xx * torch.cos(a) + yy * torch.sin(a)) + phase)
    img = stripes.unsqueeze(1) * colours[y].view(n, 3, 1, 1) + 0.15 * torch.rand(n, 3, 75, 75, generator=g)
    return (img.clamp(0, 1) - 0.5) / 0.5, y


X, Y = make(2048)
Xt, Yt = make(512)
model = InceptionV4()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
model.train()
for step in range(args.steps):
    idx = torch.randint(0, len(X), (32,), generator=g)
    loss = criterion(model(X[idx]), Y[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

with torch.no_grad():
    model.eval()
    acc_eval = (model(Xt).argmax(1) == Yt).float().mean().item()
    model.train()                       # (batch statistics: what training saw)
    acc_train_mode = (model(Xt).argmax(1) == Yt).float().mean().item()
print(f"arch_bn_momentum0_inception: BatchNorm momentum {MOMENTUM}, {args.steps} steps, last loss {loss.item():.3f}, "
      f"test accuracy in eval() {acc_eval:.3f}, in train() {acc_train_mode:.3f}")
