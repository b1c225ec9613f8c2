"""PointNet classification with log_softmax over the batch dimension (dim=0) before nll_loss.

Source: https://github.com/fxia22/pointnet.pytorch/issues/27  (GitHub issue "Confusion about the usage of
log_softmax function": pointnet.py line 104 `return F.log_softmax(x, dim=0), trans`, "dim 0 means the
dimension of batch ... the log_softmax should be applied along the channels"; the maintainer: "This issue is
fixed in latest master branch", dim=1)
Program: pointnet/model.py STN3d + PointNetfeat(global_feat=True, feature_transform=False) + PointNetCls
(fc 1024-512-256-k, dropout 0.3, BatchNorm), utils/train_classification.py: Adam(lr=0.001, betas=(0.9, 0.999)),
StepLR(step_size=20, gamma=0.5) stepped per epoch, F.nll_loss(pred, target), accuracy pred.max(1).
Bug: log_softmax over dim=0: each class column is normalised over the 32 shapes of the batch, not over the
classes; nll_loss then rewards a shape for out-scoring the other shapes of the batch in its own class column.
Fix (--fixed): dim=1, as in the maintainer's fix.
Ported: every width divided by 8 (64->8, 128->16, 1024->128, fc 128-64-32-k), 128 points per cloud instead
of 2500, synthetic 4-class clouds (sphere, cube surface, cylinder, cone) randomly rotated about z, scaled and
jittered, batch 32, 6 epochs of 20 batches.
Printed metric (plain python): test accuracy with the source's pred.max(1) in batches of 32, and classifying
one shape at a time (as show_cls.py / deployment would), and the test nll: buggy 0.988, 0.269, 4.681;
fixed 0.991, 0.991, 0.253.
"""
# ruff: noqa: E501
# expect: cause=architecture
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--fixed", action="store_true", help="log_softmax over dim=1")
args = parser.parse_args()
torch.manual_seed(0)
W = 8  # width divisor


