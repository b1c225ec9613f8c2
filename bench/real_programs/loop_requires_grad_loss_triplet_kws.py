"""A keyword-spotting Res8 trained on a triplet loss of a no_grad input, 'fixed' by loss.requires_grad = True.

Source: https://github.com/roman-vygon/triplet_loss_kws/issues/6  (GitHub issue "Torch autograd expects
Variable with requires_grad set to True"; the workaround posted there: "you need set loss.requres_grad =
True ... mean_losses = losses.mean(); mean_losses.requires_grad=True; return mean_losses", and the author's
reply points at layers/l2.py, whose L2Regularizer carries the comment "l2_embeds.requires_grad = True <====
uncomment this if you run into var has no gradient problem")
Program: models/resnet.py Res8(hidden_size=45): conv0 3x3, AvgPool2d((3, 4)), 6 x [Conv2d 3x3 no bias, ReLU,
residual every 2nd, BatchNorm2d(affine=False)], mean over positions; layers/l2.py L2Regularizer (a NeMo
NonTrainableNM: NeMo 0.x's NonTrainableNM.__call__ runs forward() under `with t.no_grad()`) with
F.normalize(p=2, dim=-1); loss/triplet.py OnlineTripletLoss (squared distances,
relu(ap - an + margin).mean()).
Bug: the L2 normalisation runs under no_grad, so the loss has no graph to the encoder; backward() raised
"element 0 of tensors does not require grad", and the posted workaround `mean_losses.requires_grad = True`
makes backward() run on a fresh leaf: no gradient reaches the encoder, which never trains, silently.
Fix (--fixed): the L2 normalisation computed with gradients (as a trainable part of the graph), and no
requires_grad on the loss.
Ported: synthetic 40-mel x 48-frame log-mel "keywords" of 12 classes (each a class-specific pattern of
band bursts at a random time, under noise), Res8 hidden 45 -> 16 maps, margin 0.5, an online selector of one
random positive and the hardest negative per anchor, Adam(lr=1e-3) (NeMo's Novograd here is Adam), batch 48,
200 steps on one CPU thread.
Printed metric (plain python): nearest-class-centroid accuracy of the embeddings on 480 held-out clips
(chance 0.083) and the mean triplet loss of the last 20 steps: buggy 0.129 and 1.865 (first 1.883); fixed
0.967 and 0.204.
"""
# expect: cause=training_loop
import argparse

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fixed", action="store_true",
                    help="L2 normalisation with gradients, no requires_grad hack")
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()
torch.manual_seed(0)


class Res8(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        n_maps = hidden_size
        self.conv0 = nn.Conv2d(1, n_maps, (3, 3), padding=(1, 1), bias=False)
        self.pool = nn.AvgPool2d((3, 4))
        self.n_layers = n_layers = 6
        self.convs = [nn.Conv2d(n_maps, n_maps, (3, 3), padding=1, bias=False) for _ in range(n_layers)]
        for i, conv in enumerate(self.convs):
            self.add_module(f'bn{i + 1}', nn.BatchNorm2d(n_maps, affine=False))
            self.add_module(f'conv{i + 1}', conv)

    def forward(self, audio_signal, length=None):
        x = audio_signal.unsqueeze(1)
        x = x.permute(0, 1, 3, 2).contiguous()
        for i in range(self.n_layers + 1):
            y = F.relu(getattr(self, f'conv{i}')(x))
            if i == 0:
                if hasattr(self, 'pool'):
                    y = self.pool(y)
                old_x = y
            if i > 0 and i % 2 == 0:
                x = y + old_x
                old_x = x
            else:
                x = y
            if i > 0:
                x = getattr(self, f'bn{i}')(x)
        x = x.view(x.size(0), x.size(1), -1)
        x = torch.mean(x, 2)
        return x.unsqueeze(-2), length


class L2Regularizer(nn.Module):
    """layers/l2.py; called as NeMo calls a NonTrainableNM: forward under torch.no_grad()."""

    def regularize(self, embeds):
        return F.normalize(embeds, p=2, dim=-1)

    def forward(self, embeds):
        return self.regularize(embeds)

    def __call__(self, *input):
        if args.fixed:
            return super().__call__(*input)
        with torch.no_grad():
            return self.forward(*input)


def get_triplets(embeddings, target):
    """One random positive and the hardest negative per anchor."""
    with torch.no_grad():
        d = torch.cdist(embeddings, embeddings) ** 2
        same = target[:, None] == target[None, :]
        eye = torch.eye(len(target), dtype=torch.bool)
        trip = []
        for a in range(len(target)):
            pos = torch.nonzero(same[a] & ~eye[a]).flatten()
            neg = torch.nonzero(~same[a]).flatten()
            if len(pos) == 0 or len(neg) == 0:
                continue
            p = pos[torch.randint(len(pos), (1,))].item()
            n = neg[d[a, neg].argmin()].item()
            trip.append((a, p, n))
    return torch.tensor(trip)


def triplet_loss(embeddings, target, margin=0.5):
    embeddings = torch.flatten(embeddings, start_dim=-2)
    triplets = get_triplets(embeddings, target)
    ap_distances = (embeddings[triplets[:, 0]] - embeddings[triplets[:, 1]]).pow(2).sum(1)
    an_distances = (embeddings[triplets[:, 0]] - embeddings[triplets[:, 2]]).pow(2).sum(1)
    losses = F.relu(ap_distances - an_distances + margin)
    mean_losses = losses.mean()
    if not args.fixed:
        mean_losses.requires_grad = True          # the workaround from the issue
    return mean_losses


g = torch.Generator().manual_seed(1)
K = 12
bands = torch.randint(0, 40, (K, 5), generator=g)
offs = torch.randint(0, 8, (K, 5), generator=g)


def make(n):
    y = torch.randint(0, K, (n,), generator=g)
    x = torch.randn(n, 40, 48, generator=g)
    for i in range(n):
        c = int(y[i])
        t0 = int(torch.randint(0, 30, (1,), generator=g))
        for j in range(5):
            x[i, bands[c, j], t0 + offs[c, j]:t0 + offs[c, j] + 6] += 2.0
    return x, y


xtr, ytr = make(1200)
xte, yte = make(480)

encoder = Res8(16)
l2 = L2Regularizer()
optimizer = torch.optim.Adam(encoder.parameters(), lr=1e-3)
losses = []
for step in range(args.steps):
    idx = torch.randint(0, len(xtr), (48,), generator=g)
    embeds, _ = encoder(xtr[idx])
    l2_embeds = l2(embeds)
    loss = triplet_loss(l2_embeds, ytr[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())

encoder.eval()
with torch.no_grad():
    etr = F.normalize(encoder(xtr)[0].flatten(1), dim=-1)
    ete = F.normalize(encoder(xte)[0].flatten(1), dim=-1)
    cent = torch.stack([etr[ytr == c].mean(0) for c in range(K)])
    acc = (torch.cdist(ete, cent).argmin(1) == yte).float().mean().item()
print(f"loop_requires_grad_loss_triplet_kws: {'graph kept' if args.fixed else 'loss.requires_grad = True'}, "
      f"centroid accuracy {acc:.3f}, triplet loss first {losses[0]:.3f}, "
      f"last-20 mean {sum(losses[-20:]) / 20:.3f}")
