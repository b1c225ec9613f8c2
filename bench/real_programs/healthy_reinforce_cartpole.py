"""REINFORCE on CartPole (simulated in-script): a noisy policy-gradient loss that does not go down.

Source: https://github.com/pytorch/examples/blob/main/reinforcement_learning/reinforce.py  (official
pytorch/examples, REINFORCE on gym's CartPole-v1)
Bug: none. The "loss" is -sum(log_prob * normalised return) over one episode: its sign and size
change every episode (the returns are standardised per episode and the episode length varies), so
it looks like noise and never decreases, while the episode reward climbs. The policy has
Dropout(p=0.6) left active while acting, as in the source. gym is not available, so CartPole-v1's
dynamics (Euler, tau 0.02, +-2.4 m, +-12 degrees, 500-step limit) are re-implemented in plain Python
(envs/cartpole.py).
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): mean episode reward 17.4 over the first 10 episodes, 112.1 over the
last 10 (100 episodes = 100 optimizer steps); running reward 10 -> 94.9.
Shrunk for the benchmark: 100 episodes (the source trains until the running reward passes 475).
"""
# expect: healthy
import argparse
import random
from collections import deque

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from envs.cartpole import CartPole
from torch.distributions import Categorical

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=100, help="episodes (one optimizer step each)")
parser.add_argument("--gamma", type=float, default=0.99)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(543)
rng = random.Random(543)


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)
        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


env = CartPole(rng)
policy = Policy()
optimizer = optim.Adam(policy.parameters(), lr=1e-2)
eps = torch.finfo(torch.float32).eps


def select_action(state):
    state = torch.tensor(state).float().unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    R = 0
    policy_loss = []
    returns = deque()
    for r in policy.rewards[::-1]:
        R = r + args.gamma * R
        returns.appendleft(R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns, strict=True):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    policy_loss.backward()
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]
    return policy_loss.item()


running_reward = 10
episode_rewards = []
for _ in range(args.steps):
    state, ep_reward = env.reset(), 0
    for _t in range(1, 10000):  # Don't infinite loop while learning
        action = select_action(state)
        state, reward, terminated, truncated = env.step(action)
        policy.rewards.append(reward)
        ep_reward += reward
        if terminated or truncated:
            break
    running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
    last_loss = finish_episode()
    episode_rewards.append(ep_reward)

first = sum(episode_rewards[:10]) / 10
last = sum(episode_rewards[-10:]) / 10
print(f"reinforce_cartpole: {args.steps} episodes, last policy loss {last_loss:.3f}, "
      f"mean reward first 10 {first:.1f}, last 10 {last:.1f}, running reward {running_reward:.1f}")
