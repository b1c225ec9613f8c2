"""Multilogue-Net emotion classifier trained with its two class weights swapped: the rare class weighs least.

Source: https://github.com/amanshenoy/multilogue-net/issues/21  (GitHub issue "Possible error in loss weight
assignment": "Consider emotion `fear` ... the label 0 should be given less weight given it is the higher
frequency label compared to label 1. But you code seems to do the opposite."; the author: "looking into it
you seem to be right. Flipping them should be the right way to go.")
Program: train_emotion.py and model.py of the repository (HEAD b44dcb1): CategoricalModel (six
MultilogueNet GRU-cell recurrences, forward and backward over the dialogue for text, audio and video;
linear + ReLU; three BiModalAttention fusions; a linear layer and log_softmax over 2 classes), MaskedNLLLoss
(NLLLoss(weight, reduction='sum') over the masked utterances / the summed weights), optim.Adam(lr=0.0001,
weight_decay=0.00001), batch 128, --class-weight on by default, the emotion `fear`:
loss_weights = [1/0.0816, 1/0.9184].
Bug: 8.16% of the utterances show fear (label 1), yet label 0, the 91.84% class, gets the weight 1/0.0816 =
12.3 and label 1 gets 1.09: the weighting meant to lift the rare class buries it (x11 less than unweighted).
Fix (--fixed): the author's: the two weights flipped, [1/0.9184, 1/0.0816].
Ported: synthetic CMU-MOSEI-like dialogues (16 per batch of up to 12 utterances, two speakers; each
utterance's text, audio and video features carry a weak, noisy cue of its label; 8.16% label 1) in place of
the pickled MOSEI features; D_m_text = D_m_audio = D_m_context = 32 (the repository: 300, 384, 300),
D_m_video 35, D_g = D_p = 32 (150), D_e = D_h = 32 (100); batch 16 dialogues (128); 10 epochs of 10
batches (50 epochs of MOSEI); Adam's lr raised from 0.0001 to 0.001 so that these 100 steps learn something
(at 0.0001 neither version learns in 300 steps: fear recall 0.000 buggy, 0.025 fixed); only the training
part of train_or_eval_model (the test pass is run once at the end).
Printed metric (plain python): test recall of the fear class, macro F1 and accuracy (masked): buggy 0.000,
0.480, 0.922 (never predicts fear); fixed 0.875, 0.900, 0.969.
"""
# expect: cause=architecture

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.utils.rnn import pad_sequence

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--fixed", action="store_true", help="flip the two class weights")
args = parser.parse_args()

torch.manual_seed(393)


class SimpleAttention(nn.Module):
    def __init__(self, input_dim):
        super().__init__()
        self.input_dim = input_dim
        self.scalar = nn.Linear(self.input_dim,1,bias=False)

    def forward(self, M):
        scale = self.scalar(M)
        alpha = F.softmax(scale, dim=0).permute(1,2,0)
        attn_pool = torch.bmm(alpha, M.transpose(0,1))[:,0,:]
        return attn_pool, alpha

class BiModalAttention(nn.Module):
    def __init__(self, mode1, mode2):
        super().__init__()
        self.mode1 = mode1.permute(1, 0, 2)
        self.mode2 = mode2.permute(1, 0, 2)

    def forward(self):
        c1, c2 = (torch.bmm(self.mode1, self.mode2.transpose(1, 2)),
                  torch.bmm(self.mode2, self.mode1.transpose(1, 2)))
        n1, n2 = F.softmax(c1, dim=-1), F.softmax(c2, dim=-1)
        o1, o2 = torch.bmm(n1, self.mode2), torch.bmm(n2, self.mode1)
        a1, a2 = o1 * self.mode1, o2 * self.mode2
        return torch.cat([a1, a2], dim=-1).permute(1, 0, 2)