class STN3d(nn.Module):
    def __init__(self):
        super(STN3d, self).__init__()
        self.conv1 = torch.nn.Conv1d(3, 64 // W, 1)
        self.conv2 = torch.nn.Conv1d(64 // W, 128 // W, 1)
        self.conv3 = torch.nn.Conv1d(128 // W, 1024 // W, 1)
        self.fc1 = nn.Linear(1024 // W, 512 // W)
        self.fc2 = nn.Linear(512 // W, 256 // W)
        self.fc3 = nn.Linear(256 // W, 9)
        self.relu = nn.ReLU()
        self.bn1 = nn.BatchNorm1d(64 // W)
        self.bn2 = nn.BatchNorm1d(128 // W)
        self.bn3 = nn.BatchNorm1d(1024 // W)
        self.bn4 = nn.BatchNorm1d(512 // W)
        self.bn5 = nn.BatchNorm1d(256 // W)

    def forward(self, x):
        batchsize = x.size()[0]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, 1024 // W)
        x = F.relu(self.bn4(self.fc1(x)))
        x = F.relu(self.bn5(self.fc2(x)))
        x = self.fc3(x)
        iden = torch.eye(3).flatten().view(1, 9).repeat(batchsize, 1)
        x = x + iden
        return x.view(-1, 3, 3)


class PointNetfeat(nn.Module):
    def __init__(self):
        super(PointNetfeat, self).__init__()
        self.stn = STN3d()
        self.conv1 = torch.nn.Conv1d(3, 64 // W, 1)
        self.conv2 = torch.nn.Conv1d(64 // W, 128 // W, 1)
        self.conv3 = torch.nn.Conv1d(128 // W, 1024 // W, 1)
        self.bn1 = nn.BatchNorm1d(64 // W)
        self.bn2 = nn.BatchNorm1d(128 // W)
        self.bn3 = nn.BatchNorm1d(1024 // W)

    def forward(self, x):
        trans = self.stn(x)
        x = x.transpose(2, 1)
        x = torch.bmm(x, trans)
        x = x.transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        x = torch.max(x, 2, keepdim=True)[0]
        return x.view(-1, 1024 // W), trans


class PointNetCls(nn.Module):
    def __init__(self, k=2):
        super(PointNetCls, self).__init__()
        self.feat = PointNetfeat()
        self.fc1 = nn.Linear(1024 // W, 512 // W)
        self.fc2 = nn.Linear(512 // W, 256 // W)
        self.fc3 = nn.Linear(256 // W, k)
        self.dropout = nn.Dropout(p=0.3)
        self.bn1 = nn.BatchNorm1d(512 // W)
        self.bn2 = nn.BatchNorm1d(256 // W)
        self.relu = nn.ReLU()

    def forward(self, x):
        x, trans = self.feat(x)
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.dropout(self.fc2(x))))
        x = self.fc3(x)
        return F.log_softmax(x, dim=1 if args.fixed else 0), trans


def shapes(n, npts=128):
    labels = torch.randint(0, 4, (n,))
    u = torch.rand(n, npts, 3)
    pts = torch.empty(n, npts, 3)
    for c in range(4):
        m = labels == c
        k = int(m.sum())
        if k == 0:
            continue
        a, b, h = u[m, :, 0] * 2 * math.pi, u[m, :, 1], u[m, :, 2] * 2 - 1
        if c == 0:      # sphere
            v = torch.randn(k, npts, 3)
            p = v / v.norm(dim=2, keepdim=True)
        elif c == 1:    # cube surface
            p = torch.rand(k, npts, 3) * 2 - 1
            ax = torch.randint(0, 3, (k, npts))
            sgn = torch.randint(0, 2, (k, npts)).float() * 2 - 1
            p.scatter_(2, ax.unsqueeze(2), sgn.unsqueeze(2))
        elif c == 2:    # cylinder
            p = torch.stack([torch.cos(a), torch.sin(a), h], 2)
        else:           # cone
            r = (1 - b)
            p = torch.stack([r * torch.cos(a), r * torch.sin(a), b * 2 - 1], 2)
        pts[m] = p
    th = torch.rand(n) * 2 * math.pi
    rot = torch.zeros(n, 3, 3)
    rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1], rot[:, 2, 2] = th.cos(), -th.sin(), th.sin(), th.cos(), 1
    pts = torch.bmm(pts, rot) * (0.8 + 0.4 * torch.rand(n, 1, 1)) + 0.02 * torch.randn(n, npts, 3)
    return pts.transpose(2, 1).contiguous(), labels


train_x, train_y = shapes(640)
test_x, test_y = shapes(320)
classifier = PointNetCls(k=4)
optimizer = torch.optim.Adam(classifier.parameters(), lr=0.001, betas=(0.9, 0.999))
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
bs = 32
for epoch in range(args.epochs):
    perm = torch.randperm(len(train_x))
    for i in range(0, len(train_x), bs):
        idx = perm[i:i + bs]
        points, target = train_x[idx], train_y[idx]
        optimizer.zero_grad()
        classifier = classifier.train()
        pred, trans = classifier(points)
        loss = F.nll_loss(pred, target)
        loss.backward()
        optimizer.step()
    scheduler.step()
    print(f"epoch {epoch} train loss {loss.item():.4f}")

classifier = classifier.eval()
correct = 0
with torch.no_grad():
    for i in range(0, len(test_x), bs):
        pred, _ = classifier(test_x[i:i + bs])
        correct += (pred.data.max(1)[1] == test_y[i:i + bs]).sum().item()
    single = sum(int(classifier(test_x[i:i + 1])[0].exp().max(1)[1].item() == test_y[i].item())
                 for i in range(len(test_x)))
    nll = F.nll_loss(classifier(test_x)[0], test_y).item()
print(f"test accuracy {correct / len(test_x):.3f} (batches of 32); {single / len(test_x):.3f} one shape at a time;"
      f" test nll (all 320 at once) {nll:.3f}")
