"""A vanilla MLP GAN on 28x28 synthetic digit-like images: two optimizers, losses that see-saw.

Source: https://github.com/eriklindernoren/PyTorch-GAN/blob/master/implementations/gan/gan.py  (popular
GAN course/reference repository, the vanilla GAN on MNIST)
Bug: none. G and D each have their own Adam (lr 2e-4, betas (0.5, 0.999)); G is stepped first against
D, then D on real vs detached fakes. The losses never settle: d_loss and g_loss trade places around
ln 2 as the two players push against each other, and G's BatchNorm1d is built with eps=0.8 (the
source's `nn.BatchNorm1d(out_feat, 0.8)`), all as in the source.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): mean absolute distance between the generated and the real mean image
0.778 -> 0.400 after 100 steps (0.362 after 150, 0.204 after 400); D(real) 0.75, D(fake) 0.45, D loss
0.457, G loss 0.880. 100 steps (the source runs 200 epochs) to keep the run short: one step is G + D
on batch 64.
"""
# expect: healthy
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(0)

latent_dim, img_size, channels, batch_size = 100, 28, 1, 64
img_shape = (channels, img_size, img_size)


def make_digits(n):
    """MNIST-like 28x28 images scaled to [-1, 1] (as Normalize([0.5], [0.5])): a dark background with
    one thick bright stroke, a vertical bar or a ring, at a jittered position."""
    yy, xx = torch.meshgrid(torch.arange(img_size).float(), torch.arange(img_size).float(), indexing="ij")
    cx = 14 + 3 * (torch.rand(n, 1, 1) - 0.5)
    cy = 14 + 3 * (torch.rand(n, 1, 1) - 0.5)
    r = torch.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
    ring = ((r - 7).abs() < 1.6).float()
    bar = (((xx - cx).abs() < 1.8) & ((yy - cy).abs() < 9)).float()
    kind = (torch.rand(n, 1, 1) < 0.5).float()
    ink = kind * ring + (1 - kind) * bar
    return (ink * 2 - 1).unsqueeze(1)


dataset = make_digits(4096)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()

        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))   # eps=0.8, as in the source
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(
            *block(latent_dim, 128, normalize=False),
            *block(128, 256),
            *block(256, 512),
            *block(512, 1024),
            nn.Linear(1024, channels * img_size * img_size),
            nn.Tanh(),
        )

    def forward(self, z):
        img = self.model(z)
        return img.view(img.size(0), *img_shape)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(channels * img_size * img_size, 512),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(512, 256),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(256, 1),
            nn.Sigmoid(),
        )

    def forward(self, img):
        return self.model(img.view(img.size(0), -1))


adversarial_loss = torch.nn.BCELoss()
generator = Generator()
discriminator = Discriminator()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=0.0002, betas=(0.5, 0.999))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=0.0002, betas=(0.5, 0.999))

real_mean = dataset.mean(0)


def mean_image_distance():
    with torch.no_grad():
        generator.eval()
        fake = generator(torch.randn(512, latent_dim))
        generator.train()
    return (fake.mean(0) - real_mean).abs().mean().item()


start = mean_image_distance()
perm = torch.randperm(len(dataset))
for step in range(args.steps):
    i = step % (len(dataset) // batch_size)
    if i == 0:
        perm = torch.randperm(len(dataset))      # shuffle=True, a new order each epoch
    real_imgs = dataset[perm[i * batch_size:(i + 1) * batch_size]]
    valid = torch.ones(real_imgs.size(0), 1)
    fake = torch.zeros(real_imgs.size(0), 1)

    # Train Generator: fool the discriminator.
    optimizer_G.zero_grad()
    z = torch.randn(real_imgs.shape[0], latent_dim)
    gen_imgs = generator(z)
    g_loss = adversarial_loss(discriminator(gen_imgs), valid)
    g_loss.backward()
    optimizer_G.step()

    # Train Discriminator: real vs generated (detached, so G gets no gradient from D's loss).
    optimizer_D.zero_grad()
    real_loss = adversarial_loss(discriminator(real_imgs), valid)
    fake_loss = adversarial_loss(discriminator(gen_imgs.detach()), fake)
    d_loss = (real_loss + fake_loss) / 2
    d_loss.backward()
    optimizer_D.step()

with torch.no_grad():
    d_real = discriminator(dataset[:512]).mean().item()
    generator.eval()
    d_fake = discriminator(generator(torch.randn(512, latent_dim))).mean().item()
print(f"gan_mlp: {args.steps} steps, D loss {d_loss.item():.3f}, G loss {g_loss.item():.3f}, "
      f"D(real) {d_real:.2f}, D(fake) {d_fake:.2f}, mean-image distance {start:.3f} -> "
      f"{mean_image_distance():.3f}")
