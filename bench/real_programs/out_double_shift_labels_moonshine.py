"""A Moonshine-style speech recogniser whose training loss shifts the labels twice.

Source: https://github.com/huggingface/transformers/pull/46784  ("Fix Moonshine training-loss
double-shift (train against labels, not labels[..., 1:])", merged: "Moonshine right-shifts `labels`
into `decoder_input_ids`, then computes the loss with `self.loss_function` (`ForCausalLMLoss`), which
shifts again, so it trains against `labels[..., 1:]`. Switch to a plain `CrossEntropyLoss`, matching
Whisper/Bart"; the same bug was then fixed in Florence2 #46898, CohereAsr #46895 and GIT #47395)
Program: MoonshineForConditionalGeneration's training path: the audio preprocessor (Conv1d(1, d, 127,
stride 64, no bias) -> tanh -> GroupNorm(1, d) -> Conv1d(d, 2d, 7, stride 3) -> GELU -> Conv1d(2d, d, 3,
stride 2) -> GELU), a pre-norm Transformer encoder, a pre-norm decoder with causal self-attention and
cross-attention, the LM head tied to the token embedding; `decoder_input_ids = shift_tokens_right(labels,
pad, decoder_start_token_id)`, then the loss.
Bug: the loss is ForCausalLMLoss, which pads the labels with -100 and shifts them left once more:
position t, which has seen the tokens before t, is trained to emit token t + 1, and never token t.
Fix (--fixed): the PR's, CrossEntropyLoss(logits, labels) on the already aligned labels.
Ported: width 64, 2 encoder and 2 decoder layers, 4 heads (Moonshine tiny: 288, 6 and 6, 8); learned
positions instead of rotary, GELU MLPs in the decoder instead of SwiGLU; synthetic 16 kHz-like audio,
each digit of a 3-6 digit utterance a 768-sample tone of its own pair of frequencies; AdamW (lr 1e-3,
the Trainer's AdamW at a from-scratch rate), batch 32, 400 steps.
Printed metric (plain python): training loss and the greedy transcription's exact-match rate on 256
held-out utterances: buggy loss 0.000, exact 0.000 (trained to emit digit t + 1 at position t, it skips digits);
fixed loss 0.000, exact 1.000.
"""
# expect: cause=architecture
# ruff: noqa: E501
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--fixed", action="store_true", help="plain CrossEntropyLoss on the aligned labels")
args = parser.parse_args()

torch.manual_seed(0)
PAD, BOS, EOS = 0, 1, 2          # digits are tokens 3..12
VOCAB, D, HEADS, SEG = 13, 64, 4, 768
g = torch.Generator().manual_seed(1)
freqs = 0.01 + 0.2 * torch.rand(10, 2, generator=g)


def make(n):
    lens = torch.randint(3, 7, (n,), generator=g)
    digits = [torch.randint(0, 10, (int(k),), generator=g) for k in lens]
    t = torch.arange(SEG).float()
    audio = torch.zeros(n, 1, 6 * SEG)
    labels = torch.full((n, 8), -100, dtype=torch.long)
    for i, ds in enumerate(digits):
        for j, d in enumerate(ds.tolist()):
            audio[i, 0, j * SEG:(j + 1) * SEG] = torch.sin(freqs[d, 0] * t) + torch.sin(freqs[d, 1] * t)
        labels[i, :len(ds)] = ds + 3
        labels[i, len(ds)] = EOS
    return audio + 0.1 * torch.randn(audio.shape, generator=g), labels


def shift_tokens_right(labels, pad_token_id, decoder_start_token_id):
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def for_causal_lm_loss(logits, labels, vocab_size, ignore_index=-100):   # transformers' ForCausalLMLoss
    labels = F.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()
    return F.cross_entropy(logits.reshape(-1, vocab_size).float(), shift_labels.reshape(-1),
                           ignore_index=ignore_index)


class Moonshine(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(1, D, 127, stride=64, bias=False)
        self.groupnorm = nn.GroupNorm(1, D)
        self.conv2 = nn.Conv1d(D, 2 * D, 7, stride=3)
        self.conv3 = nn.Conv1d(2 * D, D, 3, stride=2)
        self.enc_pos = nn.Embedding(64, D)
        layer = dict(d_model=D, nhead=HEADS, dim_feedforward=4 * D, dropout=0.0, activation="gelu",
                     batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), 2,
                                             norm=nn.LayerNorm(D), enable_nested_tensor=False)
        self.embed_tokens = nn.Embedding(VOCAB, D)
        self.dec_pos = nn.Embedding(16, D)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), 2, norm=nn.LayerNorm(D))
        self.proj_out = nn.Linear(D, VOCAB, bias=False)
        self.proj_out.weight = self.embed_tokens.weight          # tie_word_embeddings

    def encode(self, audio):
        x = self.groupnorm(torch.tanh(self.conv1(audio)))
        x = F.gelu(self.conv3(F.gelu(self.conv2(x)))).transpose(1, 2)
        return self.encoder(x + self.enc_pos(torch.arange(x.size(1))))

    def decode(self, memory, ids):
        t = ids.size(1)
        mask = torch.triu(torch.full((t, t), float("-inf")), 1)
        h = self.embed_tokens(ids) + self.dec_pos(torch.arange(t))
        return self.proj_out(self.decoder(h, memory, tgt_mask=mask))

    def forward(self, audio, labels):
        decoder_input_ids = shift_tokens_right(labels, PAD, BOS)
        logits = self.decode(self.encode(audio), decoder_input_ids)
        if args.fixed:
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)
        else:
            loss = for_causal_lm_loss(logits, labels, VOCAB)
        return loss, logits


model = Moonshine()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
train_audio, train_labels = make(32 * 40)
for step in range(args.steps):
    idx = torch.randint(0, len(train_audio), (32,), generator=g)
    loss, _ = model(train_audio[idx], train_labels[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

model.eval()
test_audio, test_labels = make(256)
with torch.no_grad():
    memory = model.encode(test_audio)
    ids = torch.full((256, 1), BOS)
    for _ in range(7):
        ids = torch.cat([ids, model.decode(memory, ids)[:, -1].argmax(-1, keepdim=True)], 1)
exact = 0
for i in range(256):
    want = [x for x in test_labels[i].tolist() if x != -100]
    got = ids[i, 1:].tolist()
    got = got[:got.index(EOS) + 1] if EOS in got else got
    exact += got == want
print(f"out_double_shift_labels_moonshine: {'CrossEntropyLoss' if args.fixed else 'ForCausalLMLoss (double shift)'}, "
      f"{args.steps} steps, last loss {loss.item():.3f}, greedy exact match {exact / 256:.3f}")
