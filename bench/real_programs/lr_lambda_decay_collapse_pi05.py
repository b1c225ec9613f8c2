"""A robot policy's step-decay LambdaLR raises the decay *LR* (2.5e-6) to the number of drops, so after the first drop the lr collapses to ~0 and training stalls.

Source: https://github.com/open-edge-platform/physical-ai-studio/issues/403 ("[Bug]: lr_lambda in Pi0.5 and SmolVLA
collapses LR": "The current step-decay implementation in the LR scheduler causes the learning rate to collapse to
near-zero after the first decay step. This happens because scheduler_decay_lr is mistakenly used as a
multiplicative decay factor."), fixed by PR #407 (merged, commit 99c1c62 "fix: LR Collapse for SmolVLA and Pi05"):
`num_drops = step // drop_steps; decay_factor = decay_value**num_drops` -> `decay_ratio = decay_value /
self.config.optimizer_lr; num_drops = (step - warmup_steps) // drop_steps; return decay_ratio**num_drops`.
Program: policies/pi05/policy.py configure_optimizers + configs/physicalai/pi05.yaml: AdamW(lr=optimizer_lr,
weight_decay=0.01), grad-norm clip 1.0, LambdaLR stepped per optimizer step with linear warmup
(`step / max(1, warmup_steps)`) and then the step decay above; batch 8; behaviour-cloning regression of actions
from observations.
Bug: lr_lambda returns decay_value**num_drops with decay_value = 2.5e-6 (an LR, not a ratio), so at the first
drop the lr becomes optimizer_lr * 2.5e-6 (and 6e-12 after the second): the policy stops learning for the rest
of training.
Fix (--fixed): the merged fix: decay_ratio = decay_lr / optimizer_lr (0.1), drops counted after warmup.
Ported: Pi0.5 (PaliGemma + action expert, flow matching, ALOHA sim images) -> a 3-layer MLP mapping a 32-d
synthetic observation to a 14-d action (a fixed random nonlinear teacher), MSE loss; schedule shrunk with its
proportions: 100 epochs (~250k steps, ~8 drops) -> 600 steps (4 drops), warmup 1000 -> 4, decay every 30000 -> 120 steps;
optimizer_lr 2.5e-5 -> 1e-3 with decay_lr 2.5e-6 -> 1e-4 (same 0.1 ratio; decay_lr kept tiny so that the
buggy factor decay_lr**num_drops still zeroes the lr) so the small MLP learns within 1000 steps.
Printed metric (plain python): buggy lr at end 1e-23, last-50 train MSE 0.342, val MSE 0.3365;
fixed lr at end 1e-7, last-50 train MSE 0.306, val MSE 0.3007 (both 0.315 at step 120, before the first drop).
"""
# expect: cause=learning_rate
# ruff: noqa: E501
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--fixed", action="store_true", help="decay by decay_lr/optimizer_lr per drop")
args = parser.parse_args()
torch.manual_seed(0)

optimizer_lr = 1e-3
optimizer_weight_decay = 0.01
optimizer_grad_clip_norm = 1.0
warmup_steps = 4
drop_steps = 120
decay_value = 1e-4
total_steps = 600
batch_size = 8

teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 14))
for p in teacher.parameters():
    p.requires_grad_(False)
    p.mul_(3.0)


def batch(n=batch_size):
    obs = torch.randn(n, 32)
    return obs, teacher(obs)


policy = nn.Sequential(nn.Linear(32, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 14))
optimizer = torch.optim.AdamW(policy.parameters(), lr=optimizer_lr, weight_decay=optimizer_weight_decay)

if args.fixed:
    decay_ratio = decay_value / optimizer_lr

    def lr_lambda(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        num_drops = (step - warmup_steps) // drop_steps
        return decay_ratio**num_drops
else:
    def lr_lambda(step: int) -> float:
        num_drops = step // drop_steps
        decay_factor = decay_value**num_drops
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return decay_factor

scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

losses = []
for step in range(total_steps):
    obs, action = batch()
    loss = nn.functional.mse_loss(policy(obs), action)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), optimizer_grad_clip_norm)
    optimizer.step()
    scheduler.step()
    losses.append(loss.item())

with torch.no_grad():
    obs, action = batch(4000)
    val = nn.functional.mse_loss(policy(obs), action).item()
print(f"lr_lambda_decay_collapse_pi05: lr at end {optimizer.param_groups[0]['lr']:.3g}, train loss first "
      f"{losses[0]:.4f}, at step 120 {sum(losses[110:120]) / 10:.4f}, last-50 mean {sum(losses[-50:]) / 50:.4f}, "
      f"val MSE {val:.4f}")