class MultilogueNetCell(nn.Module):
    def __init__(self, D_m_party, D_m_context, D_g, D_p , D_e, D_a =100, dropout=0.5):
        super().__init__()
        self.D_m_party, self.D_m_context = D_m_party, D_m_context
        self.D_g, self.D_p, self.D_e = D_g, D_p, D_e
        self.g_cell = nn.GRUCell(D_m_context + D_p, D_g)
        self.p_cell = nn.GRUCell(D_m_party + D_g, D_p)
        self.e_cell = nn.GRUCell(D_p, D_e)
        self.dropout = nn.Dropout(dropout)
        self.attention = SimpleAttention(D_g)

    def _select_parties(self, X, indices):
        q0_sel = []
        for idx, j in zip(indices, X):
            q0_sel.append(j[idx].unsqueeze(0))
        q0_sel = torch.cat(q0_sel,0)
        return q0_sel

    def forward(self, U, U_context, qmask, g_hist, q0, e0):
        qm_idx = torch.argmax(qmask, 1)
        q0_sel = self._select_parties(q0, qm_idx)
        g_ = self.g_cell(torch.cat([U_context,q0_sel], dim=1),
                torch.zeros(U_context.size()[0],self.D_g).type(U.type()) if g_hist.size()[0]==0 else
                g_hist[-1])
        g_ = self.dropout(g_)
        if g_hist.size()[0]==0:
            c_ = torch.zeros(U_context.size()[0],self.D_g).type(U.type())
            alpha = None
        else:
            c_, alpha = self.attention(g_hist)
        U_c_ = torch.cat([U,c_], dim=1).unsqueeze(1).expand(-1, qmask.size()[1],-1)
        qs_ = self.p_cell(U_c_.contiguous().view(-1, self.D_m_party+self.D_g),
                          q0.view(-1, self.D_p)).view(U.size()[0],-1,self.D_p)
        qs_ = self.dropout(qs_)
        ql_ = q0
        qmask_ = qmask.unsqueeze(2)
        q_ = ql_*(1-qmask_) + qs_*qmask_
        e0 = torch.zeros(qmask.size()[0], self.D_e).type(U.type()) if e0.size()[0]==0\
                else e0
        e_ = self.e_cell(self._select_parties(q_,qm_idx), e0)
        e_ = self.dropout(e_)
        return g_,q_,e_,alpha

class MultilogueNet(nn.Module):
    def __init__(self, D_m_party, D_m_context, D_g, D_p, D_e, D_a=100, dropout=0.5):
        super().__init__()
        self.D_m_party, self.D_m_context = D_m_party, D_m_context
        self.D_g, self.D_p, self.D_e = D_g, D_p, D_e
        self.dropout = nn.Dropout(dropout)
        self.multilogue_cell = MultilogueNetCell(D_m_party, D_m_context, D_g, D_p, D_e, D_a, dropout)

    def forward(self, U, U_context, qmask):
        g_hist = torch.zeros(0).type(U_context.type())
        q_ = torch.zeros(qmask.size()[1], qmask.size()[2],
                                    self.D_p).type(U.type())
        e_ = torch.zeros(0).type(U.type())
        e = e_
        alpha = []
        for u_,uc_,qmask_ in zip(U, U_context, qmask):
            g_, q_, e_, alpha_ = self.multilogue_cell(u_, uc_, qmask_, g_hist, q_, e_)
            g_hist = torch.cat([g_hist, g_.unsqueeze(0)],0)
            e = torch.cat([e, e_.unsqueeze(0)],0)
            if alpha_ is not None:
                alpha.append(alpha_[:,0,:])
        return e,alpha

