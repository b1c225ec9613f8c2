"""HistAuGAN's attribute encoder, initialised with conv std 0.2 instead of 0.02, blows its log-variance up to inf and the loss to NaN.

Source: https://github.com/sophiajw/HistAuGAN/pull/4 (merged, commit 8317817): "Fixing training crash caused by
"inf"": "Because model weights are initialised with relatively big numbers, training is crashing due to NaN error
(+- inf). Seems like a typo, 0.2 should be changed to the original 0.02."; the fix in histaugan/networks.py,
gaussian_weights_init: `torch.nn.init.normal_(m.weight, 0., 0.2)` -> `torch.nn.init.normal_(m.weight, 0., 0.02)`.
Program: histaugan/networks.py MD_E_attr_concat verbatim (ReflectionPad + 4x4/2 conv, three BasicBlocks without norm,
LeakyReLU(0.2), conv3x3/convMeanpool/meanpoolConv shortcuts, AdaptiveAvgPool, fc -> mu and fcVar -> logvar, nz=8,
num_domains=3 one-hot domain code concatenated to the image), gaussian_weights_init applied to every module as in
model.py (`self.enc_a.apply(networks.gaussian_weights_init)`), reparameterisation `std = exp(logvar*0.5)`,
`z = eps*std + mu`, the KL term as model.py writes it (`kl_element = -(mu^2 + exp(logvar)) + 1 + logvar`,
`loss_kl_za = sum(kl_element) * -0.5 * 0.01`), Adam(lr=0.0001, betas=(0.5, 0.999), weight_decay=0.0001), batch 2.
Bug: with std 0.2 every conv (fan-in 64*9 .. 256*9) multiplies the activation scale by ~5-10, so logvar reaches
hundreds or thousands; exp(logvar) overflows float32 to inf, the KL term is inf and the gradients NaN.
Fix (--fixed): std 0.02 (the merged fix).
Ported: the content encoder, MD_G_multi_concat generator and the three discriminators are replaced by a small decoder
(conv content path + z broadcast and concatenated, as the generator does, 1x1 conv + tanh) trained with the L1
reconstruction loss (weight 10 as in model.py) plus the KL term; crop 216 -> 32, 30 iterations; synthetic "tiles":
smooth random colour fields in [-1, 1] with a domain-dependent colour shift.
Printed metric (plain python): buggy first loss nan, NaN losses 30/30, step-0 max|logvar| 5410; fixed loss
3.926 -> 3.045, 0 NaN, step-0 max|logvar| 0.080.
"""
# expect: cause=initialization
# ruff: noqa: E501
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fixed", action="store_true", help="conv init std 0.02")
args = parser.parse_args()
torch.manual_seed(0)
INIT_STD = 0.02 if args.fixed else 0.2


def conv3x3(in_planes, out_planes):
    return [nn.ReflectionPad2d(1), nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=1, padding=0, bias=True)]


def meanpoolConv(inplanes, outplanes):
    return nn.Sequential(nn.AvgPool2d(kernel_size=2, stride=2),
                         nn.Conv2d(inplanes, outplanes, kernel_size=1, stride=1, padding=0, bias=True))


def convMeanpool(inplanes, outplanes):
    return nn.Sequential(*(conv3x3(inplanes, outplanes) + [nn.AvgPool2d(kernel_size=2, stride=2)]))


class BasicBlock(nn.Module):
    def __init__(self, inplanes, outplanes, norm_layer=None, nl_layer=None):
        super().__init__()
        layers = []
        if norm_layer is not None:
            layers += [norm_layer(inplanes)]
        layers += [nl_layer()]
        layers += conv3x3(inplanes, inplanes)
        if norm_layer is not None:
            layers += [norm_layer(inplanes)]
        layers += [nl_layer()]
        layers += [convMeanpool(inplanes, outplanes)]
        self.conv = nn.Sequential(*layers)
        self.shortcut = meanpoolConv(inplanes, outplanes)

    def forward(self, x):
        return self.conv(x) + self.shortcut(x)


