"""A siamese patch-similarity network whose training loop lost its loss.backward(): it never learns.

Source: https://github.com/aalto-intelligent-robotics/sivl/issues/2  (GitHub issue, fixed by the author)
Bug: the loop does `optimizer.zero_grad()`, runs BranchNet on anchor / positive / negative images and
DecisionNet on (anchor, positive) and (anchor, negative), computes `BCELoss(reduction='none')` against
ones / zeros, and calls `optimizer.step()` -- but the `loss.backward()` line was deleted while cleaning up
the code, so no gradient ever reaches the parameters and Adam leaves them unchanged: the loss stays at
its initial value (~0.69) for the whole run.
Fix (--fixed): `loss.mean().backward()` before `optimizer.step()`, the line the author restored.
Port: BranchNet / DecisionNet as in code/models/orthosimilarity.py, with every width divided by 8
(96/192/256 conv channels -> 12/24/32, 512 hidden -> 64) to fit a CPU run; Adam(lr=1e-5, betas=(0.9,
0.999), eps=1e-8, weight_decay=1e-8) as in the source; 100x100 RGB crops in 0..1 (ToTensor).
Printed metric (plain python): buggy loss 0.6937 -> 0.6937, match accuracy 0.500; fixed loss
0.6935 -> 0.6931, match accuracy 0.668 (the source's lr=1e-5 is slow by design).
"""
# expect: cause=training_loop
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=150)
parser.add_argument("--fixed", action="store_true", help="call loss.backward() before optimizer.step()")
args = parser.parse_args()

torch.manual_seed(0)


class BranchNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 12, kernel_size=7, stride=3)
        self.relu1 = nn.ReLU()
        self.maxpool1 = nn.MaxPool2d(kernel_size=2)
        self.conv2 = nn.Conv2d(12, 24, kernel_size=5, stride=1)
        self.relu2 = nn.ReLU()
        self.maxpool2 = nn.MaxPool2d(kernel_size=2)
        self.conv3 = nn.Conv2d(24, 32, kernel_size=3, stride=1)
        self.relu3 = nn.ReLU()
        self.adaptivemaxpool = nn.AdaptiveMaxPool2d(output_size=8)

    def forward(self, x):
        x = self.maxpool1(self.relu1(self.conv1(x)))
        x = self.maxpool2(self.relu2(self.conv2(x)))
        x = self.adaptivemaxpool(self.relu3(self.conv3(x)))
        return torch.flatten(x, 1)


class DecisionNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(8 * 8 * 32 * 2, 64)
        self.relu = nn.ReLU()
        self.linear2 = nn.Linear(64, 1)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x1, x2):
        x = torch.cat((x1, x2), dim=1)
        return self.sigmoid(self.linear2(self.relu(self.linear1(x))))


# Triplets of 100x100 crops: the positive is the anchor's scene, shifted by a few pixels and re-lit
# (the source perturbs homography / rotation / translation / brightness), the negative another scene.
n_scenes, size = 256, 100
scenes = torch.rand(n_scenes, 3, size + 8, size + 8)
scenes = torch.nn.functional.avg_pool2d(scenes, 5, stride=1, padding=2)   # some spatial structure


def batch(n):
    a_idx = torch.randint(0, n_scenes, (n,))
    n_idx = (a_idx + torch.randint(1, n_scenes, (n,))) % n_scenes
    dx, dy = torch.randint(0, 9, (2,)).tolist()
    anchor = scenes[a_idx, :, 4:4 + size, 4:4 + size]
    positive = scenes[a_idx, :, dy:dy + size, dx:dx + size] * (0.9 + 0.2 * torch.rand(n, 1, 1, 1))
    negative = scenes[n_idx, :, 4:4 + size, 4:4 + size]
    return anchor, positive.clamp(0, 1), negative


branchmodel = BranchNet()
decisionmodel = DecisionNet()
optimizer = torch.optim.Adam(list(branchmodel.parameters()) + list(decisionmodel.parameters()),
                             lr=0.00001, betas=(0.9, 0.999), eps=1e-08, weight_decay=1e-8)
criterion = torch.nn.BCELoss(reduction="none")

losses = []
for _ in range(args.steps):
    anchorImage, positiveImage, negativeImage = batch(16)
    optimizer.zero_grad()
    anc = branchmodel(anchorImage)
    pos = branchmodel(positiveImage)
    neg = branchmodel(negativeImage)
    ancToPos = decisionmodel(anc, pos)
    ancToNeg = decisionmodel(anc, neg)
    samples = torch.cat((ancToPos, ancToNeg))
    targets = torch.cat((torch.ones_like(ancToPos), torch.zeros_like(ancToNeg)))
    loss = criterion(samples, targets)
    losses.append(loss.mean().item())
    if args.fixed:
        loss.mean().backward()
    optimizer.step()

with torch.no_grad():
    a, p, n = batch(128)
    anc = branchmodel(a)
    s_pos, s_neg = decisionmodel(anc, branchmodel(p)), decisionmodel(anc, branchmodel(n))
    acc = ((s_pos > 0.5).float().mean() + (s_neg < 0.5).float().mean()).item() / 2
print(f"loop_missing_backward_siamese: {'with' if args.fixed else 'without'} loss.backward(), "
      f"{args.steps} steps, first-10 loss {sum(losses[:10]) / 10:.4f}, last-10 loss "
      f"{sum(losses[-10:]) / 10:.4f}, match accuracy {acc:.3f}")
