"""A3C's worker on CartPole (simulated in-script): a local network's gradients step the global one.

Source: https://github.com/MorvanZhou/pytorch-A3C/blob/master/discrete_A3C.py (with its utils.py
and shared_adam.py): Net (policy pi1/pi2 and value v1/v2, weights normal(0, 0.1), biases 0),
SharedAdam over the global net (lr 1e-4, betas (0.92, 0.999)), UPDATE_GLOBAL_ITER 5, GAMMA 0.9,
the loss c_loss + a_loss with Categorical's log_prob, and push_and_pull: the local net's
loss.backward(), its gradients handed to the global net's parameters (gp._grad = lp.grad), the
global optimizer's step, then lnet.load_state_dict(gnet.state_dict()).
Bug: none. No optimizer holds the local network, yet it gets gradients: what a stale optimizer
looks like. Before neuraldbg told them apart, this run failed: every layer of the local network
`frozen` "in no optimizer" from step 2 to the end, though its weights are loaded anew at every
step and the episodes grow longer.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): the mean episode length of each 50 episodes: 19.7 over the first
50, 102.8 at episodes 251-300, 36.6 over the last 50 (one worker at lr 1e-4 learns unsteadily).
Changed for the benchmark: one worker, in the main process (the original's mp.Process workers
would each be observed in their own process); gym's CartPole-v1 is envs/cartpole.py, with the
original's 200-step limit (CartPole-v0); 500 episodes (MAX_EP 3000); SharedAdam's state['step']
a tensor, as torch 2 asks.
"""
# expect: healthy
import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from envs.cartpole import CartPole

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--episodes", type=int, default=500)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

UPDATE_GLOBAL_ITER = 5
GAMMA = 0.9
N_S, N_A = 4, 2
random.seed(0)
torch.manual_seed(0)


def v_wrap(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def set_init(layers):
    for layer in layers:
        nn.init.normal_(layer.weight, mean=0., std=0.1)
        nn.init.constant_(layer.bias, 0.)


class SharedAdam(torch.optim.Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        for group in self.param_groups:
            for p in group['params']:
                state = self.state[p]
                state['step'] = torch.tensor(0.)
                state['exp_avg'] = torch.zeros_like(p.data)
                state['exp_avg_sq'] = torch.zeros_like(p.data)
                state['exp_avg'].share_memory_()
                state['exp_avg_sq'].share_memory_()


class Net(nn.Module):
    def __init__(self, s_dim, a_dim):
        super().__init__()
        self.pi1 = nn.Linear(s_dim, 128)
        self.pi2 = nn.Linear(128, a_dim)
        self.v1 = nn.Linear(s_dim, 128)
        self.v2 = nn.Linear(128, 1)
        set_init([self.pi1, self.pi2, self.v1, self.v2])
        self.distribution = torch.distributions.Categorical

    def forward(self, x):
        pi1 = torch.tanh(self.pi1(x))
        logits = self.pi2(pi1)
        v1 = torch.tanh(self.v1(x))
        values = self.v2(v1)
        return logits, values

    def choose_action(self, s):
        self.eval()
        logits, _ = self.forward(s)
        prob = F.softmax(logits, dim=1).data
        m = self.distribution(prob)
        return int(m.sample()[0])

    def loss_func(self, s, a, v_t):
        self.train()
        logits, values = self.forward(s)
        td = v_t - values
        c_loss = td.pow(2)
        probs = F.softmax(logits, dim=1)
        m = self.distribution(probs)
        exp_v = m.log_prob(a) * td.detach().squeeze()
        a_loss = -exp_v
        return (c_loss + a_loss).mean()


def push_and_pull(opt, lnet, gnet, done, s_, bs, ba, br, gamma):
    if done:
        v_s_ = 0.
    else:
        v_s_ = lnet.forward(v_wrap(s_)[None, :])[-1].data[0, 0].item()
    buffer_v_target = []
    for r in br[::-1]:
        v_s_ = r + gamma * v_s_
        buffer_v_target.append(v_s_)
    buffer_v_target.reverse()
    loss = lnet.loss_func(v_wrap(bs), v_wrap(ba, torch.int64), v_wrap(buffer_v_target)[:, None])
    opt.zero_grad()
    loss.backward()
    for lp, gp in zip(lnet.parameters(), gnet.parameters()):
        gp._grad = lp.grad
    opt.step()
    lnet.load_state_dict(gnet.state_dict())


gnet = Net(N_S, N_A)
gnet.share_memory()
opt = SharedAdam(gnet.parameters(), lr=1e-4, betas=(0.92, 0.999))
lnet = Net(N_S, N_A)
env = CartPole(random.Random(0))
total_step, lengths = 1, []
for g_ep in range(args.episodes):
    s = env.reset()
    buffer_s, buffer_a, buffer_r = [], [], []
    while True:
        a = lnet.choose_action(v_wrap(s)[None, :])
        s_, r, terminated, truncated = env.step(a)
        done = terminated or env.t >= 200
        if done:
            r = -1
        buffer_a.append(a)
        buffer_s.append(s)
        buffer_r.append(r)
        if total_step % UPDATE_GLOBAL_ITER == 0 or done:
            push_and_pull(opt, lnet, gnet, done, s_, buffer_s, buffer_a, buffer_r, GAMMA)
            buffer_s, buffer_a, buffer_r = [], [], []
            if done:
                lengths.append(env.t)
                break
        s = s_
        total_step += 1
    if (g_ep + 1) % 50 == 0:
        print(f"episodes {g_ep - 48}-{g_ep + 1}: mean length {sum(lengths[-50:]) / 50:.1f}")
