"""A time-series Transformer keeps its encoder/decoder layers in plain Python lists, so Adam never trains them.

Source: https://github.com/LiamMaclean216/Pytorch-Transfomer/pull/7 (merged, "Change list of encoders/decoders
definition", "Solves #6": "Using the nn.ModuleList() allows the internal layers of the module to be available.");
the fix in Network.py, commit 7ec9864: `self.encs = []` -> `self.encs = nn.ModuleList()` and `self.decs = []` ->
`self.decs = nn.ModuleList()`.
Program: Network.py / utils.py / Transformer.ipynb before the fix, verbatim: Transformer(dim_val=10, dim_attn=5,
input_size=1, dec_seq_len=2, out_seq_len=1, 3 decoder and 3 encoder layers, n_heads=3) built from EncoderLayer /
DecoderLayer (MultiHeadAttentionBlock of AttentionBlocks with Query/Key/Value linears, ELU feed-forward,
LayerNorm), PositionalEncoding, enc_input_fc / dec_input_fc / out_fc; Adam(lr=0.002); loss
`torch.mean((net_out - Y) ** 2)`; 20 epochs of 20 batches of 15 windows from get_data (6 points of a sigmoid
curve -> the next point).
Bug: the 3 EncoderLayers and 3 DecoderLayers sit in plain lists, so t.parameters() holds only
enc_input_fc, dec_input_fc and out_fc (61 of 9,781 parameters); every attention and
feed-forward weight stays at its random initialisation and only the input/output linears learn.
Fix (--fixed): nn.ModuleList for encs and decs (the merged fix).
Ported: verbatim (the notebook's own synthetic data); the live matplotlib plot is dropped; the final
sigmoid-extrapolation plot is replaced by the printed MSE on the same 20 test windows.
Printed metric (plain python): buggy 61 parameters in the optimizer, last-epoch train MSE 3.62e-4, test MSE 3.47e-4;
fixed 9781 parameters, last-epoch train MSE 1.72e-5, test MSE 1.46e-5 (24x lower).
"""
# expect: cause=training_loop
# ruff: noqa: E501
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fixed", action="store_true", help="nn.ModuleList for encs/decs")
args = parser.parse_args()
torch.manual_seed(0)


def a_norm(Q, K):
    m = torch.matmul(Q, K.transpose(2, 1).float())
    m /= torch.sqrt(torch.tensor(Q.shape[-1]).float())
    return torch.softmax(m, -1)


def attention(Q, K, V):
    a = a_norm(Q, K)
    return torch.matmul(a, V)


class Value(torch.nn.Module):
    def __init__(self, dim_input, dim_val):
        super(Value, self).__init__()
        self.fc1 = nn.Linear(dim_input, dim_val, bias=False)

    def forward(self, x):
        return self.fc1(x)


class Key(torch.nn.Module):
    def __init__(self, dim_input, dim_attn):
        super(Key, self).__init__()
        self.fc1 = nn.Linear(dim_input, dim_attn, bias=False)

    def forward(self, x):
        return self.fc1(x)


class Query(torch.nn.Module):
    def __init__(self, dim_input, dim_attn):
        super(Query, self).__init__()
        self.fc1 = nn.Linear(dim_input, dim_attn, bias=False)

    def forward(self, x):
        return self.fc1(x)


class AttentionBlock(torch.nn.Module):
    def __init__(self, dim_val, dim_attn):
        super(AttentionBlock, self).__init__()
        self.value = Value(dim_val, dim_val)
        self.key = Key(dim_val, dim_attn)
        self.query = Query(dim_val, dim_attn)

    def forward(self, x, kv=None):
        if kv is None:
            return attention(self.query(x), self.key(x), self.value(x))
        return attention(self.query(x), self.key(kv), self.value(kv))


class MultiHeadAttentionBlock(torch.nn.Module):
    def __init__(self, dim_val, dim_attn, n_heads):
        super(MultiHeadAttentionBlock, self).__init__()
        self.heads = []
        for i in range(n_heads):
            self.heads.append(AttentionBlock(dim_val, dim_attn))
        self.heads = nn.ModuleList(self.heads)
        self.fc = nn.Linear(n_heads * dim_val, dim_val, bias=False)

    def forward(self, x, kv=None):
        a = []
        for h in self.heads:
            a.append(h(x, kv=kv))
        a = torch.stack(a, dim=-1)
        a = a.flatten(start_dim=2)
        return self.fc(a)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super(PositionalEncoding, self).__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x):
        return x + self.pe[:x.size(1), :].squeeze(1)


def get_data(batch_size, input_sequence_length, output_sequence_length):
    i = input_sequence_length + output_sequence_length
    t = torch.zeros(batch_size, 1).uniform_(0, 20 - i).int()
    b = torch.arange(-10, -10 + i).unsqueeze(0).repeat(batch_size, 1) + t
    s = torch.sigmoid(b.float())
    return s[:, :input_sequence_length].unsqueeze(-1), s[:, -output_sequence_length:]


