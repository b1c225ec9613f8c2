"""DQN on CartPole (simulated in-script): a TD loss against a target network, rising as the agent learns.

Source: https://github.com/pytorch/tutorials/blob/main/intermediate_source/reinforcement_q_learning.py
(the official PyTorch tutorial "Reinforcement Learning (DQN)": replay memory, a target network
soft-updated with TAU 0.005, Huber loss, AdamW with amsgrad, gradient values clipped at 100)
Bug: none. The loss is the Huber distance between Q(s, a) and r + 0.99 max Q_target(s'): its targets
come from a copy of the network and grow with the returns the agent reaches, and replay batches give
one-step spikes (3x the recent median and more). Before neuraldbg told such losses apart, this run
failed: 9 lasting failures, `spiking` from step 4503 (13 spikes in all), `diverging` from step 7190
(the recent median 1.5x the starting level 0.51), and the top hypothesis blamed the learning rate
(0.64), though the update ratios in its summaries stayed under 1.8e-3 of the weights a step.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): mean episode length 17.2 over the first 50 episodes, 239.7 over the
last 20 (250 episodes, 19,522 optimizer steps).
Shrunk for the benchmark: 250 episodes (the tutorial trains 600 on a GPU); gymnasium's CartPole-v1
is envs/cartpole.py; the tutorial's plotting prints instead.
"""
# expect: healthy
import argparse
import math
import random
from collections import deque, namedtuple
from itertools import count

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from envs.cartpole import CartPole

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--episodes", type=int, default=250)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

random.seed(0)
torch.manual_seed(0)
env = CartPole(random.Random(0))
device = torch.device("cpu")

Transition = namedtuple("Transition", ("state", "action", "next_state", "reward"))


class ReplayMemory:
    def __init__(self, capacity):
        self.memory = deque([], maxlen=capacity)

    def push(self, *args):
        """Save a transition"""
        self.memory.append(Transition(*args))

    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)

    def __len__(self):
        return len(self.memory)


class DQN(nn.Module):
    def __init__(self, n_observations, n_actions):
        super().__init__()
        self.layer1 = nn.Linear(n_observations, 128)
        self.layer2 = nn.Linear(128, 128)
        self.layer3 = nn.Linear(128, n_actions)

    def forward(self, x):
        x = F.relu(self.layer1(x))
        x = F.relu(self.layer2(x))
        return self.layer3(x)


BATCH_SIZE = 128
GAMMA = 0.99
EPS_START = 0.9
EPS_END = 0.05
EPS_DECAY = 1000
TAU = 0.005
LR = 1e-4

n_actions = env.n_actions
state = env.reset()
n_observations = len(state)

policy_net = DQN(n_observations, n_actions).to(device)
target_net = DQN(n_observations, n_actions).to(device)
target_net.load_state_dict(policy_net.state_dict())

optimizer = optim.AdamW(policy_net.parameters(), lr=LR, amsgrad=True)
memory = ReplayMemory(10000)
steps_done = 0


def select_action(state):
    global steps_done
    sample = random.random()
    eps_threshold = EPS_END + (EPS_START - EPS_END) * math.exp(-1. * steps_done / EPS_DECAY)
    steps_done += 1
    if sample > eps_threshold:
        with torch.no_grad():
            return policy_net(state).max(1).indices.view(1, 1)
    else:
        return torch.tensor([[random.randrange(n_actions)]], device=device, dtype=torch.long)


def optimize_model():
    if len(memory) < BATCH_SIZE:
        return 0
    transitions = memory.sample(BATCH_SIZE)
    batch = Transition(*zip(*transitions))
    non_final_mask = torch.tensor(tuple(map(lambda s: s is not None, batch.next_state)),
                                  device=device, dtype=torch.bool)
    non_final_next_states = torch.cat([s for s in batch.next_state if s is not None])
    state_batch = torch.cat(batch.state)
    action_batch = torch.cat(batch.action)
    reward_batch = torch.cat(batch.reward)

    state_action_values = policy_net(state_batch).gather(1, action_batch)
    next_state_values = torch.zeros(BATCH_SIZE, device=device)
    with torch.no_grad():
        next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
    expected_state_action_values = (next_state_values * GAMMA) + reward_batch

    criterion = nn.SmoothL1Loss()
    loss = criterion(state_action_values, expected_state_action_values.unsqueeze(1))
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_value_(policy_net.parameters(), 100)
    optimizer.step()
    return 1


episode_durations = []
optimizer_steps = 0
for _ in range(args.episodes):
    state = env.reset()
    state = torch.tensor(state, dtype=torch.float32, device=device).unsqueeze(0)
    for t in count():
        action = select_action(state)
        observation, reward, terminated, truncated = env.step(action.item())
        reward = torch.tensor([reward], device=device)
        done = terminated or truncated
        next_state = None if terminated else \
            torch.tensor(observation, dtype=torch.float32, device=device).unsqueeze(0)
        memory.push(state, action, next_state, reward)
        state = next_state
        optimizer_steps += optimize_model()
        # soft update of the target network's weights: θ′ ← τ θ + (1 −τ )θ′
        target_net_state_dict = target_net.state_dict()
        policy_net_state_dict = policy_net.state_dict()
        for key in policy_net_state_dict:
            target_net_state_dict[key] = policy_net_state_dict[key] * TAU \
                + target_net_state_dict[key] * (1 - TAU)
        target_net.load_state_dict(target_net_state_dict)
        if done:
            episode_durations.append(t + 1)
            break

first = sum(episode_durations[:50]) / 50
last = sum(episode_durations[-20:]) / 20
print(f"dqn_cartpole: {args.episodes} episodes, {optimizer_steps} optimizer steps, mean episode "
      f"length first 50 {first:.1f}, last 20 {last:.1f}")
