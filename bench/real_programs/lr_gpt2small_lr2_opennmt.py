"""OpenNMT-tf's GPT2Small language model trained with learning_rate 2 instead of its 2.5e-4.

Source: https://github.com/OpenNMT/OpenNMT-tf/issues/744  (GitHub issue "RuntimeError: Model diverged
with loss = NaN."; the maintainer's answer: "The learning rate you set in the configuration is too
large. You can see the default learning rate in GPT2Small is `2.5e-4` but you then set `2`.")
Program: opennmt/models/catalog.py GPT2Small at the issue's date (c28fdcc): a SelfAttentionDecoder
language model (pre-norm Transformer blocks, GELU feed-forward, learned position embeddings, dropout 0.1,
a final LayerNorm, embeddings scaled by sqrt(num_units)), cross-entropy averaged over tokens, Adam, and
auto_config's schedule CosineAnnealing(eta_max=learning_rate, max_step=1e6, warmup_steps=2000) (linear
warm-up from 0), batch 64 sequences.
Bug: `learning_rate: 2` in the user's configuration (the value the Transformer's noam schedule uses),
so the warm-up ramps Adam's step size towards 2.
Fix (--fixed): the model's own 2.5e-4.
Ported: TF 2 -> PyTorch; 2 layers of width 64, 4 heads, FFN 256 (GPT2Small: 12 x 768); a character
corpus (the licence texts of /usr/share/common-licenses) with contexts of 64; batch 16; the warm-up
scaled with the run, 100 steps of 300; Adam's epsilon 1e-7 (Keras').
Printed metric (plain python): training loss at step 0 and mean of the last 20 steps: buggy 4.20 ->
614 (peak 1144); fixed 4.20 -> 2.61.
"""
# expect: cause=learning_rate
import argparse
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--fixed", action="store_true", help="learning_rate 2.5e-4, GPT2Small's own")
args = parser.parse_args()

torch.manual_seed(0)

text = ""
for name in ("GPL-3", "Apache-2.0", "MPL-2.0"):
    with open(f"/usr/share/common-licenses/{name}", encoding="utf-8") as f:
        text += re.sub(r"\s+", " ", f.read().lower())
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text])
vocab, ctx, batch = len(chars), 64, 16
num_layers, num_units, num_heads, ffn_inner_dim, dropout = 2, 64, 4, 256, 0.1


class Block(nn.Module):
    """OpenNMT-tf's SelfAttentionDecoderLayer: pre-norm, y = dropout(layer(norm(x))) + x."""

    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(num_units)
        self.attn = nn.MultiheadAttention(num_units, num_heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(num_units)
        self.ffn = nn.Sequential(nn.Linear(num_units, ffn_inner_dim), nn.GELU(approximate="tanh"),
                                 nn.Dropout(dropout), nn.Linear(ffn_inner_dim, num_units))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.drop(self.attn(h, h, h, attn_mask=mask, need_weights=False)[0])
        return x + self.drop(self.ffn(self.ln2(x)))


class GPT2Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(vocab, num_units)
        self.pos = nn.Embedding(1024, num_units)          # PositionEmbedder(maximum_position=1024)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block() for _ in range(num_layers))
        self.layer_norm = nn.LayerNorm(num_units)
        self.output_layer = nn.Linear(num_units, vocab)

    def forward(self, ids):
        t = ids.size(1)
        x = self.embed(ids) * num_units ** 0.5 + self.pos(torch.arange(t))
        x = self.drop(x)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        for block in self.blocks:
            x = block(x, mask)
        return self.output_layer(self.layer_norm(x))


model = GPT2Small()
learning_rate = 2.5e-4 if args.fixed else 2.0
warmup_steps, max_step = 100, 1000000
optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, betas=(0.9, 0.999), eps=1e-7)


def cosine_annealing(step):                                 # opennmt/schedules/lr_schedules.py
    if step < warmup_steps:
        return step / warmup_steps
    return 0.5 * (1 + math.cos(math.pi * step / max_step))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_annealing)
losses = []
for step in range(args.steps):
    ix = torch.randint(0, len(data) - ctx - 1, (batch,))
    x = torch.stack([data[i:i + ctx] for i in ix])
    y = torch.stack([data[i + 1:i + ctx + 1] for i in ix])
    loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())
print(f"lr_gpt2small_lr2_opennmt: learning_rate {learning_rate}, {args.steps} steps, loss {losses[0]:.2f} -> "
      f"{sum(losses[-20:]) / 20:.2f} (max {max(losses):.1f})")
