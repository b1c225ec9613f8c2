"""A vanilla MLP GAN whose "Xavier" initialiser divides integers: every weight starts at exactly zero.

Source: https://github.com/nlintz/TensorFlow-Tutorials/issues/83  (GitHub issue "11_gan do not work!":
"generate a array of all 0.5 ... g_cost ... are all the same"; the reporter's answer, confirmed by the
maintainer: "The problem is here: def xavier_initializer(shape): return tf.random_normal(shape=shape,
stddev=1/shape[0]) -- stddev=1/shape[0] should be stddev=1.0/shape[0]"; merged in PR #84)
Program: 11_gan.ipynb as first published (commit 71c75a4): G z(100) -> 400 ReLU -> 784 sigmoid,
D 784 -> 400 ReLU -> 1 sigmoid, weights from that initialiser, biases zero; G_objective =
-mean(log D(G(z))), D_objective = -mean(log D(X) + log(1 - D(G(z)))); one Adam (TF defaults, lr 1e-3)
per network, G stepped then D each iteration, batch 128, MNIST pixels in [0, 1].
Bug: under Python 2 (the tutorial's), 1/shape[0] is integer division, 0: all four weight matrices are
zeros. Every hidden ReLU outputs 0, so no weight gets a gradient; only the output biases move: G emits
one constant image (sigmoid(b2) ~ 0.5 everywhere at the start) whatever z is.
Fix (--fixed): stddev = 1.0/shape[0], as the issue says (the other edits of PR #84 are not applied).
Ported: TF 1 -> PyTorch (w of shape (in, out) used as x @ w); Python 2's integer division written `//`;
synthetic MNIST-like 28x28 strokes in [0, 1]; 1000 iterations (the notebook runs 50,000).
Printed metric (plain python): spread of the generated images over z (mean per-pixel std over 256
samples) and the gap between the generated and the real mean image: buggy 0.000 and 0.383 (one
constant image, G loss fixed at ln 2, D loss at 2 ln 2); fixed 0.022 and 0.156 (D wins, as in the
tutorial, but G draws strokes that depend on z).
"""
# expect: cause=initialization
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--iterations", type=int, default=1000)
parser.add_argument("--fixed", action="store_true", help="stddev = 1.0/shape[0] (true division)")
args = parser.parse_args()

torch.manual_seed(0)


def make_digits(n):
    """MNIST-like 28x28 images in [0, 1]: a dark background with one bright stroke (a bar or a ring)."""
    yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    cx = 14 + 4 * (torch.rand(n, 1, 1) - 0.5)
    cy = 14 + 4 * (torch.rand(n, 1, 1) - 0.5)
    r = torch.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
    ring = ((r - 7).abs() < 1.6).float()
    bar = (((xx - cx).abs() < 1.8) & ((yy - cy).abs() < 9)).float()
    kind = (torch.rand(n, 1, 1) < 0.5).float()
    return (kind * ring + (1 - kind) * bar).reshape(n, 784)


images = make_digits(8192)


def xavier_initializer(shape):
    if args.fixed:
        stddev = 1.0 / shape[0]
    else:
        stddev = 1 // shape[0]        # Python 2's 1/shape[0] on ints: 0
    return torch.randn(shape) * stddev


z_size, g_w1_size, g_out_size = 100, 400, 28 * 28
x_size, d_w1_size, d_out_size = 28 * 28, 400, 1


class Dense(nn.Module):
    """tf.matmul(x, w) + b with w of shape (in, out)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.w = nn.Parameter(xavier_initializer((n_in, n_out)))
        self.b = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.w + self.b


class G(nn.Module):
    def __init__(self):
        super().__init__()
        self.h1 = Dense(z_size, g_w1_size)
        self.relu = nn.ReLU()
        self.out = Dense(g_w1_size, g_out_size)

    def forward(self, z):
        return torch.sigmoid(self.out(self.relu(self.h1(z))))


class D(nn.Module):
    def __init__(self):
        super().__init__()
        self.h1 = Dense(x_size, d_w1_size)
        self.relu = nn.ReLU()
        self.out = Dense(d_w1_size, d_out_size)

    def forward(self, x):
        return torch.sigmoid(self.out(self.relu(self.h1(x))))


g, d = G(), D()
G_opt = torch.optim.Adam(g.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
D_opt = torch.optim.Adam(d.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
batch_size = 128


def generate_z(n=1):
    return torch.randn(n, z_size)


for _ in range(args.iterations):
    G_objective = -torch.log(d(g(generate_z(batch_size)))).mean()
    G_opt.zero_grad()
    G_objective.backward()
    G_opt.step()

    X = images[torch.randint(0, len(images), (batch_size,))]
    D_objective = -(torch.log(d(X)) + torch.log(1 - d(g(generate_z(batch_size)).detach()))).mean()
    D_opt.zero_grad()
    D_objective.backward()
    D_opt.step()

with torch.no_grad():
    sample = g(generate_z(256))
    spread = sample.std(0).mean().item()
    gap = (sample.mean(0) - images.mean(0)).abs().mean().item()
print(f"init_int_div_zero_std_gan: {'stddev 1.0/n' if args.fixed else 'stddev 1/n (= 0)'}, {args.iterations} "
      f"iterations, G loss {G_objective.item():.3f}, D loss {D_objective.item():.3f}, sample spread over z "
      f"{spread:.3f}, |mean fake - mean real| {gap:.3f}")
