"""Steps of uneven size: a loss over a number of values that changes from step to step.

Policy-gradient programs sum their loss over an episode. pytorch/examples' actor-critic
calls the policy once per time step, with gradients, and sums the episode's losses; a
REINFORCE loop (Deep Reinforcement Learning in Action) acts without gradients, then runs
the episode's states as one batch and sums `-log(p) * return` over it. As the agent learns
to balance longer, each step holds more forwards or more values and the loss grows with
them: its level says nothing of progress, as with a GAN's two objectives, and the loss
detector judges only non-finite values. Supervised steps hold the same number of forwards
(one, or a fixed accumulation) and a loss function's mean, or a sum over a fixed batch,
whatever the last batch's size; an evaluation pass now and then with gradients on changes
the count on a few steps, not on most of them. An episode's steps are uneven from the
first: the first LOOKED steps are looked at, and no later one."""
from __future__ import annotations

from collections import deque

WINDOW = 20         # the last steps looked at
LOOKED = 200        # steps looked at in all: an episode's loss is uneven from the start
CHANGES = 10        # steps among them whose size differs from the step before's
SPREAD = 2          # and the largest size at least this many times the smallest


class UnevenSteps:
    """Fed each step's count of outermost forwards with gradients and of the values its loss
    summed (backward.summed_over, 0 for none); `found` once either changes on most steps by
    a factor of SPREAD (and from then on)."""

    def __init__(self):
        self.found = False
        self._sizes: deque = deque(maxlen=WINDOW + 1)
        self._forwards = 0      # the hooks' count of forwards at the last step's end
        self._looked = 0

    def take(self, hooks, backward) -> bool:
        """At a step's end: its counts, taken from the hooks and the backward wrapper (told
        to stop counting sums once found, or after LOOKED steps)."""
        if self._looked >= LOOKED or self.found:
            return self.found
        self._looked += 1
        summed = 0
        if backward is not None:
            summed, backward.summed = backward.summed, 0
        n, self._forwards = hooks.forwards - self._forwards, hooks.forwards
        found = self.step(n, summed)
        if backward is not None:
            backward.sums = not found and self._looked < LOOKED
        return found

    def step(self, forwards: int, summed: int) -> bool:
        if self.found or forwards <= 0:
            return self.found
        sizes = self._sizes
        sizes.append((forwards, summed))
        changes = sum(a != b for a, b in zip(sizes, list(sizes)[1:]))
        if changes >= CHANGES:
            for i in (0, 1):
                counts = [s[i] for s in sizes if s[i] > 0]
                if counts and max(counts) >= SPREAD * min(counts):
                    self.found = True
        return self.found
