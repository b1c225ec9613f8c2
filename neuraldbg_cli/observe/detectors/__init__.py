"""The detectors: each one file, registered here in the order its transitions are written."""
from __future__ import annotations

_FACTORIES: list = []


def register(factory):
    """Add a detector class (called with the Thresholds once per run); returns it."""
    if factory not in _FACTORIES:
        _FACTORIES.append(factory)
    return factory


def unregister(factory) -> None:
    if factory in _FACTORIES:
        _FACTORIES.remove(factory)


def build(thresholds) -> list:
    """One instance of every registered detector, for one run."""
    return [factory(thresholds) for factory in _FACTORIES]


from . import activation, gradient, loop, loss, norm, output, residual, update  # noqa: E402,F401 - the built-ins register
