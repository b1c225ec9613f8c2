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


def build(thresholds, signals=None) -> list:
    """One instance of every registered detector for one run; with `signals` (names), of
    those detectors only whose signal is named."""
    return [factory(thresholds) for factory in _FACTORIES
            if signals is None or factory.signal.name in signals]


from . import activation, gradient, loop, loss, norm, output, residual, scaler, update  # noqa: E402,F401 - the built-ins register
