"""The learning rates of a run, as its hparams events tell them (one per optimizer, written
the first time and whenever a rate moves by more than 10%)."""
from __future__ import annotations

from .runs import is_number

# Optimizers whose step is about lr per element whatever the gradient's size: for these a
# rate of 0.01 is already high, where SGD's scale depends on the gradients.
ADAPTIVE = ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta")


def peak(values) -> float:
    """The highest learning rate of an hparams event's groups (0 if none is a number)."""
    return max((v for v in values or [] if is_number(v)), default=0.0)


def ratio(new: list, old: list) -> float:
    """How many times the groups' rates grew from `old` to `new` (the largest group's)."""
    pairs = [(n, o) for n, o in zip(new or [], old or []) if is_number(n) and is_number(o) and o > 0]
    return max((n / o for n, o in pairs), default=0.0)


def shown(values) -> str:
    """'0.01' or '0.01, 0.001' (one per param group)."""
    return ", ".join(f"{v:g}" for v in values or [] if is_number(v)) or "?"


def by_optimizer(hparams: list, onset: int) -> list:
    """Per optimizer, its hparams events up to `onset`, in step order (empty lists left out)."""
    seen: dict = {}
    for h in hparams:
        if h["step"] <= onset:
            seen.setdefault(h.get("optimizer_index", 0), []).append(h)
    return list(seen.values())


def in_force(hparams: list, onset: int) -> dict | None:
    """The last hparams event at or before `onset` (of any optimizer), or None."""
    return next((h for h in reversed(hparams) if h["step"] <= onset), None)