class CategoricalModel(nn.Module):
    def __init__(self, D_m_party_text,D_m_party_audio,D_m_party_video, D_m_context, D_g, D_p, D_e, D_h,
                 n_classes=7, D_a=100, dropout_rec=0.5, dropout=0.5):
        super().__init__()
        self.D_m_party_text = D_m_party_text
        self.D_m_party_audio = D_m_party_audio
        self.D_m_party_video = D_m_party_video
        self.D_m_context = D_m_context
        self.D_g       = D_g
        self.D_p       = D_p
        self.D_e       = D_e
        self.D_h       = D_h
        self.n_classes = n_classes
        self.dropout   = nn.Dropout(dropout)
        self.dropout_rec = nn.Dropout(dropout+0.15)
        self.multilogue_net_f_t = MultilogueNet(D_m_party_text, D_m_context, D_g, D_p, D_e, D_a, dropout_rec)
        self.multilogue_net_r_t = MultilogueNet(D_m_party_text, D_m_context, D_g, D_p, D_e, D_a, dropout_rec)
        self.multilogue_net_f_a = MultilogueNet(D_m_party_audio, D_m_context, D_g, D_p, D_e, D_a, dropout_rec)
        self.multilogue_net_r_a = MultilogueNet(D_m_party_audio, D_m_context, D_g, D_p, D_e, D_a, dropout_rec)
        self.multilogue_net_f_v = MultilogueNet(D_m_party_video, D_m_context, D_g, D_p, D_e, D_a, dropout_rec)
        self.multilogue_net_r_v = MultilogueNet(D_m_party_video, D_m_context, D_g, D_p, D_e, D_a, dropout_rec)
        self.linear     = nn.Linear(2*D_e, 2*D_h)
        self.smax_fc    = nn.Linear(18*D_h, n_classes)

    def _reverse_seq(self, X, mask):
        X_ = X.transpose(0,1)
        mask_sum = torch.sum(mask, 1).int()
        xfs = []
        for x, c in zip(X_, mask_sum):
            xf = torch.flip(x[:c], [0])
            xfs.append(xf)
        return pad_sequence(xfs)

    def forward(self, U_t, U_a,U_v, U_context, qmask, umask):
        emotions_f_t, alpha_f_t = self.multilogue_net_f_t(U_t, U_context, qmask)
        emotions_f_a, alpha_f_a = self.multilogue_net_f_a(U_a, U_context, qmask)
        emotions_f_v, alpha_f_v = self.multilogue_net_f_v(U_v, U_context, qmask)
        emotions_f_t = self.dropout_rec(emotions_f_t)
        emotions_f_a = self.dropout_rec(emotions_f_a)
        emotions_f_v = self.dropout_rec(emotions_f_v)
        rev_U_t = self._reverse_seq(U_t, umask)
        rev_U_a = self._reverse_seq(U_a, umask)
        rev_U_v = self._reverse_seq(U_v, umask)
        rev_U_context = self._reverse_seq(U_context, umask)
        rev_qmask = self._reverse_seq(qmask, umask)
        emotions_b_t, alpha_b_t = self.multilogue_net_r_t(rev_U_t, rev_U_context, rev_qmask)
        emotions_b_t = self._reverse_seq(emotions_b_t, umask)
        emotions_b_t = self.dropout_rec(emotions_b_t)
        emotions_t = torch.cat([emotions_f_t,emotions_b_t],dim=-1)
        emotions_b_a, alpha_b_a = self.multilogue_net_r_a(rev_U_a, rev_U_context, rev_qmask)
        emotions_b_a = self._reverse_seq(emotions_b_a, umask)
        emotions_b_a = self.dropout_rec(emotions_b_a)
        emotions_a = torch.cat([emotions_f_a,emotions_b_a],dim=-1)
        emotions_b_v, alpha_b_v = self.multilogue_net_r_v(rev_U_v, rev_U_context, rev_qmask)
        emotions_b_v = self._reverse_seq(emotions_b_v, umask)
        emotions_b_v = self.dropout_rec(emotions_b_v)
        emotions_v = torch.cat([emotions_f_v,emotions_b_v],dim=-1)
        hidden_t = F.relu(self.linear(emotions_t))
        hidden_a = F.relu(self.linear(emotions_a))
        hidden_v = F.relu(self.linear(emotions_v))
        hidden_t = self.dropout(hidden_t)
        hidden_a = self.dropout(hidden_a)
        hidden_v = self.dropout(hidden_v)
        hidden_at = BiModalAttention(hidden_t, hidden_a)
        hidden_tv = BiModalAttention(hidden_t, hidden_v)
        hidden_va = BiModalAttention(hidden_v, hidden_a)
        log_prob =  F.log_softmax(self.smax_fc(torch.cat([hidden_at(),hidden_va(), hidden_tv(),
                                                          hidden_t,hidden_a, hidden_v],dim=-1)), 2)
        return log_prob, alpha_f_t, alpha_b_t

class MaskedNLLLoss(nn.Module):
    def __init__(self, weight=None):
        super().__init__()
        self.weight = weight
        self.loss = nn.NLLLoss(weight=weight, reduction='sum')

    def forward(self, pred, target, mask):
        mask_ = mask.view(-1,1)
        if self.weight is None:
            loss = self.loss(pred*mask_, target)/torch.sum(mask)
        else:
            loss = self.loss(pred*mask_, target) / torch.sum(self.weight[target]*mask_.squeeze())
        return loss