class EncoderLayer(torch.nn.Module):
    def __init__(self, dim_val, dim_attn, n_heads=1):
        super(EncoderLayer, self).__init__()
        self.attn = MultiHeadAttentionBlock(dim_val, dim_attn, n_heads)
        self.fc1 = nn.Linear(dim_val, dim_val)
        self.fc2 = nn.Linear(dim_val, dim_val)
        self.norm1 = nn.LayerNorm(dim_val)
        self.norm2 = nn.LayerNorm(dim_val)

    def forward(self, x):
        a = self.attn(x)
        x = self.norm1(x + a)
        a = self.fc1(F.elu(self.fc2(x)))
        x = self.norm2(x + a)
        return x


class DecoderLayer(torch.nn.Module):
    def __init__(self, dim_val, dim_attn, n_heads=1):
        super(DecoderLayer, self).__init__()
        self.attn1 = MultiHeadAttentionBlock(dim_val, dim_attn, n_heads)
        self.attn2 = MultiHeadAttentionBlock(dim_val, dim_attn, n_heads)
        self.fc1 = nn.Linear(dim_val, dim_val)
        self.fc2 = nn.Linear(dim_val, dim_val)
        self.norm1 = nn.LayerNorm(dim_val)
        self.norm2 = nn.LayerNorm(dim_val)
        self.norm3 = nn.LayerNorm(dim_val)

    def forward(self, x, enc):
        a = self.attn1(x)
        x = self.norm1(a + x)
        a = self.attn2(x, kv=enc)
        x = self.norm2(a + x)
        a = self.fc1(F.elu(self.fc2(x)))
        x = self.norm3(x + a)
        return x


class Transformer(torch.nn.Module):
    def __init__(self, dim_val, dim_attn, input_size, dec_seq_len, out_seq_len, n_decoder_layers=1,
                 n_encoder_layers=1, n_heads=1):
        super(Transformer, self).__init__()
        self.dec_seq_len = dec_seq_len
        self.encs = nn.ModuleList() if args.fixed else []
        for i in range(n_encoder_layers):
            self.encs.append(EncoderLayer(dim_val, dim_attn, n_heads))
        self.decs = nn.ModuleList() if args.fixed else []
        for i in range(n_decoder_layers):
            self.decs.append(DecoderLayer(dim_val, dim_attn, n_heads))
        self.pos = PositionalEncoding(dim_val)
        self.enc_input_fc = nn.Linear(input_size, dim_val)
        self.dec_input_fc = nn.Linear(input_size, dim_val)
        self.out_fc = nn.Linear(dec_seq_len * dim_val, out_seq_len)

    def forward(self, x):
        e = self.encs[0](self.pos(self.enc_input_fc(x)))
        for enc in self.encs[1:]:
            e = enc(e)
        d = self.decs[0](self.dec_input_fc(x[:, -self.dec_seq_len:]), e)
        for dec in self.decs[1:]:
            d = dec(d, e)
        x = self.out_fc(d.flatten(start_dim=1))
        return x


enc_seq_len = 6
dec_seq_len = 2
output_sequence_length = 1
dim_val = 10
dim_attn = 5
lr = 0.002
epochs = 20
n_heads = 3
n_decoder_layers = 3
n_encoder_layers = 3
batch_size = 15

t = Transformer(dim_val, dim_attn, 1, dec_seq_len, output_sequence_length, n_decoder_layers, n_encoder_layers,
                n_heads)
optimizer = torch.optim.Adam(t.parameters(), lr=lr)
n_opt = sum(p.numel() for g in optimizer.param_groups for p in g["params"])

losses = []
for e in range(epochs):
    for b in range(-10 - enc_seq_len, 10 - enc_seq_len):
        optimizer.zero_grad()
        X, Y = get_data(batch_size, enc_seq_len, output_sequence_length)
        net_out = t(X)
        loss = torch.mean((net_out - Y) ** 2)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

# test: every window of the sigmoid curve, as in the notebook's comparison plot
with torch.no_grad():
    s = torch.sigmoid(torch.arange(-10, 10).float())
    Xt = torch.stack([s[i:i + enc_seq_len] for i in range(20 - enc_seq_len)]).unsqueeze(-1)
    Yt = torch.stack([s[i + enc_seq_len:i + enc_seq_len + 1] for i in range(20 - enc_seq_len)])
    test_mse = torch.mean((t(Xt) - Yt) ** 2).item()
last_epoch = sum(losses[-20:]) / 20
print(f"loop_plain_list_layers_transformer: params in optimizer {n_opt}, train MSE first {losses[0]:.4g}, "
      f"last epoch {last_epoch:.3g}, test MSE {test_mse:.3g}")