class MD_E_attr_concat(nn.Module):
    def __init__(self, input_dim, output_nc=8, c_dim=3, norm_layer=None, nl_layer=None):
        super().__init__()
        ndf, n_blocks, max_ndf = 64, 4, 4
        conv_layers = [nn.ReflectionPad2d(1)]
        conv_layers += [nn.Conv2d(input_dim + c_dim, ndf, kernel_size=4, stride=2, padding=0, bias=True)]
        for n in range(1, n_blocks):
            input_ndf = ndf * min(max_ndf, n)
            output_ndf = ndf * min(max_ndf, n + 1)
            conv_layers += [BasicBlock(input_ndf, output_ndf, norm_layer, nl_layer)]
        conv_layers += [nl_layer(), nn.AdaptiveAvgPool2d(1)]
        self.fc = nn.Sequential(nn.Linear(output_ndf, output_nc))
        self.fcVar = nn.Sequential(nn.Linear(output_ndf, output_nc))
        self.conv = nn.Sequential(*conv_layers)

    def forward(self, x, c):
        c = c.view(c.size(0), c.size(1), 1, 1).repeat(1, 1, x.size(2), x.size(3))
        x_conv = self.conv(torch.cat([x, c], dim=1))
        conv_flat = x_conv.view(x.size(0), -1)
        return self.fc(conv_flat), self.fcVar(conv_flat)


class Decoder(nn.Module):
    """Stand-in for content encoder + MD_G_multi_concat: content features, z broadcast and concatenated."""
    def __init__(self, input_dim=3, nz=8, c_dim=3, tch=32):
        super().__init__()
        self.enc_c = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(input_dim, tch, 3), nn.LeakyReLU(0.01),
                                   nn.InstanceNorm2d(tch))
        self.dec = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(tch + nz + c_dim, tch, 3), nn.ReLU(),
                                 nn.Conv2d(tch, input_dim, 1), nn.Tanh())

    def forward(self, x, z, c):
        h = self.enc_c(x)
        z_img = z.view(z.size(0), z.size(1), 1, 1).expand(z.size(0), z.size(1), h.size(2), h.size(3))
        c_img = c.view(c.size(0), c.size(1), 1, 1).expand(c.size(0), c.size(1), h.size(2), h.size(3))
        return self.dec(torch.cat([h, c_img, z_img], 1))


def gaussian_weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1 and classname.find('Conv') == 0:
        torch.nn.init.normal_(m.weight, 0., INIT_STD)


nz, num_domains, crop, bs = 8, 3, 32, 2
enc_a = MD_E_attr_concat(3, output_nc=nz, c_dim=num_domains, norm_layer=None,
                         nl_layer=lambda: nn.LeakyReLU(negative_slope=0.2, inplace=False))
gen = Decoder(3, nz, num_domains)
enc_a.apply(gaussian_weights_init)
gen.apply(gaussian_weights_init)
lr = 0.0001
enc_a_opt = torch.optim.Adam(enc_a.parameters(), lr=lr, betas=(0.5, 0.999), weight_decay=0.0001)
gen_opt = torch.optim.Adam(gen.parameters(), lr=lr, betas=(0.5, 0.999), weight_decay=0.0001)

shift = torch.tensor([[0.3, -0.2, 0.1], [-0.3, 0.2, 0.0], [0.0, 0.0, -0.3]])


def batch():
    d = torch.randint(0, num_domains, (bs,))
    base = F.interpolate(torch.randn(bs, 3, 4, 4), size=(crop, crop), mode="bilinear", align_corners=False)
    img = torch.tanh(0.6 * base + shift[d].view(bs, 3, 1, 1) + 0.05 * torch.randn(bs, 3, crop, crop))
    return img, F.one_hot(d, num_domains).float()


losses = []
for it in range(30):
    image, c = batch()
    mu, logvar = enc_a(image, c)
    std = torch.exp(logvar.mul(0.5))
    eps = torch.randn_like(std)
    z_attr = torch.add(eps.mul(std), mu)
    recon = gen(image, z_attr, c)
    loss_l1 = F.l1_loss(recon, image) * 10
    kl_element = torch.add((-torch.add(mu.pow(2), logvar.exp())) + 1, logvar)
    loss_kl_za = torch.sum(kl_element) * (-0.5) * 0.01
    loss = loss_l1 + loss_kl_za
    enc_a_opt.zero_grad()
    gen_opt.zero_grad()
    loss.backward()
    enc_a_opt.step()
    gen_opt.step()
    losses.append(loss.item())
    if it == 0:
        logvar0 = logvar.abs().max().item()

nan = sum(1 for v in losses if v != v)
print(f"init_conv_std02_histaugan: init std={INIT_STD}, first loss {losses[0]:.4g}, last loss {losses[-1]:.4g}, "
      f"NaN losses {nan}/{len(losses)}, step-0 max|logvar| {logvar0:.4g}")