D_m_text, D_m_audio, D_m_video, D_m_context = 32, 32, 35, 32          # 300, 384, 35, 300
D_g, D_p, D_e, D_h, D_a = 32, 32, 32, 32, 100                         # 150, 150, 100, 100, 100
P_FEAR = 0.0816


def make(n_dialogues, seed):
    """Dialogues as the MOSEICategorical collate_fn returns them: (seq, batch, dim) features,
    qmask (seq, batch, 2), umask (batch, seq), labels (batch, seq)."""
    g = torch.Generator().manual_seed(seed)
    dirs = {d: torch.randn(d, generator=torch.Generator().manual_seed(7 + d)) for d in (32, 35)}
    data = []
    for _ in range(n_dialogues):
        L = int(torch.randint(4, 13, (1,), generator=g))
        y = (torch.rand(L, generator=g) < P_FEAR).long()
        feats = []
        for d, s in ((D_m_text, 0.6), (D_m_video, 0.3), (D_m_audio, 0.3)):
            x = (torch.randn(L, d, generator=g)
                 + s * (2 * y.float() - 1).unsqueeze(1) * dirs[d] / dirs[d].norm() * d ** 0.5 / 2)
            feats.append(x)
        spk = torch.randint(0, 2, (L,), generator=g)
        qmask = torch.stack([spk == 0, spk == 1], 1).float()
        data.append((feats[0], feats[1], feats[2], qmask, torch.ones(L), y))
    return data


def collate(batch):
    cols = list(zip(*batch))
    return [pad_sequence(cols[i]) if i < 4 else pad_sequence(cols[i], True) for i in range(6)]


def train_or_eval_model(model, loss_function, dataloader, optimizer=None, train=False):
    preds, labels, masks = [], [], []
    model.train() if train else model.eval()
    for data in dataloader:
        if train:
            optimizer.zero_grad()
        textf, visuf, acouf, qmask, umask, label = data
        log_prob, alpha_f, alpha_b = model(textf, acouf, visuf, textf, qmask, umask)
        lp_ = log_prob.transpose(0, 1).contiguous().view(-1, log_prob.size()[2])
        labels_ = label.view(-1)
        loss = loss_function(lp_, labels_, umask)
        preds.append(torch.argmax(lp_, 1))
        labels.append(labels_)
        masks.append(umask.view(-1))
        if train:
            loss.backward()
            optimizer.step()
    return torch.cat(preds), torch.cat(labels), torch.cat(masks)


model = CategoricalModel(D_m_text, D_m_audio, D_m_video, D_m_context, D_g, D_p, D_e, D_h,
                         n_classes=2, dropout_rec=0.1, dropout=0.5)
loss_weights = torch.FloatTensor([1 / 0.9184, 1 / 0.0816] if args.fixed else   # emotion == 'fear'
                                 [1 / 0.0816, 1 / 0.9184])
loss_function = MaskedNLLLoss(loss_weights)
optimizer = optim.Adam(model.parameters(), lr=0.001, weight_decay=0.00001)  # repository: lr 0.0001

train_set = make(160, 1)
test_set = make(200, 2)
batch_size = 16
for e in range(args.epochs):
    order = torch.randperm(len(train_set)).tolist()              # SubsetRandomSampler
    loader = [collate([train_set[i] for i in order[j:j + batch_size]])
              for j in range(0, len(order), batch_size)]
    train_or_eval_model(model, loss_function, loader, optimizer, True)

with torch.no_grad():
    loader = [collate(test_set[j:j + batch_size]) for j in range(0, len(test_set), batch_size)]
    pred, lab, mask = train_or_eval_model(model, loss_function, loader)
pred, lab = pred[mask > 0], lab[mask > 0]
acc = (pred == lab).float().mean().item()
f1s = []
for c in (0, 1):
    tp = ((pred == c) & (lab == c)).sum().item()
    prec = tp / max(1, (pred == c).sum().item())
    rec = tp / max(1, (lab == c).sum().item())
    f1s.append(0 if tp == 0 else 2 * prec * rec / (prec + rec))
recall1 = ((pred == 1) & (lab == 1)).sum().item() / max(1, (lab == 1).sum().item())
print(f"multilogue_flipped_class_weights: fear recall {recall1:.3f}, macro F1 {sum(f1s) / 2:.3f}, "
      f"accuracy {acc:.3f} ({(lab == 1).sum().item()} fear of {len(lab)} utterances)")
