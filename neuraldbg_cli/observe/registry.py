"""Which modules are layers, what each is called, and which detectors watch it."""
from __future__ import annotations

import gc
import weakref

from torch import nn
from torch.nn.parameter import is_lazy

from ..trace import INPUT_LAYER, LOOP_LAYER, LOSS_LAYER, OUTPUT_LAYER, SCALER_LAYER
from . import naming, weights
from .kinds import CONTAINER, INPUT_KIND, LOOP_KIND, LOSS_KIND, OTHER, OUTPUT_KIND, SCALER_KIND, kind_of
from .layers import LayerRec, Skipped
from .parametrized import is_leaf, is_parametrization, own_parameters
from .tracker import Hysteresis

_Loss = nn.modules.loss._Loss


class Registry:
    """id(module) -> its record, its name, its outermost module; id(parameter) -> its layer.

    The dicts are shared with the hooks, which read them at every module call: they are
    changed in place, never replaced."""

    def __init__(self, detectors: list, debounce: int, clock, emit, fault, model=None,
                 hysteresis: Hysteresis = Hysteresis()):
        self.detectors = detectors
        self.debounce = debounce
        self.hysteresis = hysteresis        # (tracker.SignalTracker's)
        self.clock = clock                  # (the step a model event is dated to)
        self.emit = emit
        self.fault = fault
        self.recs: dict = {}                # id(module) -> LayerRec | Skipped
        self.names: dict = {}               # id(module) -> (weakref, layer name)
        self.roots: dict = {}               # id(outermost module) -> weakref
        self.owners: dict = {}              # id(parameter) -> LayerRec
        self.optimizers: list = []          # weakrefs of the optimizers made
        self.updates_watched = False        # some layer's updates are judged (else none sampled)
        self.batchnorms: dict = {}          # id(module) -> LayerRec of a BatchNorm read
        self.parents = naming.Parents()     # (a submodule called alone is named in its model)
        self.model = model
        self.allowed = None if model is None else {id(m) for m in model.modules()}
        self.input = self._pseudo(INPUT_KIND, INPUT_LAYER, True)
        self.input.skip = not self.input.reads
        # the step's own signals: judged at the step end when some detector watches them
        self.loss = self._pseudo(LOSS_KIND, LOSS_LAYER, False)
        self.loop = self._pseudo(LOOP_KIND, LOOP_LAYER, False)
        self.output = self._pseudo(OUTPUT_KIND, OUTPUT_LAYER, False)
        self.scaler = self._pseudo(SCALER_KIND, SCALER_LAYER, False)   # (with a GradScaler)
        self.unnamed_seen = False           # a layer seen outside any known outermost call
        self._unnamed = 0
        self._scanned = False

    def _pseudo(self, kind: str, name: str, leaf: bool) -> LayerRec:
        """The record of a pseudo-layer (module None), named `name` in the trace."""
        rec = LayerRec(None, kind, leaf, self._watches(None, kind, leaf), self.debounce,
                       self.hysteresis)
        rec.fallback_name = name
        return rec

    def _watches(self, module, kind: str, leaf: bool) -> list:
        return [(d, n) for d in self.detectors if (n := d.needs(module, kind, leaf))]

    def register(self, module):
        """The record of a module seen for the first time (a LayerRec, or Skipped)."""
        if naming.is_wrapper(module) or isinstance(module, _Loss) or (
                self.allowed is not None and id(module) not in self.allowed):
            return self.skip(module)
        if is_parametrization(module):
            return self.skip_all(module)
        leaf = is_leaf(module)
        has_params = any(p.requires_grad for p in own_parameters(module))
        if not leaf and not has_params:
            return self.skip(module)
        if not has_params and self.names and self.name(module) is None:
            # Not part of any model called so far: a module made anew in each forward
            # (nn.ReLU()(x)); tracking each copy would grow without bound. The next layer's
            # input check still sees what it did.
            return self.skip(module)
        kind = kind_of(module) if leaf else OTHER
        watches = self._watches(module, kind, leaf)
        if not watches:
            return self.skip(module)
        rec = LayerRec(module, kind, leaf, watches, self.debounce, self.hysteresis)
        self.recs[id(module)] = rec
        if rec.norm is not None and rec.norm.batchnorm:
            self.batchnorms[id(module)] = rec       # (its running statistics: before each call)
        if self.name(module) is None:
            self.unnamed_seen = True
        if rec.on_update:
            self.updates_watched = True
        if rec.on_grad or rec.on_update:
            for p in own_parameters(module):
                owner = self.owners.get(id(p))      # (its id may be that of a parameter gone)
                if owner is None or owner.ref() is None:
                    self.owners[id(p)] = rec
        return rec

    def site(self, rec: LayerRec, k: int) -> LayerRec:
        """The record of `rec`'s k-th call site in a forward (k >= 1), made at its first call."""
        sites = rec.sites
        if k > len(sites):
            module = rec.ref()
            extra = LayerRec(module, rec.kind, rec.leaf, self._watches(module, rec.kind, rec.leaf),
                             self.debounce, self.hysteresis)
            extra.site, extra.sites = k, None
            sites.append(extra)
        return sites[k - 1]

    def hold(self, *optimizers) -> None:
        """Optimizers made (the ones gone forgotten)."""
        self.optimizers = [r for r in self.optimizers if r() is not None]
        self.optimizers += [weakref.ref(o) for o in optimizers]

    def held(self) -> set:
        """The ids of the parameters some optimizer holds, stepped or not yet."""
        return {id(p) for r in self.optimizers if (o := r()) is not None
                for g in o.param_groups for p in g["params"]}

    def skip(self, module):
        self.batchnorms.pop(id(module), None)
        entry = self.recs[id(module)] = Skipped(module)
        return entry

    def skip_all(self, module):
        """Skip `module` and every module inside it."""
        for m in module.modules():
            self.skip(m)
        return self.recs[id(module)]

    def layers(self) -> list:
        """The pseudo-layers' records and every layer's, each once."""
        recs = [r for r in self.recs.values() if not r.skip]
        recs += [site for r in recs if r.sites for site in r.sites]
        return [self.input, *dict.fromkeys(recs), self.loss, self.loop, self.output]

    def purge(self) -> None:
        """Forget modules that were garbage-collected (e.g. created anew in each forward)."""
        for table, gone in ((self.recs, lambda r: r.ref() is None),
                            (self.batchnorms, lambda r: r.ref() is None),
                            (self.roots, lambda r: r() is None),
                            (self.names, lambda e: e[0]() is None),
                            (self.owners, lambda r: r.ref() is None)):
            for key in [k for k, v in table.items() if gone(v)]:
                del table[key]
        self.parents.purge()

    def scan_compiled_once(self) -> None:
        """A model compiled in place (model.compile()) runs even its own hooks inside the
        compiled code, where no outermost call can be seen: find such models once, by a
        scan of the live objects, to name their layers."""
        if self._scanned or not self.unnamed_seen:
            return
        self._scanned = True
        compiled = [o for o in gc.get_objects() if issubclass(type(o), nn.Module)
                    and getattr(o, "_compiled_call_impl", None) is not None]
        inner = {id(m) for c in compiled for m in c.modules() if m is not c}
        for root in compiled:
            if id(root) not in inner:
                self.add_root_safely(root)

    def add_root_safely(self, root) -> None:
        try:
            self._add_root(root)
        except Exception as e:  # noqa: BLE001 - a monitor fault must not end the run
            self.fault(f"layer names of {type(root).__name__} unavailable", e)

    def _add_root(self, called):
        self.roots[id(called)] = weakref.ref(called)
        root = self.parents.topmost(called, self.allowed)   # the model it belongs to
        names = naming.qualified_names(root)
        # modules called before, now found inside this one: named anew from it
        inner = [i for i in names if i != id(called) and i in self.roots
                 and self.roots[i]() is not None and self.name(self.roots[i]()) != names[i]]
        if self.name(called) is not None and not inner:
            return          # named already, as a part of a model called before
        taken = {n for i, (_, n) in self.names.items() if i not in names}
        names = naming.prefixed(names, root, taken, called)
        self.names.update({id(m): (weakref.ref(m), names[id(m)]) for m in root.modules()})
        layers, seen = [], []
        for module in root.modules():
            rec = self.recs.get(id(module))
            if rec is None or rec.ref() is not module:
                rec = self.register(module)
            if not rec.skip:
                layers.append({"name": names[id(module)], "type": naming.class_name(module),
                               "kind": rec.kind if rec.leaf else CONTAINER,
                               "params": sum(0 if is_lazy(p) else p.numel()
                                             for p in own_parameters(module)),
                               "signals": signals_of(rec)})
                if any(hasattr(p, "_local_tensor") for p in own_parameters(module)):
                    layers[-1]["sharded"] = True    # (FSDP: each rank has a shard's norms)
                seen.append((layers[-1], module, rec.kind))
        try:
            weights.first_sight(seen)
        except Exception as e:  # noqa: BLE001 - the model event goes out without them
            self.fault("weight scales unavailable", e)
        pseudo = [{"name": r.fallback_name, "signals": signals_of(r)}
                  for r in (self.input, self.loss, self.loop, self.output)
                  if not r.skip and r.watching]
        self.emit({"event": "model", "step": self.clock.step,
                   "root": naming.class_name(naming.unwrap(root)), "layers": layers,
                   "pseudo_layers": pseudo})

    def name(self, module) -> str | None:
        """The layer name of `module`, if it has one (ids of modules gone are reused)."""
        entry = self.names.get(id(module))
        return entry[1] if entry is not None and entry[0]() is module else None

    def name_of(self, rec: LayerRec) -> str:
        module = rec.ref() if rec.ref is not None else None
        name = self.name(module) if module is not None else None
        if name is not None:
            return f"{name}#{rec.site + 1}" if rec.site else name
        if rec.fallback_name is None:
            self._unnamed += 1
            rec.fallback_name = f"{rec.module_type}#{self._unnamed}"
        return rec.fallback_name


def signals_of(rec) -> list:
    """The signals watching a layer, as the trace names them (what a JUnit report lists)."""
    return list(dict.fromkeys(w.detector.signal.name for w in rec.watching))
