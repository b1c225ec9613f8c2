"""Copies of a trained model run without gradients: a loss whose targets move with training.

A DQN's target network, PPO's old policy, the momentum encoder of BYOL or MoCo, a mean
teacher: a model built like one being trained (the same parameter shapes, in the same order),
whose parameters are not the trained ones, called in training mode with gradients off (or
with gradients on and every parameter frozen: DINO's EMA teacher). Such a
copy computes the targets (or gathers the data) that the trained model's loss is measured
against, and these move as training goes: a DQN's TD targets grow with the returns the agent
reaches, PPO's loss jumps with each new rollout. The loss's level then says nothing of
progress, as with a GAN's two objectives: the loss detector judges only non-finite values.

What is not a copy: the trained model itself under `no_grad` (a validation pass), a model in
eval() (an EMA model being evaluated), a teacher of another architecture (knowledge
distillation: its targets are fixed, and the loss's level is judged). The trained model
itself is a policy acting, though, where it runs in training mode with gradients off on
batches of at most 1/ACTING of its training batch's rows, before its first step and again
after: its rollouts are the data and the returns its loss is measured against (CleanRL's PPO,
whose one agent acts and learns: the value loss rises as the returns grow).
"""
from __future__ import annotations

import weakref

from .naming import unwrap

MAX_SEEN = 64       # modules remembered as checked (a model made anew at each call is not kept)
ACTING = 4          # a policy acts on at most 1/ACTING of the rows it is trained on


def shapes(module) -> tuple:
    """The model's class and its parameters' shapes, in order: what a copy shares with it
    (a model wrapped by DDP or torch.compile, by what it wraps)."""
    return (type(unwrap(module)).__name__, *(tuple(p.shape) for p in module.parameters()))


class ModelCopies:
    """Watches the outermost calls made with gradients off; `found` once one is a copy of a
    model trained with gradients (one of the registry's roots)."""

    def __init__(self, registry):
        self.registry = registry
        self.found = False
        self._seen: dict = {}           # id(module) -> weakref: called without gradients
        self._news = False              # one seen since the last comparison
        self._roots = 0                 # roots at the last comparison
        self.training_ids: set = set()  # ids of models called with a trainable parameter
        self._rows: dict = {}           # id(model) -> rows of its first call with gradients
        self._acts: dict = {}           # id(model) -> [weakref, fewest rows, first step, last]

    def saw(self, module, rows: int | None = None, step: int = 0) -> None:
        """An outermost call in training mode with gradients off (once per forward), on a
        batch of `rows` (None: not known) at step `step`."""
        if self.found:
            return
        key = id(module)
        if rows is not None:
            act = self._acts.get(key)
            if act is not None and act[0]() is module:
                act[1], act[3] = min(act[1], rows), step
            elif len(self._acts) < MAX_SEEN:
                self._acts[key] = [weakref.ref(module), rows, step, step]
        entry = self._seen.get(key)
        if entry is not None and entry() is module:
            return
        if next(module.parameters(), None) is None or len(self._seen) >= MAX_SEEN:
            return
        self._seen[key] = weakref.ref(module)
        self._news = True

    def saw_frozen(self, module, rows: int | None = None) -> None:
        """An outermost call in training mode with gradients on, of `rows`: a copy if none of
        its parameters requires a gradient (a model found training is not looked at again)."""
        if self.found:
            return
        if _trains(module):
            if len(self.training_ids) < MAX_SEEN:
                self.training_ids.add(id(module))
                if rows is not None:
                    self._rows[id(module)] = rows
        else:
            self.saw(module)

    def check(self) -> bool:
        """At a step's end: whether a copy has been seen (compared when either side is new),
        or a policy acting."""
        roots = self.registry.roots
        if not self.found and self._acts and self._acting():
            self.found = True
        if self.found or not (self._news or self._seen and len(roots) != self._roots):
            return self.found
        self._news, self._roots = False, len(roots)
        trained = {shapes(r) for ref in list(roots.values())
                   if (r := ref()) is not None and _trains(r)}
        owners = self.registry.owners
        for key, ref in list(self._seen.items()):
            m = ref()
            if m is None:
                del self._seen[key]
            elif shapes(m) in trained and not (_trains(m) and any(id(p) in owners
                                                                  for p in m.parameters())):
                self.found = True           # (the model itself, its parameters owned, is not)
                break
        return self.found

    def _acting(self) -> bool:
        """A trained model called without gradients on a small batch before its first step
        and again after it (the steps its rollouts feed)."""
        for key, (ref, fewest, first, last) in self._acts.items():
            rows = self._rows.get(key)
            if rows is not None and first == 0 and last > 0 and fewest * ACTING <= rows \
                    and ref() is not None and key in self.training_ids:
                return True
        return False


def _trains(module) -> bool:
    return any(p.requires_grad for p in module.parameters())
