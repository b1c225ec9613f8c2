"""PPO on CartPole (simulated in-script): a clipped-surrogate loss that jumps with every new rollout.

Source: https://github.com/nikhilbarhate99/PPO-PyTorch  (PPO.py unchanged for a discrete action
space: ActorCritic with Tanh layers, the old policy acting, K epochs of Adam on each rollout with
the actor at 3e-4 and the critic at 1e-3; train.py with the repo's CartPole-v1 settings from
PPO_colab.ipynb: rollouts of 1600 steps, K_epochs 40, eps_clip 0.2, gamma 0.99)
Bug: none. Each update fits 40 epochs on one rollout, so the loss falls within the rollout and
jumps when the next one brings new states, returns normalised anew and a new surrogate (0.15 at
step 39, 0.49 at step 40). The old policy, a copy of the policy loaded after each update, gathers
the data. Before neuraldbg told such losses apart, this run failed: `diverging` at step 51 (the
recent median 0.47 against a starting level of 0.24, held 167 steps), at 250 and 450, `spiking`
at 440.
Fix (--fixed): nothing to fix (accepted and ignored).
Printed metric (plain python): average reward 24.7 over the episodes of the first 1600 steps,
262.1 over those of the last 1600 (32,172 steps, 20 updates, 800 optimizer steps).
Shrunk for the benchmark: 32,000 environment steps (the repo's run: 100,000); gym's CartPole-v1
is envs/cartpole.py; no checkpoints or log files are written.
"""
# expect: healthy
import argparse
import random

import torch
import torch.nn as nn
from envs.cartpole import CartPole
from torch.distributions import Categorical

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--timesteps", type=int, default=32000)
parser.add_argument("--fixed", action="store_true", help="accepted and ignored: the program is correct")
args = parser.parse_args()

torch.manual_seed(0)
device = torch.device("cpu")


class RolloutBuffer:
    def __init__(self):
        self.actions = []
        self.states = []
        self.logprobs = []
        self.rewards = []
        self.state_values = []
        self.is_terminals = []

    def clear(self):
        del self.actions[:]
        del self.states[:]
        del self.logprobs[:]
        del self.rewards[:]
        del self.state_values[:]
        del self.is_terminals[:]


class ActorCritic(nn.Module):
    def __init__(self, state_dim, action_dim):
        super().__init__()
        self.actor = nn.Sequential(
            nn.Linear(state_dim, 64),
            nn.Tanh(),
            nn.Linear(64, 64),
            nn.Tanh(),
            nn.Linear(64, action_dim),
            nn.Softmax(dim=-1)
        )
        self.critic = nn.Sequential(
            nn.Linear(state_dim, 64),
            nn.Tanh(),
            nn.Linear(64, 64),
            nn.Tanh(),
            nn.Linear(64, 1)
        )

    def forward(self):
        raise NotImplementedError

    def act(self, state):
        action_probs = self.actor(state)
        dist = Categorical(action_probs)
        action = dist.sample()
        action_logprob = dist.log_prob(action)
        state_val = self.critic(state)
        return action.detach(), action_logprob.detach(), state_val.detach()

    def evaluate(self, state, action):
        action_probs = self.actor(state)
        dist = Categorical(action_probs)
        action_logprobs = dist.log_prob(action)
        dist_entropy = dist.entropy()
        state_values = self.critic(state)
        return action_logprobs, state_values, dist_entropy


class PPO:
    def __init__(self, state_dim, action_dim, lr_actor, lr_critic, gamma, K_epochs, eps_clip):
        self.gamma = gamma
        self.eps_clip = eps_clip
        self.K_epochs = K_epochs
        self.buffer = RolloutBuffer()
        self.policy = ActorCritic(state_dim, action_dim).to(device)
        self.optimizer = torch.optim.Adam([
            {'params': self.policy.actor.parameters(), 'lr': lr_actor},
            {'params': self.policy.critic.parameters(), 'lr': lr_critic}
        ])
        self.policy_old = ActorCritic(state_dim, action_dim).to(device)
        self.policy_old.load_state_dict(self.policy.state_dict())
        self.MseLoss = nn.MSELoss()

    def select_action(self, state):
        with torch.no_grad():
            state = torch.FloatTensor(state).to(device)
            action, action_logprob, state_val = self.policy_old.act(state)
        self.buffer.states.append(state)
        self.buffer.actions.append(action)
        self.buffer.logprobs.append(action_logprob)
        self.buffer.state_values.append(state_val)
        return action.item()

    def update(self):
        # Monte Carlo estimate of returns
        rewards = []
        discounted_reward = 0
        for reward, is_terminal in zip(reversed(self.buffer.rewards), reversed(self.buffer.is_terminals)):
            if is_terminal:
                discounted_reward = 0
            discounted_reward = reward + (self.gamma * discounted_reward)
            rewards.insert(0, discounted_reward)
        # Normalizing the rewards
        rewards = torch.tensor(rewards, dtype=torch.float32).to(device)
        rewards = (rewards - rewards.mean()) / (rewards.std() + 1e-7)
        old_states = torch.squeeze(torch.stack(self.buffer.states, dim=0)).detach().to(device)
        old_actions = torch.squeeze(torch.stack(self.buffer.actions, dim=0)).detach().to(device)
        old_logprobs = torch.squeeze(torch.stack(self.buffer.logprobs, dim=0)).detach().to(device)
        old_state_values = torch.squeeze(torch.stack(self.buffer.state_values, dim=0)).detach().to(device)
        advantages = rewards.detach() - old_state_values.detach()
        for _ in range(self.K_epochs):
            logprobs, state_values, dist_entropy = self.policy.evaluate(old_states, old_actions)
            state_values = torch.squeeze(state_values)
            ratios = torch.exp(logprobs - old_logprobs.detach())
            surr1 = ratios * advantages
            surr2 = torch.clamp(ratios, 1 - self.eps_clip, 1 + self.eps_clip) * advantages
            # final loss of clipped objective PPO
            loss = -torch.min(surr1, surr2) + 0.5 * self.MseLoss(state_values, rewards) - 0.01 * dist_entropy
            self.optimizer.zero_grad()
            loss.mean().backward()
            self.optimizer.step()
        # Copy new weights into old policy
        self.policy_old.load_state_dict(self.policy.state_dict())
        self.buffer.clear()


env = CartPole(random.Random(0))
max_ep_len = 400
update_timestep = max_ep_len * 4
ppo_agent = PPO(4, env.n_actions, lr_actor=0.0003, lr_critic=0.001, gamma=0.99, K_epochs=40, eps_clip=0.2)

time_step = 0
episodes = []               # (the step it ended at, its reward)
while time_step < args.timesteps:
    state = env.reset()
    current_ep_reward = 0
    for _t in range(1, max_ep_len + 1):
        action = ppo_agent.select_action(state)
        state, reward, terminated, truncated = env.step(action)
        done = terminated or truncated
        ppo_agent.buffer.rewards.append(reward)
        ppo_agent.buffer.is_terminals.append(done)
        time_step += 1
        current_ep_reward += reward
        if time_step % update_timestep == 0:
            ppo_agent.update()
        if done:
            break
    episodes.append((time_step, current_ep_reward))

first = [r for t, r in episodes if t <= update_timestep]
last = [r for t, r in episodes if t > time_step - update_timestep]
print(f"ppo_cartpole: {time_step} steps, {time_step // update_timestep} updates, average reward "
      f"{sum(first) / len(first):.1f} over the first {update_timestep} steps, "
      f"{sum(last) / len(last):.1f} over the last {update_timestep}")
