"""Raises from a nested function, after printing, with a chained cause."""
import sys


def inner(x):
    try:
        return {}[x]
    except KeyError as e:
        raise ValueError(f"bad value {x!r}") from e


def outer():
    return inner("k")


print("before")
sys.stdout.flush()
outer()
