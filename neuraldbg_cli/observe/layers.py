"""What is kept about each module seen: bounded, whatever the length of the run."""
from __future__ import annotations

import weakref
from typing import NamedTuple

from .accumulator import SQUASH, UNITS, Accumulator
from .detectors.base import (
    GRAD_NORM,
    INPUT_ACTIVITY,
    NORM_STATS,
    OUTPUT_REDUCTIONS,
    PARAM_UPDATE,
    UNIT_ACTIVITY,
    UNIT_SATURATION,
)
from .kinds import CHANNEL_FIRST, SQUASH_KINDS, TRANSPARENT, UNIT_KINDS
from .naming import class_name
from .norms import reading_for
from .parametrized import own_parameters
from .residual import UNSEEN
from .tracker import Hysteresis, SignalTracker

SITE_KINDS = (*UNIT_KINDS, *SQUASH_KINDS)
MAX_SITES = 16      # call sites per module; later calls of a forward share the last


class Skipped:
    """Registry entry of a module that is not observed (a wrapper, a loss, a container)."""

    __slots__ = ("ref", "residual", "transparent")
    skip = True
    leaf = False
    reads = False           # nothing read from its outputs
    norm = None             # no normalisation reading

    def __init__(self, module):
        self.ref = weakref.ref(module)
        self.residual = UNSEEN          # a container: a residual block? (observe/residual.py)
        self.transparent = isinstance(module, TRANSPARENT)  # (a Dropout: hooks.py's _pass_on)


class Watch(NamedTuple):
    """One detector watching one layer: the layer's history for it and its tracker."""
    detector: object
    history: object
    tracker: SignalTracker


class LayerRec:
    """One observed layer (or the pseudo-layer of the input): its numbers for the step, and
    each watching detector's history and tracker."""

    __slots__ = ("ref", "module_type", "kind", "leaf", "reads", "wants_input", "transparent",
                 "fallback_name", "acc", "is_output", "skip", "watching", "on_output", "on_grad",
                 "on_update", "on_norm", "norm", "in_optimizer", "site", "sites", "seen_in",
                 "residual", "dtype", "values", "frozen", "weights_seen")

    def __init__(self, module, kind: str, leaf: bool, watches: list, debounce: int,
                 hysteresis: Hysteresis = Hysteresis()):
        """watches: [(detector, the reductions it needs of this module)], needs not empty."""
        self.skip = False               # (the input's record can be switched off)
        self.ref = weakref.ref(module) if module is not None else None
        # (the user's class: 'Linear' for FSDP2's FSDPLinear, in the trace and in updates.py)
        self.module_type = class_name(module) if module is not None else kind
        self.kind = kind
        self.leaf = leaf
        needs = frozenset().union(*(n for _, n in watches))
        self.reads = bool(needs & OUTPUT_REDUCTIONS)
        self.wants_input = INPUT_ACTIVITY in needs
        # passes its input's zeros through (F.relu -> Dropout -> Linear): not a judge of them
        self.transparent = isinstance(module, TRANSPARENT)
        self.fallback_name = None
        mode = (UNITS if UNIT_ACTIVITY in needs and kind in UNIT_KINDS else
                SQUASH if UNIT_SATURATION in needs and kind in SQUASH_KINDS else None)
        # An activation reads its units as the layer feeding it does (channels of a Conv1d's
        # (B, C, T), features of a Linear's (B, T, F)), and so does a leaf without parameters
        # between them (a TCN's crop of the time axis): None until its first call tells
        # (hooks.py)
        self.acc = Accumulator(kind, True if isinstance(module, CHANNEL_FIRST) else
                               None if mode is not None or leaf and module is not None and
                               next(own_parameters(module), None) is None else False, mode)
        self.is_output = False
        # in the order of the registry; judged at the step end, or at the optimizer step
        self.watching = [Watch(d, d.history(), SignalTracker(debounce, d.signal.ok, *hysteresis))
                         for d, _ in watches]
        pairs = list(zip(self.watching, watches))
        self.on_output = [w for w, (_, n) in pairs if GRAD_NORM not in n and NORM_STATS not in n]
        self.on_grad = [w for w, (_, n) in pairs if GRAD_NORM in n and PARAM_UPDATE not in n]
        self.on_update = [w for w, (_, n) in pairs if PARAM_UPDATE in n]
        self.on_norm = [w for w, (_, n) in pairs if NORM_STATS in n]
        # its values (trainable now or later): the relative step of a few scalars says
        # little (updates)
        self.values = _values(module) if self.on_update else None
        # frozen when first called (a backbone, a GAN's generator between its steps): not
        # looked for among the layers in no optimizer at each step (step_facts.py)
        self.frozen = bool(self.on_update) and not any(p.requires_grad
                                                       for p in own_parameters(module))
        # what the hooks read of a normalisation layer (observe/norms.py), or None
        self.norm = reading_for(module, self.reads) if self.on_norm else None
        self.in_optimizer = False       # some optimizer holds its parameters (updates.py)
        self.weights_seen = None        # its weights' versions when last found in none (step_facts.py)
        # Call sites: one activation module called at several places of a forward (a
        # BasicBlock's self.relu, an `act` shared by a loop of layers) is as many layers. Each
        # call of a forward after the first goes to a record of its own, `sites[k - 1]`,
        # named NAME#k+1; calls at the same place in later forwards (micro-batches) merge.
        self.site = 0
        self.sites = [] if kind in SITE_KINDS and leaf and module is not None \
            and next(own_parameters(module), None) is None else None
        self.seen_in = -1               # the forward (Hooks' count) of its last call
        self.dtype = None               # its output's dtype (float16 under autocast, say)
        # a container with parameters of its own may be a residual block (observe/residual.py)
        self.residual = UNSEEN if module is not None and not leaf else None

    def fresh_histories(self) -> None:
        """Every watching detector's history anew (its tracker, the state told, kept): the
        loss of a new model trained in the same run has a starting level of its own."""
        fresh = {id(w): w._replace(history=w.detector.history()) for w in self.watching}
        for attr in ("watching", "on_output", "on_grad", "on_update", "on_norm"):
            setattr(self, attr, [fresh.get(id(w), w) for w in getattr(self, attr)])


def _values(module) -> int | None:
    """How many values a layer holds itself, trainable now or later (None: not known yet, a
    lazy module)."""
    try:
        return sum(p.numel() for p in own_parameters(module))
    except ValueError:      # (an uninitialised parameter has no size yet)
        return None
