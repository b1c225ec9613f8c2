"""SfMLearner (unsupervised depth and ego-motion) with a learning-rate scheduler stepped instead of the optimizer.

Source: https://github.com/ClementPinard/SfmLearner-Pytorch/issues/5  (GitHub issue "Help to add a
learning rate scheduler": "the loss doesn't come down if I use the scheduler"; the maintainer's answer:
the reporter's train loop did `if scheduler: scheduler.step() else: optimizer.step()`, and
"scheduler.step() only changes learning rate, but does not perform optimizer step. You also have to
call optimizer.step(), regardless of the fact that you use scheduler or not"; the reporter: "It's
working now")
Program: the repository at aff5dd7 (the issue's date): DispNetS (7 stride-2 conv pairs, 7 up-convs with
skips, 4 disparity scales, 10 * sigmoid + 0.01) and PoseExpNet (7 stride-2 convs, pose = 0.01 * mean of a
1x1 conv, explainability masks from up-convs), Xavier-uniform init, one Adam over both (betas 0.9,
0.999); loss = photometric reconstruction (inverse warp of the two reference frames with the predicted
depth and pose, L1 weighted by the masks, over 4 scales) + 1.0 * mask BCE against 1 + 0.1 * second-order
disparity smoothness, the reporter's command (`-m 1.0 -s 0.1 --sequence-length 3 --lr 2e-4`).
Bug: the scheduler steps, the optimizer never does; gradients are computed and zeroed every step.
Fix (--fixed): the maintainer's: `scheduler.step()` and then `optimizer.step()` every iteration.
Ported: every width divided by 4 and frames of 32x104 (KITTI's 128x416 / 4, intrinsics scaled alike);
batch 8 (the reporter's 48); the attached scheduler is not stored, so StepLR(step_size=100, gamma=0.5)
stands for `--scheduler step`; synthetic 3-frame sequences rendered exactly: a textured tilted plane 4 to
8 m away, the camera moving forward 0.2 to 0.5 m a frame; F.interpolate / grid_sample(align_corners=True)
for the 2017 upsample / grid_sample; 150 iterations.
Printed metric (plain python): total loss and unmasked full-scale reconstruction error, mean of the
first 20 iterations -> mean of the last 20: buggy 3.790 -> 3.795 and 0.095 -> 0.098 (nothing moves);
fixed 3.611 -> 1.492 and 0.094 -> 0.075.
"""
# expect: cause=training_loop
# ruff: noqa: E501
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--iterations", type=int, default=150)
parser.add_argument("--fixed", action="store_true", help="call optimizer.step() as well as scheduler.step()")
args = parser.parse_args()

torch.manual_seed(0)
H, W, B = 32, 104, 8
K = torch.tensor([[60.3, 0.0, 52.0], [0.0, 61.3, 16.0], [0.0, 0.0, 1.0]])


# ---- data: a textured plane Z = z0 + a*Y + b*X seen from three camera centres on the Z axis ----
def render(center, z0, a, b, phase, freq):
    v, u = torch.meshgrid(torch.arange(H).float(), torch.arange(W).float(), indexing="ij")
    r = torch.linalg.inv(K) @ torch.stack([u.flatten(), v.flatten(), torch.ones(H * W)])   # rays, r_z = 1
    s = (z0 + a * center[1] + b * center[0] - center[2]) / (r[2] - a * r[1] - b * r[0])
    p = center[:, None] + s * r
    img = torch.stack([0.5 + 0.2 * torch.sin(freq[k, 0] * p[0] + phase[k]) +
                       0.2 * torch.sin(freq[k, 1] * p[1] + 2 * phase[k]) for k in range(3)])
    return img.reshape(3, H, W)


def make_batch(n):
    tgt, refs = [], [[], []]
    for _ in range(n):
        z0, a, b = 4 + 4 * torch.rand(1), 0.6 * (torch.rand(1) - 0.5), 0.3 * (torch.rand(1) - 0.5)
        phase, freq = 6.28 * torch.rand(3), 2 + 4 * torch.rand(3, 2)
        step = 0.2 + 0.3 * torch.rand(1)
        tgt.append(render(torch.zeros(3), z0, a, b, phase, freq))
        refs[0].append(render(torch.tensor([0.0, 0.0, -1.0]) * step, z0, a, b, phase, freq))
        refs[1].append(render(torch.tensor([0.0, 0.0, 1.0]) * step, z0, a, b, phase, freq))
    return torch.stack(tgt), [torch.stack(r) for r in refs]


