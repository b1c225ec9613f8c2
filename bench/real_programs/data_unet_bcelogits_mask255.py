"""A U-Net trained with BCEWithLogitsLoss on PNG masks whose foreground is 255, not 1: the loss runs to -1e7.

Source: https://github.com/milesial/Pytorch-UNet/issues/84  (GitHub issue "loss is negative": "the format
of my mask is PNG, yours are GIF, the loss is negative when I was trainning ... loss (batch)=-9.27e+5 ...
-3.4e+7 ... Validation Dice Coeff: 1.97"; the maintainer: the Dice > 1 means the masks are not loaded as
0/1.  Same cause, BCELoss version: issue #78, "please ensure mask is 0-1, not 0-255".)
Program: milesial/Pytorch-UNet v2 (November 2019): UNet (double 3x3 conv + BatchNorm + ReLU blocks, four
max-pool downs, four bilinear-upsample ups with skip concatenation, 1x1 OutConv, raw logits out);
train_net: criterion nn.BCEWithLogitsLoss() for n_classes == 1, optim.RMSprop(lr=0.1, weight_decay=1e-8),
batch_size 1, shuffled DataLoader.
Bug: the masks reach the loss with foreground 255 (the Carvana GIF masks of the repository are 0/1, the
reporter's PNG masks 0/255). For a target of 255 the per-pixel loss
255*softplus(-x) - 254*softplus(x) = softplus(-x) - 254*x has no minimum: it decreases linearly without
bound as the logit x grows, so the loss runs to minus millions (modern BCELoss refuses such targets;
BCEWithLogitsLoss does not check).
Fix (--fixed): masks scaled to 0/1 (mask / 255).
Ported: synthetic 3x64x64 images with 1-3 bright noisy ellipses as the objects (mask = ellipses) in place
of the car photos; U-Net widths 8-16-32-64-64 (the repository: 64-...-512); 3 epochs of 120 images.
Printed metric (plain python): validation dice of (p > 0.5) against the 0/1 masks and final train loss:
buggy dice 0.228, loss -1.3e6, predicted foreground 1.000 (true 0.132); fixed dice 0.845, loss 0.0079.
"""
# expect: cause=input_data

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--fixed", action="store_true", help="scale the masks to 0/1")
args = parser.parse_args()

torch.manual_seed(0)


class DoubleConv(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, 3, padding=1), nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True),
            nn.Conv2d(out_ch, out_ch, 3, padding=1), nn.BatchNorm2d(out_ch), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.conv(x)


class Down(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.mpconv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_ch, out_ch))

    def forward(self, x):
        return self.mpconv(x)


class Up(nn.Module):
    def __init__(self, in_ch, out_ch):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv = DoubleConv(in_ch, out_ch)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        dy, dx = x2.size(2) - x1.size(2), x2.size(3) - x1.size(3)
        x1 = F.pad(x1, (dx // 2, dx - dx // 2, dy // 2, dy - dy // 2))
        return self.conv(torch.cat([x2, x1], dim=1))


class UNet(nn.Module):
    def __init__(self, n_channels, n_classes, w=8):
        super().__init__()
        self.inc = DoubleConv(n_channels, w)
        self.down1 = Down(w, 2 * w)
        self.down2 = Down(2 * w, 4 * w)
        self.down3 = Down(4 * w, 8 * w)
        self.down4 = Down(8 * w, 8 * w)
        self.up1 = Up(16 * w, 4 * w)
        self.up2 = Up(8 * w, 2 * w)
        self.up3 = Up(4 * w, w)
        self.up4 = Up(2 * w, w)
        self.outc = nn.Conv2d(w, n_classes, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x5 = self.down4(x4)
        x = self.up1(x5, x4)
        x = self.up2(x, x3)
        x = self.up3(x, x2)
        x = self.up4(x, x1)
        x = self.outc(x)
        return x


def make(n, seed):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(64.0), torch.arange(64.0), indexing="ij")
    imgs, masks = [], []
    for _ in range(n):
        m = torch.zeros(64, 64)
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            cy, cx = torch.rand(2, generator=g) * 44 + 10
            ry, rx = torch.rand(2, generator=g) * 10 + 5
            m = torch.maximum(m, (((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1).float())
        base = torch.rand(3, 1, 1, generator=g) * 0.4
        img = (base + 0.45 * m * torch.rand(3, 1, 1, generator=g).add(0.5)
               + 0.15 * torch.randn(3, 64, 64, generator=g))
        imgs.append(img)
        masks.append((m * 255).to(torch.uint8))           # 8-bit mask files: foreground 255
    return torch.stack(imgs), torch.stack(masks).unsqueeze(1)


X, M = make(120, 1)
Xv, Mv = make(40, 2)
net = UNet(n_channels=3, n_classes=1)
optimizer = torch.optim.RMSprop(net.parameters(), lr=0.1, weight_decay=1e-8)
criterion = nn.BCEWithLogitsLoss()
batch_size = 1
losses = []

for epoch in range(args.epochs):
    net.train()
    epoch_loss = 0
    for i in torch.randperm(len(X)).tolist():
        imgs = X[i:i + batch_size]
        true_masks = M[i:i + batch_size].float()
        if args.fixed:
            true_masks = true_masks / 255.
        masks_pred = net(imgs)
        loss = criterion(masks_pred, true_masks)
        epoch_loss += loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

net.eval()
with torch.no_grad():
    pred = (torch.sigmoid(net(Xv)) > 0.5).float()
    truth = (Mv > 0).float()
    inter = (pred * truth).sum((1, 2, 3))
    dice = ((2 * inter + 1e-4) / (pred.sum((1, 2, 3)) + truth.sum((1, 2, 3)) + 1e-4)).mean().item()
print(f"unet_bcelogits_mask255: last epoch loss {epoch_loss / len(X):.4g}, "
      f"validation dice {dice:.3f}, predicted foreground {pred.mean().item():.3f} "
      f"(true {truth.mean().item():.3f})")
