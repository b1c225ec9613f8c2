"""kuangliu/pytorch-cifar's ResNet18 trained as its main.py does: SGD lr 0.1, momentum 0.9, decay 5e-4.

Source: https://github.com/kuangliu/pytorch-cifar/blob/master/models/resnet.py  (BasicBlock and ResNet,
copied unchanged but for the Bottleneck, the other depths and `super()`; MIT licence, (c) 2017 liukuang) and
main.py's optimizer (SGD(lr=0.1, momentum=0.9, weight_decay=5e-4), CosineAnnealingLR(T_max=200) stepped
once an epoch: constant within the steps run here).
Bug: none. Its identity blocks are `out += self.shortcut(x); out = F.relu(out)` with an empty
nn.Sequential as the shortcut, 0.5M to 4.2M values each at this batch: residual blocks large enough to be
read on a sample of rows. lr 0.1 from the first step, with no warmup, moves the weights 2% a step for the
first ~25 steps: BatchNorm's running statistics (momentum 0.1) lag the batches by up to ~1 running std
while the batches agree with one another, and the loss jumps once (~step 20) before it falls to ~0. A
transient of learning, not a failure. The data are generated (no download): CIFAR-shaped 3x32x32 images,
each a fixed per-class pattern plus noise, normalised; batch 64 (main.py's 128, for the step budget).
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): loss 2.38 at step 0, 1.60 at step 20, 0.033 over steps 40-49.
"""
# expect: healthy
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(
            in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3,
                               stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != self.expansion*planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion*planes,
                          kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(self.expansion*planes)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += self.shortcut(x)
        out = F.relu(out)
        return out


class ResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10):
        super().__init__()
        self.in_planes = 64

        self.conv1 = nn.Conv2d(3, 64, kernel_size=3,
                               stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.layer1 = self._make_layer(block, 64, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 128, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 256, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, 512, num_blocks[3], stride=2)
        self.linear = nn.Linear(512*block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1]*(num_blocks-1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = F.avg_pool2d(out, 4)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def ResNet18():
    return ResNet(BasicBlock, [2, 2, 2, 2])


torch.manual_seed(0)
patterns = torch.randn(10, 3, 32, 32)


def batch(n=64):
    y = torch.randint(0, 10, (n,))
    x = patterns[y] + torch.randn(n, 3, 32, 32)
    return (x - x.mean()) / x.std(), y


net = ResNet18()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=200)

net.train()
losses = []
for step in range(args.steps):
    inputs, targets = batch()
    optimizer.zero_grad()
    outputs = net(inputs)
    loss = criterion(outputs, targets)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.3f}")
print(f"loss over the last 10 steps {sum(losses[-10:]) / len(losses[-10:]):.3f}")