# ---- models/DispNetS.py and models/PoseExpNet.py, widths / 4 ----
def downsample_conv(i, o, k=3):
    return nn.Sequential(nn.Conv2d(i, o, k, stride=2, padding=(k - 1) // 2), nn.ReLU(inplace=True),
                         nn.Conv2d(o, o, k, padding=(k - 1) // 2), nn.ReLU(inplace=True))


def predict_disp(i):
    return nn.Sequential(nn.Conv2d(i, 1, 3, padding=1), nn.Sigmoid())


def conv(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.ReLU(inplace=True))


def upconv(i, o):
    return nn.Sequential(nn.ConvTranspose2d(i, o, 3, stride=2, padding=1, output_padding=1), nn.ReLU(inplace=True))


def crop_like(x, ref):
    return x[:, :, :ref.size(2), :ref.size(3)]


def init_weights(net):
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                m.bias.data.zero_()


class DispNetS(nn.Module):
    def __init__(self, alpha=10, beta=0.01):
        super().__init__()
        self.alpha, self.beta = alpha, beta
        c = [8, 16, 32, 64, 128, 128, 128]
        u = [128, 128, 64, 32, 16, 8, 4]
        self.conv1, self.conv2 = downsample_conv(3, c[0], 7), downsample_conv(c[0], c[1], 5)
        self.conv3, self.conv4 = downsample_conv(c[1], c[2]), downsample_conv(c[2], c[3])
        self.conv5, self.conv6 = downsample_conv(c[3], c[4]), downsample_conv(c[4], c[5])
        self.conv7 = downsample_conv(c[5], c[6])
        self.upconv7, self.upconv6 = upconv(c[6], u[0]), upconv(u[0], u[1])
        self.upconv5, self.upconv4 = upconv(u[1], u[2]), upconv(u[2], u[3])
        self.upconv3, self.upconv2 = upconv(u[3], u[4]), upconv(u[4], u[5])
        self.upconv1 = upconv(u[5], u[6])
        self.iconv7, self.iconv6 = conv(u[0] + c[5], u[0]), conv(u[1] + c[4], u[1])
        self.iconv5, self.iconv4 = conv(u[2] + c[3], u[2]), conv(u[3] + c[2], u[3])
        self.iconv3, self.iconv2 = conv(1 + u[4] + c[1], u[4]), conv(1 + u[5] + c[0], u[5])
        self.iconv1 = conv(1 + u[6], u[6])
        self.predict_disp4, self.predict_disp3 = predict_disp(u[3]), predict_disp(u[4])
        self.predict_disp2, self.predict_disp1 = predict_disp(u[5]), predict_disp(u[6])

    def forward(self, x):
        up = lambda t: F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False)  # noqa: E731
        c1 = self.conv1(x); c2 = self.conv2(c1); c3 = self.conv3(c2); c4 = self.conv4(c3)  # noqa: E702
        c5 = self.conv5(c4); c6 = self.conv6(c5); c7 = self.conv7(c6)  # noqa: E702
        i7 = self.iconv7(torch.cat((crop_like(self.upconv7(c7), c6), c6), 1))
        i6 = self.iconv6(torch.cat((crop_like(self.upconv6(i7), c5), c5), 1))
        i5 = self.iconv5(torch.cat((crop_like(self.upconv5(i6), c4), c4), 1))
        i4 = self.iconv4(torch.cat((crop_like(self.upconv4(i5), c3), c3), 1))
        disp4 = self.alpha * self.predict_disp4(i4) + self.beta
        i3 = self.iconv3(torch.cat((crop_like(self.upconv3(i4), c2), c2, crop_like(up(disp4), c2)), 1))
        disp3 = self.alpha * self.predict_disp3(i3) + self.beta
        i2 = self.iconv2(torch.cat((crop_like(self.upconv2(i3), c1), c1, crop_like(up(disp3), c1)), 1))
        disp2 = self.alpha * self.predict_disp2(i2) + self.beta
        i1 = self.iconv1(torch.cat((crop_like(self.upconv1(i2), x), crop_like(up(disp2), x)), 1))
        disp1 = self.alpha * self.predict_disp1(i1) + self.beta
        return disp1, disp2, disp3, disp4


def pconv(i, o, k=3):
    return nn.Sequential(nn.Conv2d(i, o, k, padding=(k - 1) // 2, stride=2), nn.ReLU(inplace=True))


def pupconv(i, o):
    return nn.Sequential(nn.ConvTranspose2d(i, o, 4, stride=2, padding=1), nn.ReLU(inplace=True))


class PoseExpNet(nn.Module):
    def __init__(self, nb_ref_imgs=2):
        super().__init__()
        self.nb_ref_imgs = nb_ref_imgs
        c = [4, 8, 16, 32, 64, 64, 64]
        u = [64, 32, 16, 8, 4]
        self.conv1, self.conv2 = pconv(3 * (1 + nb_ref_imgs), c[0], 7), pconv(c[0], c[1], 5)
        self.conv3, self.conv4, self.conv5 = pconv(c[1], c[2]), pconv(c[2], c[3]), pconv(c[3], c[4])
        self.conv6, self.conv7 = pconv(c[4], c[5]), pconv(c[5], c[6])
        self.pose_pred = nn.Conv2d(c[6], 6 * nb_ref_imgs, 1)
        self.upconv5, self.upconv4 = pupconv(c[4], u[0]), pupconv(u[0], u[1])
        self.upconv3, self.upconv2, self.upconv1 = pupconv(u[1], u[2]), pupconv(u[2], u[3]), pupconv(u[3], u[4])
        self.predict_mask4 = nn.Conv2d(u[1], nb_ref_imgs, 3, padding=1)
        self.predict_mask3 = nn.Conv2d(u[2], nb_ref_imgs, 3, padding=1)
        self.predict_mask2 = nn.Conv2d(u[3], nb_ref_imgs, 3, padding=1)
        self.predict_mask1 = nn.Conv2d(u[4], nb_ref_imgs, 3, padding=1)

    def forward(self, target_image, ref_imgs):
        x = torch.cat([target_image] + ref_imgs, 1)
        c1 = self.conv1(x); c2 = self.conv2(c1); c3 = self.conv3(c2); c4 = self.conv4(c3)  # noqa: E702
        c5 = self.conv5(c4); c6 = self.conv6(c5); c7 = self.conv7(c6)  # noqa: E702
        u5 = self.upconv5(c5)[:, :, :c4.size(2), :c4.size(3)]
        u4 = self.upconv4(u5)[:, :, :c3.size(2), :c3.size(3)]
        u3 = self.upconv3(u4)[:, :, :c2.size(2), :c2.size(3)]
        u2 = self.upconv2(u3)[:, :, :c1.size(2), :c1.size(3)]
        u1 = self.upconv1(u2)[:, :, :x.size(2), :x.size(3)]
        pose = self.pose_pred(c7).mean(3).mean(2)
        pose = 0.01 * pose.view(pose.size(0), self.nb_ref_imgs, 6)
        masks = [torch.sigmoid(self.predict_mask1(u1)), torch.sigmoid(self.predict_mask2(u2)),
                 torch.sigmoid(self.predict_mask3(u3)), torch.sigmoid(self.predict_mask4(u4))]
        return masks, pose


# ---- inverse_warp.py and loss_functions.py ----
def euler2mat(z, y, x):
    Bn = z.size(0)
    zeros, ones = z.detach() * 0, z.detach() * 0 + 1
    zmat = torch.stack([z.cos(), -z.sin(), zeros, z.sin(), z.cos(), zeros, zeros, zeros, ones], 1).view(Bn, 3, 3)
    ymat = torch.stack([y.cos(), zeros, y.sin(), zeros, ones, zeros, -y.sin(), zeros, y.cos()], 1).view(Bn, 3, 3)
    xmat = torch.stack([ones, zeros, zeros, zeros, x.cos(), -x.sin(), zeros, x.sin(), x.cos()], 1).view(Bn, 3, 3)
    return xmat.bmm(ymat).bmm(zmat)


def inverse_warp(img, depth, pose, intrinsics, intrinsics_inv):
    b, _, h, w = img.size()
    v, u = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    pix = torch.stack((u, v, torch.ones(h, w))).view(1, 3, -1).expand(b, 3, h * w)
    cam = intrinsics_inv.bmm(pix) * depth.view(b, 1, -1)                     # pixel2cam
    pose_mat = torch.cat([euler2mat(pose[:, 5], pose[:, 4], pose[:, 3]), pose[:, :3].unsqueeze(-1)], 2)
    proj = intrinsics.bmm(pose_mat)
    pc = proj[:, :, :3].bmm(cam) + proj[:, :, 3:]                            # cam2pixel
    Z = pc[:, 2].clamp(min=1e-3)
    X_norm = 2 * (pc[:, 0] / Z) / (w - 1) - 1
    X_norm[(X_norm > 1) | (X_norm < -1)] *= 2
    Y_norm = 2 * (pc[:, 1] / Z) / (h - 1) - 1
    Y_norm[(Y_norm > 1) | (Y_norm < -1)] *= 2
    grid = torch.stack([X_norm, Y_norm], dim=2).view(b, h, w, 2)
    return F.grid_sample(img, grid, align_corners=True)


def photometric_reconstruction_loss(tgt_img, ref_imgs, intrinsics, intrinsics_inv, depth, masks, pose):
    loss = 0
    for d, mask in zip(depth, masks):
        b, _, h, w = d.size()
        downscale = tgt_img.size(2) / h
        tgt_s = F.adaptive_avg_pool2d(tgt_img, (h, w))
        refs_s = [F.adaptive_avg_pool2d(r, (h, w)) for r in ref_imgs]
        k_s = torch.cat((intrinsics[:, 0:2] / downscale, intrinsics[:, 2:]), dim=1)
        kinv_s = torch.cat((intrinsics_inv[:, :, 0:2] * downscale, intrinsics_inv[:, :, 2:]), dim=2)
        for i, ref in enumerate(refs_s):
            warped = inverse_warp(ref, d[:, 0], pose[:, i], k_s, kinv_s)
            loss = loss + ((tgt_s - warped) * mask[:, i:i + 1].expand_as(tgt_s)).abs().mean()
    return loss


def explainability_loss(masks):
    return sum(F.binary_cross_entropy(m, torch.ones_like(m)) for m in masks)


def smooth_loss(pred_disp):
    def gradient(p):
        return p[:, :, :, 1:] - p[:, :, :, :-1], p[:, :, 1:] - p[:, :, :-1]
    loss, weight = 0, 1.0
    for d in pred_disp:
        dx, dy = gradient(d)
        dx2, dxdy = gradient(dx)
        dydx, dy2 = gradient(dy)
        loss = loss + (dx2.abs().mean() + dxdy.abs().mean() + dydx.abs().mean() + dy2.abs().mean()) * weight
        weight /= 2
    return loss


disp_net, pose_exp_net = DispNetS(), PoseExpNet()
init_weights(disp_net)
init_weights(pose_exp_net)
parameters = list(disp_net.parameters()) + list(pose_exp_net.parameters())
optimizer = torch.optim.Adam(parameters, 2e-4, betas=(0.9, 0.999), weight_decay=0)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)
w1, w2, w3 = 1.0, 1.0, 0.1
intrinsics, intrinsics_inv = K.expand(B, 3, 3), torch.linalg.inv(K).expand(B, 3, 3)
disp_net.train()
pose_exp_net.train()

photo, total = [], []
for it in range(args.iterations):
    tgt_img, ref_imgs = make_batch(B)
    disparities = disp_net(tgt_img)
    depth = [1 / disp for disp in disparities]
    explainability_mask, pose = pose_exp_net(tgt_img, ref_imgs)
    loss_1 = photometric_reconstruction_loss(tgt_img, ref_imgs, intrinsics, intrinsics_inv, depth,
                                             explainability_mask, pose)
    loss_2 = explainability_loss(explainability_mask)
    loss_3 = smooth_loss(disparities)
    loss = w1 * loss_1 + w2 * loss_2 + w3 * loss_3
    total.append(loss.item())
    with torch.no_grad():             # the metric: unmasked L1 reconstruction error at full scale
        photo.append(sum((tgt_img - inverse_warp(r, depth[0][:, 0], pose[:, i], intrinsics, intrinsics_inv))
                         .abs().mean().item() for i, r in enumerate(ref_imgs)) / 2)

    optimizer.zero_grad()
    loss.backward()
    if args.fixed:
        scheduler.step()
        optimizer.step()
    else:
        if scheduler:                 # the reporter's loop
            scheduler.step()
        else:
            optimizer.step()

first, last = sum(photo[:20]) / 20, sum(photo[-20:]) / 20
print(f"loop_scheduler_not_optimizer_sfm: {'scheduler and optimizer step' if args.fixed else 'scheduler steps alone'}"
      f", {args.iterations} iterations, unmasked reconstruction error {first:.3f} -> {last:.3f}, total loss {sum(total[:20]) / 20:.3f} -> {sum(total[-20:]) / 20:.3f}")
