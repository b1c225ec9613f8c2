"""A RealNVP flow fit to two moons with Adam at lr 1e-4: a slow start and a summed NLL in the hundreds.

Source: https://github.com/karpathy/pytorch-normalizing-flows/blob/master/nflib1.ipynb  (karpathy's
normalizing-flows notebook; flows from nflib/flows.py, nets from nflib/nets.py)
Bug: none. The loss is the SUMMED negative log-likelihood of a 128-point batch,
-(prior_logprob + log_det).sum(), under a logistic prior (so hundreds, not ~1), minimised by Adam at
lr 1e-4 with weight decay 1e-5, which makes the first steps slow; the per-coupling scale nets'
outputs feed exp(), so log_det is unbounded in either sign. A density loss has no floor at 0: the
best NLL here is the data's differential entropy (about 0.3 nats per point for moons with noise 0.05;
for sharper data it is negative).
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): batch NLL 440 -> 230 (per point 3.4 -> 1.8) after 250 steps; held-out
NLL per point 1.79 (shrunk for the benchmark: the notebook trains 1000+ steps).
"""
# expect: healthy
import argparse
import math

import torch
from torch import nn
from torch.distributions import SigmoidTransform, TransformedDistribution, Uniform

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=250)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(0)


def make_moons(n, noise=0.05):
    """sklearn.datasets.make_moons: two interleaving half circles plus Gaussian noise."""
    n_out = n // 2
    n_in = n - n_out
    t_out = torch.linspace(0, math.pi, n_out)
    t_in = torch.linspace(0, math.pi, n_in)
    outer = torch.stack([torch.cos(t_out), torch.sin(t_out)], 1)
    inner = torch.stack([1 - torch.cos(t_in), 1 - torch.sin(t_in) - 0.5], 1)
    x = torch.cat([outer, inner])
    return x + noise * torch.randn_like(x)


class MLP(nn.Module):
    """ a simple 4-layer MLP """

    def __init__(self, nin, nout, nh):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(nin, nh), nn.LeakyReLU(0.2),
            nn.Linear(nh, nh), nn.LeakyReLU(0.2),
            nn.Linear(nh, nh), nn.LeakyReLU(0.2),
            nn.Linear(nh, nout),
        )

    def forward(self, x):
        return self.net(x)


class AffineHalfFlow(nn.Module):
    """RealNVP coupling: half the dimensions are scaled and shifted as a function of the other half."""

    def __init__(self, dim, parity, nh=24):
        super().__init__()
        self.dim = dim
        self.parity = parity
        self.s_cond = MLP(self.dim // 2, self.dim // 2, nh)
        self.t_cond = MLP(self.dim // 2, self.dim // 2, nh)

    def forward(self, x):
        x0, x1 = x[:, ::2], x[:, 1::2]
        if self.parity:
            x0, x1 = x1, x0
        s = self.s_cond(x0)
        t = self.t_cond(x0)
        z0 = x0
        z1 = torch.exp(s) * x1 + t
        if self.parity:
            z0, z1 = z1, z0
        z = torch.cat([z0, z1], dim=1)
        log_det = torch.sum(s, dim=1)
        return z, log_det


class NormalizingFlowModel(nn.Module):
    """ A Normalizing Flow Model is a (prior, flow) pair """

    def __init__(self, prior, flows):
        super().__init__()
        self.prior = prior
        self.flows = nn.ModuleList(flows)

    def forward(self, x):
        m, _ = x.shape
        log_det = torch.zeros(m)
        for flow in self.flows:
            x, ld = flow.forward(x)
            log_det += ld
        prior_logprob = self.prior.log_prob(x).view(m, -1).sum(1)
        return x, prior_logprob, log_det


# Logistic prior, RealNVP with 9 alternating couplings (the notebook's RealNVP option).
prior = TransformedDistribution(Uniform(torch.zeros(2), torch.ones(2)), SigmoidTransform().inv)
flows = [AffineHalfFlow(dim=2, parity=i % 2) for i in range(9)]
model = NormalizingFlowModel(prior, flows)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=1e-5)

model.train()
first = None
for _ in range(args.steps):
    x = make_moons(128)
    zs, prior_logprob, log_det = model(x)
    logprob = prior_logprob + log_det
    loss = -torch.sum(logprob)  # NLL
    model.zero_grad()
    loss.backward()
    optimizer.step()
    if first is None:
        first = loss.item()

with torch.no_grad():
    _, prior_logprob, log_det = model(make_moons(1024))
    nll = -(prior_logprob + log_det).mean().item()
print(f"realnvp_moons: {args.steps} steps, batch NLL {first:.1f} -> {loss.item():.1f}, "
      f"held-out NLL per point {nll:.3f}")
