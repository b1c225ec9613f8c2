"""A U-Net (Nest-of-UNets repository) whose label masks also get Normalize(0.5, 0.5): targets in [-1, 1].

Source: https://github.com/bigmb/Unet-Segmentation-Pytorch-Nest-of-Unets/issues/18  (GitHub issue "Negative
number occur in 'Loss'": "I have found negative number occur in 'Loss' after a few epoches ... because the
bce_withlogitcs is negative"; the reporter: "I have do the augment to mask, which cause mask'value to
[-1, 1]. bce's target should be [0, 1].")
Program: the repository at 3b52146: Models.U_Net (conv_block = 2 x (3x3 conv, BatchNorm, ReLU), four
max-pools, up_conv = Upsample + conv + BN + ReLU, skip concatenation, 1x1 conv, logits); losses.calc_loss
= 0.5 * binary_cross_entropy_with_logits + 0.5 * dice_loss(sigmoid(pred), target); pytorch_run.py:
batch_size 4, shuffled SubsetRandomSampler, Adam(lr=0.001), CosineAnnealingLR(T_max=1e10, eta_min=1e-5)
stepped once an epoch (the lr stays 0.001), images ToTensor + Normalize(0.5, 0.5); label transform
Grayscale + ToTensor (0/1 masks).
Bug: the reporter's mask augmentation ends, like the image transform, in Normalize(mean 0.5, std 0.5), so the
masks are -1 (background) and +1 (object). With a target of -1 the BCE-with-logits term
-(t*log s(x) + (1-t)*log(1-s(x))) decreases without bound as the logit goes to -infinity, and the dice
term rewards predicting 0 on background instead of penalising it: the loss goes negative and the net
learns to push the background logits down without limit.
Fix (--fixed): the repository's label transform (no Normalize on the mask): targets 0/1.
Ported: synthetic 3x64x64 images (1-3 noisy bright ellipses on a random background; mask = ellipses) in
place of the reporter's images (96x96 crops); U_Net filters 8-16-32-64-128 (the repository: 64-...-1024);
6 epochs of 25 batches of 4.
Printed metric (plain python): validation dice of (sigmoid > 0.5) against the 0/1 masks and the last
epoch's training loss: buggy dice 0.228, loss -1.589, predicted foreground 1.000 (true 0.132);
fixed dice 0.834, loss 0.50.
"""
# expect: cause=input_data

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--fixed", action="store_true", help="no Normalize on the label masks")
args = parser.parse_args()

torch.manual_seed(0)


class conv_block(nn.Module):
    def __init__(self, in_ch, out_ch):
        super(conv_block, self).__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=1, padding=1, bias=True),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_ch, out_ch, kernel_size=3, stride=1, padding=1, bias=True),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True))

    def forward(self, x):
        return self.conv(x)


class up_conv(nn.Module):
    def __init__(self, in_ch, out_ch):
        super(up_conv, self).__init__()
        self.up = nn.Sequential(
            nn.Upsample(scale_factor=2),
            nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=1, padding=1, bias=True),
            nn.BatchNorm2d(out_ch),
            nn.ReLU(inplace=True))

    def forward(self, x):
        return self.up(x)


class U_Net(nn.Module):
    def __init__(self, in_ch=3, out_ch=1):
        super(U_Net, self).__init__()
        n1 = 8                                                  # 64 in the repository
        filters = [n1, n1 * 2, n1 * 4, n1 * 8, n1 * 16]
        self.Maxpool1 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.Maxpool2 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.Maxpool3 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.Maxpool4 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.Conv1 = conv_block(in_ch, filters[0])
        self.Conv2 = conv_block(filters[0], filters[1])
        self.Conv3 = conv_block(filters[1], filters[2])
        self.Conv4 = conv_block(filters[2], filters[3])
        self.Conv5 = conv_block(filters[3], filters[4])
        self.Up5 = up_conv(filters[4], filters[3])
        self.Up_conv5 = conv_block(filters[4], filters[3])
        self.Up4 = up_conv(filters[3], filters[2])
        self.Up_conv4 = conv_block(filters[3], filters[2])
        self.Up3 = up_conv(filters[2], filters[1])
        self.Up_conv3 = conv_block(filters[2], filters[1])
        self.Up2 = up_conv(filters[1], filters[0])
        self.Up_conv2 = conv_block(filters[1], filters[0])
        self.Conv = nn.Conv2d(filters[0], out_ch, kernel_size=1, stride=1, padding=0)

    def forward(self, x):
        e1 = self.Conv1(x)
        e2 = self.Conv2(self.Maxpool1(e1))
        e3 = self.Conv3(self.Maxpool2(e2))
        e4 = self.Conv4(self.Maxpool3(e3))
        e5 = self.Conv5(self.Maxpool4(e4))
        d5 = self.Up_conv5(torch.cat((e4, self.Up5(e5)), dim=1))
        d4 = self.Up_conv4(torch.cat((e3, self.Up4(d5)), dim=1))
        d3 = self.Up_conv3(torch.cat((e2, self.Up3(d4)), dim=1))
        d2 = self.Up_conv2(torch.cat((e1, self.Up2(d3)), dim=1))
        return self.Conv(d2)


def dice_loss(prediction, target):
    smooth = 1.0
    i_flat = prediction.view(-1)
    t_flat = target.view(-1)
    intersection = (i_flat * t_flat).sum()
    return 1 - ((2. * intersection + smooth) / (i_flat.sum() + t_flat.sum() + smooth))


def calc_loss(prediction, target, bce_weight=0.5):
    bce = F.binary_cross_entropy_with_logits(prediction, target)
    prediction = torch.sigmoid(prediction)
    dice = dice_loss(prediction, target)
    return bce * bce_weight + dice * (1 - bce_weight)


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
               + 0.15 * torch.randn(3, 64, 64, generator=g)).clamp(0, 1)   # ToTensor range
        imgs.append((img - 0.5) / 0.5)                                     # Normalize(0.5, 0.5)
        masks.append(m.unsqueeze(0))                                       # Grayscale + ToTensor: 0/1
    return torch.stack(imgs), torch.stack(masks)


X, M = make(100, 1)
Xv, Mv = make(40, 2)
if not args.fixed:
    M = (M - 0.5) / 0.5                  # the reporter's mask augmentation: Normalize(0.5, 0.5)
model_test = U_Net(3, 1)
opt = torch.optim.Adam(model_test.parameters(), lr=0.001)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, int(1e10), eta_min=1e-5)
batch_size = 4

for i in range(args.epochs):
    train_loss = 0.0
    model_test.train()
    for idx in torch.randperm(len(X)).split(batch_size):
        x, y = X[idx], M[idx]
        opt.zero_grad()
        y_pred = model_test(x)
        lossT = calc_loss(y_pred, y)
        train_loss += lossT.item() * x.size(0)
        lossT.backward()
        opt.step()
    scheduler.step()
    train_loss = train_loss / len(X)

model_test.eval()
with torch.no_grad():
    pred = (torch.sigmoid(model_test(Xv)) > 0.5).float()
    inter = (pred * Mv).sum((1, 2, 3))
    dice = ((2 * inter + 1e-4) / (pred.sum((1, 2, 3)) + Mv.sum((1, 2, 3)) + 1e-4)).mean().item()
print(f"unet_mask_normalized_nest: last epoch loss {train_loss:.4g}, validation dice {dice:.3f}, "
      f"predicted foreground {pred.mean().item():.3f} (true {Mv.mean().item():.3f})")
