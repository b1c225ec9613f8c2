"""A 20-class U-Net whose integer label masks (0..18) are divided by 255 in preprocessing: every target is 0.

Source: https://github.com/milesial/Pytorch-UNet/issues/228  (GitHub issue "My imput mask is 0": KITTI
masks with pixel values 0 to 18, net.n_classes = 20, CrossEntropyLoss; "when I use this code to train, the
predict result is 0 ... in train.py ... My true mask_type is all 0, before line 75, the value is pixel
value/255". Answer: "In dataset.py the images are normalized: `if img_trans.max() > 1: img_trans =
img_trans / 255` ... If your masks include values over 1 ... the masks also get normalized and rounded to
zero.")
Program: milesial/Pytorch-UNet of October 2020: BasicDataset.preprocess (HWC -> CHW, divide by 255 when
max > 1, applied to images and masks alike); UNet (double 3x3 conv + BatchNorm + ReLU, four max-pool downs,
four bilinear ups with skips, 1x1 OutConv, logits); train_net: nn.CrossEntropyLoss() for n_classes > 1,
optim.RMSprop(lr=0.0001 (the -l default), weight_decay=1e-8, momentum=0.9), batch_size 1, shuffled,
`true_masks.to(dtype=torch.long)` (plus the reporter's `true_masks.squeeze(1)`),
nn.utils.clip_grad_value_(net.parameters(), 0.1).
Bug: preprocess divides the 0..18 label mask by 255 too, and the cast to long truncates every value below
1 to class 0: the net is trained to output class 0 everywhere and learns it perfectly (loss -> 0).
Fix (--fixed): the mask is not scaled (later versions of the repository preprocess masks separately).
Ported: synthetic 3x64x64 "street scenes" (sky 10 on top, building 2 / vegetation 8 blocks, sidewalk 1,
road 0 at the bottom, cars 13 on the road), each class its own colour plus noise, in place of KITTI;
U-Net widths 8-16-32-64-64 (the repository: 64-...-512); 2 epochs of 150 images; the ReduceLROnPlateau
on the validation score is left out (no validation rounds).
Printed metric (plain python): pixel accuracy and mean IoU over the 6 classes present, validation:
buggy accuracy 0.298, mean IoU 0.050, only class 0 predicted (class 0 covers ~30% of the pixels);
fixed accuracy 0.983, mean IoU 0.801.
"""
# expect: cause=input_data

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--fixed", action="store_true", help="do not divide the label mask by 255")
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


CLASSES = [0, 1, 2, 8, 10, 13]          # road, sidewalk, building, vegetation, sky, car (KITTI ids)


def make(n, seed):
    colours = {c: torch.rand(3, generator=torch.Generator().manual_seed(100 + c)) for c in CLASSES}
    g = torch.Generator().manual_seed(seed)
    imgs, masks = [], []
    for _ in range(n):
        m = torch.full((64, 64), 10, dtype=torch.uint8)                    # sky
        horizon = int(torch.randint(14, 24, (1,), generator=g))
        ground = int(torch.randint(36, 44, (1,), generator=g))
        x = 0
        while x < 64:                                                      # buildings / trees
            w = int(torch.randint(6, 16, (1,), generator=g))
            top = int(torch.randint(4, horizon, (1,), generator=g))
            m[top:ground, x:x + w] = 2 if torch.rand(1, generator=g) < 0.5 else 8
            x += w
        m[ground:ground + 4] = 1                                           # sidewalk
        m[ground + 4:] = 0                                                 # road
        for _ in range(int(torch.randint(0, 3, (1,), generator=g))):       # cars
            cx = int(torch.randint(0, 52, (1,), generator=g))
            cy = int(torch.randint(ground + 4, 58, (1,), generator=g))
            m[cy:cy + 6, cx:cx + 12] = 13
        img = torch.zeros(3, 64, 64)
        for c in CLASSES:
            img += (m == c).float() * colours[c].view(3, 1, 1)
        img = (img + 0.15 * torch.randn(3, 64, 64, generator=g)).clamp(0, 1)
        imgs.append((img * 255).round())                                   # 8-bit image
        masks.append(m)                                                    # 8-bit label png, values 0..18
    return torch.stack(imgs), torch.stack(masks).unsqueeze(1)


def preprocess(t, is_mask):
    # BasicDataset.preprocess: HWC -> CHW (already CHW here), then `if img_trans.max() > 1: / 255`
    t = t.float()
    if args.fixed and is_mask:
        return t
    if t.max() > 1:
        t = t / 255
    return t


X, M = make(150, 1)
Xv, Mv = make(50, 2)
net = UNet(n_channels=3, n_classes=20)
optimizer = torch.optim.RMSprop(net.parameters(), lr=0.0001, weight_decay=1e-8, momentum=0.9)
criterion = nn.CrossEntropyLoss()

for epoch in range(args.epochs):
    net.train()
    epoch_loss = 0
    for i in torch.randperm(len(X)).tolist():
        imgs = preprocess(X[i:i + 1], False)
        true_masks = preprocess(M[i:i + 1], True)
        true_masks = true_masks.to(dtype=torch.long)
        masks_pred = net(imgs)
        true_masks = true_masks.squeeze(1)
        loss = criterion(masks_pred, true_masks)
        epoch_loss += loss.item()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_value_(net.parameters(), 0.1)
        optimizer.step()

net.eval()
with torch.no_grad():
    pred = net(preprocess(Xv, False)).argmax(1)
    truth = Mv.squeeze(1).long()
    acc = (pred == truth).float().mean().item()
    ious = []
    for c in CLASSES:
        inter = ((pred == c) & (truth == c)).sum().item()
        union = ((pred == c) | (truth == c)).sum().item()
        ious.append(inter / union if union else 0.0)
print(f"unet_mask_div255_kitti: last epoch loss {epoch_loss / len(X):.4g}, pixel accuracy {acc:.3f}, "
      f"mean IoU {sum(ious) / len(ious):.3f}, predicted classes {sorted(set(pred.unique().tolist()))}")
