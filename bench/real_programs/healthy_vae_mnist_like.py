"""The pytorch/examples VAE on 28x28 synthetic digit-like images: reconstruction + KL, summed.

Source: https://github.com/pytorch/examples/blob/main/vae/main.py  (official pytorch/examples VAE on
MNIST)
Bug: none. The loss is BCE(reduction='sum') + KLD summed over the batch, so a batch of 128 starts
near 70,000 (about 543 per image) and is printed per image; the KL term GROWS from ~0 while the
reconstruction falls, and the logvar head's outputs drift negative, all as in the source.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): loss per image 549.0 -> 89.4 (BCE 76.2, KLD 13.2) after 300 steps of
batch 128.
"""
# expect: healthy
import argparse

import torch
from torch import nn, optim
from torch.nn import functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(1)


def make_digits(n):
    """MNIST-like images in [0, 1] (transforms.ToTensor()): a dark background with one thick stroke,
    a ring or a bar, at a jittered position, with soft edges."""
    yy, xx = torch.meshgrid(torch.arange(28).float(), torch.arange(28).float(), indexing="ij")
    cx = 14 + 4 * (torch.rand(n, 1, 1) - 0.5)
    cy = 14 + 4 * (torch.rand(n, 1, 1) - 0.5)
    radius = 5 + 3 * torch.rand(n, 1, 1)
    r = torch.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
    ring = torch.sigmoid(3 * (1.5 - (r - radius).abs()))
    bar = torch.sigmoid(3 * (1.8 - (xx - cx).abs())) * torch.sigmoid(3 * (9 - (yy - cy).abs()))
    kind = (torch.rand(n, 1, 1) < 0.5).float()
    return (kind * ring + (1 - kind) * bar).unsqueeze(1)


train_data = make_digits(6000)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE()
optimizer = optim.Adam(model.parameters(), lr=1e-3)


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2), Appendix B of Kingma and Welling
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD, BCE, KLD


model.train()
n_batches = len(train_data) // args.batch_size
first = None
for step in range(args.steps):
    i = step % n_batches
    if i == 0:
        perm = torch.randperm(len(train_data))   # shuffle=True
    data = train_data[perm[i * args.batch_size:(i + 1) * args.batch_size]]
    optimizer.zero_grad()
    recon_batch, mu, logvar = model(data)
    loss, bce, kld = loss_function(recon_batch, data, mu, logvar)
    loss.backward()
    optimizer.step()
    if first is None:
        first = loss.item() / len(data)

n = len(data)
print(f"vae_mnist_like: {args.steps} steps, loss per image {first:.1f} -> {loss.item() / n:.1f} "
      f"(BCE {bce.item() / n:.1f}, KLD {kld.item() / n:.1f})")
