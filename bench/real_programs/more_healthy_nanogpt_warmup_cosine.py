"""nanoGPT's character-level GPT with its linear-warmup-then-cosine learning rate (get_lr), small CPU config.

Source: https://github.com/karpathy/nanoGPT/blob/master/train.py  (nanoGPT repository: train.py's get_lr
and config/train_shakespeare_char.py, at the CPU settings the README gives for a laptop:
--block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --dropout=0.0, lr_decay_iters=max_iters)
Bug: none. The learning rate climbs linearly from ~0 to 1e-3 over the warmup, then follows a half cosine
down to min_lr = 1e-4; AdamW (betas 0.9, 0.99, weight decay 0.1 on matrices), grad clip 1.0. The loss
falls from ln(65) = 4.17 to the text's entropy. The README's CPU run is 2000 iterations with the config's
100 warmup iterations; here max_iters = lr_decay_iters = 100 and warmup_iters = 10 keep the same shape
within the benchmark's step budget. The text is generated (no download): Shakespeare-like lines from a
small word list over a 65-character vocabulary.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): train loss 4.16 at iteration 0, 2.05 at 50, 1.87 at 99; val loss 1.84.
"""
# expect: healthy

import argparse
import math

import torch
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(1337)

# --- data: Shakespeare-like text over the tiny-shakespeare character set (65 symbols) ---
chars = sorted(set("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
words = ("thou art the king and i shall not be so my lord what is this that we have done good sir "
         "come hither now let us go to the duke her grace his honour o heaven mine own heart doth "
         "love thee well for in faith then speak no more ay marry sweet friend").split()
names = ["KING HENRY", "QUEEN", "ROMEO", "JULIET", "GLOUCESTER", "FIRST CITIZEN"]
g = torch.Generator().manual_seed(0)
lines = []
for _ in range(900):
    lines.append(names[int(torch.randint(len(names), (1,), generator=g))] + ":")
    for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
        k = int(torch.randint(4, 10, (1,), generator=g))
        ws = [words[int(i)] for i in torch.randint(len(words), (k,), generator=g)]
        end = ".,?!;"[int(torch.randint(5, (1,), generator=g))]
        lines.append((" ".join(ws)).capitalize() + end)
    lines.append("")
text = "\n".join(lines)
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]

# --- config (train_shakespeare_char.py with the README's CPU overrides) ---
block_size, batch_size = 64, 12
n_layer, n_head, n_embd, dropout = 4, 4, 128, 0.0
vocab_size = len(chars)
learning_rate, min_lr = 1e-3, 1e-4
max_iters = args.steps
lr_decay_iters = max_iters
warmup_iters = max(1, max_iters // 10)
weight_decay, beta1, beta2, grad_clip = 1e-1, 0.9, 0.99, 1.0


def get_batch(split):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - block_size, (batch_size,))
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
    return x, y


# --- model (nanoGPT model.py, bias=False) ---
class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, bias=False)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd, bias=False)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd, bias=False), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd, bias=False))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, bias=False)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight                  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight") or pn.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


model = GPT()
params = [p for p in model.parameters() if p.requires_grad]
decay = [p for p in params if p.dim() >= 2]
nodecay = [p for p in params if p.dim() < 2]
optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                               {"params": nodecay, "weight_decay": 0.0}],
                              lr=learning_rate, betas=(beta1, beta2))


def get_lr(it):
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    # 2) if it > lr_decay_iters, return min learning rate
    if it > lr_decay_iters:
        return min_lr
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # coeff ranges 0..1
    return min_lr + coeff * (learning_rate - min_lr)


log = {}
for iter_num in range(max_iters):
    lr = get_lr(iter_num)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    X, Y = get_batch("train")
    _, loss = model(X, Y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if iter_num in (0, max_iters // 2, max_iters - 1):
        log[iter_num] = loss.item()

model.eval()
with torch.no_grad():
    val = sum(model(*get_batch("val"))[1].item() for _ in range(10)) / 10
print("nanogpt_warmup_cosine: " + ", ".join(f"loss {v:.2f} at iter {k}" for k, v in log.items())
      + f"; val loss {val:.2f}")
