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
    """'0.01' or '0.01, 0.001' (the param groups' distinct rates, 3 digits)."""
    return ", ".join(dict.fromkeys(f"{v:.3g}" for v in values or [] if is_number(v))) or "?"


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


def climb(seen: list) -> tuple | None:
    """(where the climb began, where it first came within 10% of now, now): the rise, in one
    jump or a warm-up of many events, that brought an optimizer's rate to its current value,
    if that value is the highest of the run so far; else None."""
    now = seen[-1]
    if len(seen) < 2 or peak(now["lr"]) < 0.9 * max(peak(h["lr"]) for h in seen):
        return None
    start = len(seen) - 1
    while start > 0 and peak(seen[start - 1]["lr"]) <= peak(seen[start]["lr"]):
        start -= 1
    if start == len(seen) - 1:
        return None
    top = peak(now["lr"])
    reached = next(h for h in seen[start + 1:] if peak(h["lr"]) >= 0.9 * top)
    return seen[start], reached, now
