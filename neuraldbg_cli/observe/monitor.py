"""Installs torch's global hooks, observes every module call, detects steps, emits events.

Why global hooks and not a patched `nn.Module.__call__`: torch.compile traces module calls
without going through a patched `__call__` (unless dynamo was imported before the patch, which
costs seconds and made gloo teardown hang), while `register_module_forward_hook` and friends are
honoured in eager, compiled and DDP-wrapped models alike, and come with removable handles.
"""
from __future__ import annotations

import gc
import math
import sys
import warnings
import weakref

import torch
from torch import nn
from torch.nn.modules import module as nn_module
from torch.nn.parameter import is_lazy
from torch.optim.optimizer import Optimizer, register_optimizer_step_post_hook

from . import naming
from .optimizers import OptimizerWatch
from .regimes import INPUT, OTHER, PARAM, RELU, SIGMOID, SMOOTH, TANH, History, activation_state, gradient_state
from .stats import CHANNEL_FIRST, TRANSPARENT, Accumulator, first_tensor, gather, kind_of
from ..thresholds import Thresholds
from .tracker import SignalTracker

_PURGE_EVERY = 256        # steps between sweeps of modules that no longer exist
# Bound once: the hooks run for every module call (dynamo knows these functions by identity).
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor
_COMPILE_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"


class Skipped:
    """Registry entry of a module that is not observed (a wrapper, a loss, a container)."""

    __slots__ = ("ref",)
    skip = True
    leaf = False            # (nothing read from its outputs, like a container's)

    def __init__(self, module):
        self.ref = weakref.ref(module)


class LayerRec:
    """Everything kept about one layer: bounded, whatever the length of the run."""

    __slots__ = ("ref", "module_type", "kind", "leaf", "transparent",
                 "fallback_name", "acc", "is_output", "hist", "act", "grad", "skip")

    def __init__(self, module, kind, leaf, th: Thresholds):
        self.skip = False               # (the input's record can be switched off)
        self.ref = weakref.ref(module) if module is not None else None
        self.module_type = type(module).__name__ if module is not None else "input"
        self.kind = kind
        self.leaf = leaf                # containers only repeat their children's outputs
        # passes its input's zeros through (F.relu -> Dropout -> Linear): not a judge of them
        self.transparent = isinstance(module, TRANSPARENT)
        self.fallback_name = None
        self.acc = Accumulator(kind, isinstance(module, CHANNEL_FIRST))
        self.is_output = False
        self.hist = History(th.anomaly.window)
        self.act = SignalTracker(th.debounce_steps)
        self.grad = SignalTracker(th.debounce_steps)


class Monitor:
    """Observes every module the script calls; one instance per run or `with` block."""

    def __init__(self, thresholds: Thresholds, emit, *, model: nn.Module | None = None, warn=None,
                 every: int = 1):
        self.th = thresholds
        self._min_grads = {SIGMOID: thresholds.sigmoid.min_grad, TANH: thresholds.tanh.min_grad}
        # Observe every `every`-th step only (1: all). On the others the hooks return at once:
        # for models whose steps are mostly Python overhead, the cost drops about N-fold, and a
        # state must then last `debounce_steps` observed steps (N times as long) to be seen.
        self.every = every
        self._observing = True                # this step is observed (and monitoring is on)
        self.emit = emit                      # callable(event dict)
        self.warn = warn or (lambda msg: print(f"neuraldbg: {msg}", file=sys.stderr))
        self.step = 0                         # index of the step being observed
        self.steps = 0                        # completed steps
        self._recs: dict = {}                 # id(module) -> LayerRec | Skipped
        self._names: dict = {}                # id(module) -> (weakref, layer name)
        self._roots: dict = {}                # id(outermost module) -> weakref
        self._owners: dict = {}               # id(parameter) -> LayerRec
        self._allowed = None if model is None else {id(m) for m in model.modules()}
        self._model = model
        self._touched: list = []
        self._inputs_checked = False          # some layer's input was checked this step
        self._depth = 0
        self._pending_end = False
        self._optimizers_created = 0
        self._optim = OptimizerWatch(emit)
        self._grads: list = []                # per optimizer: (tensors, layer groups, normed)
        self._input = LayerRec(None, INPUT, True, thresholds)
        self._input.fallback_name = naming.INPUT
        self._unnamed = 0
        self._grads_off = False
        self._unnamed_seen = False            # a layer seen outside any known outermost call
        self._scanned = False
        self._last_leaf = None                # eager only: (rec, output) of the last leaf call
        self._handles: list = []
        self._orig_opt_init = None
        self._warning_filter = None
        self.active = False

    # ---- lifecycle -------------------------------------------------------------------
    def install(self, existing_optimizers: bool = False) -> None:
        """existing_optimizers: look for optimizers made before this call (a notebook)."""
        if self._model is not None:
            self._add_root_safely(self._model)
        if existing_optimizers:
            self._optimizers_created += sum(issubclass(type(o), Optimizer) for o in gc.get_objects())
        self._handles = [
            nn_module.register_module_forward_pre_hook(self._pre_hook),
            nn_module.register_module_forward_hook(self._hook, always_call=True),
            register_optimizer_step_post_hook(self._optimizer_stepped),
        ]
        # Knowing that the script has an optimizer (before its first step) keeps forwards of
        # gradient accumulation in one step; without one, each outermost forward is a step.
        orig = self._orig_opt_init = Optimizer.__init__
        monitor = self

        def init(opt, *args, **kwargs):
            monitor._optimizer_created()
            orig(opt, *args, **kwargs)
        Optimizer.__init__ = init
        # torch warns, on the user's stderr, that global hooks also fire for the wrapper of
        # torch.compile(model): these hooks are neuraldbg's and skip that wrapper.
        warnings.filterwarnings("ignore", message=_COMPILE_HOOK_WARNING, category=UserWarning)
        self._warning_filter = warnings.filters[0]
        self.active = True

    def _optimizer_created(self) -> None:
        self._optimizers_created += 1
        if self._optim.primary is None and (self.steps or self._pending_end):
            # Forwards before the optimizer existed (a dry run that initialises lazy modules)
            # were counted as steps; training proper starts at step 0.
            self._end_step_safely()
            self.step = self.steps = 0

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._orig_opt_init is not None:
            Optimizer.__init__ = self._orig_opt_init
            self._orig_opt_init = None
        if self._warning_filter in warnings.filters:
            warnings.filters.remove(self._warning_filter)
            getattr(warnings, "_filters_mutated", lambda: None)()   # drop cached verdicts
        self.active = self._observing = False

    def close(self, completed: bool = True) -> None:
        """End of the run: classify a step in progress, unhook; after a crash or an
        interrupt, also report states that had no time to be confirmed."""
        if self.active and (self._touched or self._grads):
            self._end_step_safely(complete=False)
        self.remove()
        if completed:
            return
        for rec in self._all_recs():
            for signal, tracker in (("activation", rec.act), ("gradient", rec.grad)):
                t = tracker.flush()
                if t is not None:
                    self._write_transition(rec, signal, t)

    def _all_recs(self):
        recs = [r for r in self._recs.values() if not r.skip]
        return [self._input, *dict.fromkeys(recs)]

    # ---- hooks (the hot path) ------------------------------------------------------
    def _pre_hook(self, module, args):
        # Inside a compiled region there is no outermost call to find: the wrapper's own
        # (eager) call already did; this bookkeeping compiles away to nothing.
        if _is_compiling():
            return
        if self._depth == 0 and self.active:
            try:
                self._outermost_call(module, args)
            except Exception as e:  # noqa: BLE001 - a monitor fault must not end the run
                self._fault(f"outermost call of {type(module).__name__} not observed", e)
        self._depth += 1

    def _hook(self, module, args, output):
        eager = not _is_compiling()
        rec = None
        try:    # a monitor fault must not end the user's run (try costs nothing until raised)
            if eager:
                depth = self._depth
                if depth > 1:
                    self._depth = depth - 1
                else:
                    self._depth = 0
                    root = self._roots.get(id(module))
                    if root is not None and root() is module:
                        self._outermost_return(output)
            if not self._observing or not _grad_enabled() or not module.training:
                return
            rec = self._recs.get(id(module))
            if rec is None or rec.ref() is not module:  # new, or an id reused by a new module
                rec = self._register(module)
            if not rec.leaf:                # skipped, or a container
                return
            y = output if isinstance(output, _Tensor) else first_tensor(output)
            acc = rec.acc
            first = not acc.numel                       # the layer's first call this step
            if y is None or not acc.add_output(y, eager):
                return
            if rec.kind == PARAM and args:
                x = args[0]
                # Data straight from the loader does not require grad: its zero features
                # (one-hot, padding) are not dead units. A computed input is checked (that
                # is how F.relu(...) is seen), unless it is the very output of the layer
                # observed just before, whose own numbers already judge it (eager only).
                last = self._last_leaf if eager else None
                if not (last is not None and last[1] is x and not last[0].transparent) \
                        and isinstance(x, _Tensor) and x.requires_grad and x.is_floating_point():
                    acc.add_input(x)
                    self._inputs_checked = True
            if eager:
                self._last_leaf = (rec, y)
            if first:
                self._touched.append(rec)
        except Exception as e:  # noqa: BLE001
            if rec is None or rec.skip:
                self._skip(module)
                self._fault(f"monitoring of a {type(module).__name__} switched off", e)
            else:
                self._disable(module, rec, e)

    def _outermost_return(self, output) -> None:
        last = self._last_leaf
        if last is not None and not last[0].is_output and first_tensor(output) is last[1]:
            # The model's own output layer: a sigmoid there saturating is a confident
            # prediction, the aim of training, not a failure.
            last[0].is_output = True
        if self._optimizers_created == 0 and self._optim.primary is None and self.active \
                and torch.is_grad_enabled():
            self._pending_end = True

    def _outermost_call(self, module, args):
        if self._pending_end:
            self._end_step_safely()
            if not self.active:
                return
        if isinstance(module, nn.modules.loss._Loss) or not torch.is_grad_enabled() \
                or not module.training:
            return
        if self._allowed is not None and id(module) not in self._allowed \
                and naming.unwrap(module) is not self._model:
            return
        root = self._roots.get(id(module))
        if root is None or root() is not module:
            if next(module.parameters(), None) is None:
                # Parameter-free modules called on their own (nn.Softmax()(logits) in a loop)
                # are post-processing, not a model: neither a root nor layers of one.
                for m in module.modules():
                    self._skip(m)
                return
            self._add_root_safely(module)
        x = first_tensor(args) if self._observing else None
        if x is not None and not self._input.skip:
            first = not self._input.acc.numel
            try:
                if not self._input.acc.add_output(x, defer=True):
                    return
            except Exception as e:  # noqa: BLE001
                self._input.skip = True
                self._disable(None, self._input, e)
                return
            if first:
                self._touched.append(self._input)

    def _optimizer_stepped(self, opt, args, kwargs):
        if not self._handles:
            return
        paces = self._optim.paces(opt)
        if self.active:             # once switched off by a fault, steps are only counted
            try:
                self._optim.record_hparams(opt, self.step)
                if not self._grads_off and self._observing:
                    # The pacing optimizer's step ends the step right here: its gradients
                    # can be normed with everything else, in the step end's one call.
                    norms = self._optim.grad_norms(opt, self._owners, raw=paces)
                    if norms is not None:
                        self._grads.append(norms)
            except Exception as e:  # noqa: BLE001 - a monitor fault must not end the run
                self._grads_off, self._grads = True, []
                self._fault("gradient monitoring switched off", e)
        if paces:
            self._end_step_safely()

    # ---- registration and naming -----------------------------------------------------
    def _register(self, module):
        if naming.is_wrapper(module) or isinstance(module, nn.modules.loss._Loss) or (
                self._allowed is not None and id(module) not in self._allowed):
            return self._skip(module)
        leaf = next(module.children(), None) is None
        has_params = any(p.requires_grad for p in module.parameters(recurse=False))
        if not leaf and not has_params:
            return self._skip(module)
        if not has_params and self._names and self._name(module) is None:
            # Not part of any model called so far: a module made anew in each forward
            # (nn.ReLU()(x)); tracking each copy would grow without bound. The next layer's
            # input check still sees what it did.
            return self._skip(module)
        rec = LayerRec(module, kind_of(module) if leaf else OTHER, leaf, self.th)
        self._recs[id(module)] = rec
        if self._name(module) is None:
            self._unnamed_seen = True
        for p in module.parameters(recurse=False):
            owner = self._owners.get(id(p))     # (its id may be that of a parameter gone)
            if owner is None or owner.ref() is None:
                self._owners[id(p)] = rec
        return rec

    def _skip(self, module):
        entry = self._recs[id(module)] = Skipped(module)
        return entry

    def _purge(self) -> None:
        """Forget modules that were garbage-collected (e.g. created anew in each forward)."""
        self._recs = {k: r for k, r in self._recs.items() if r.ref() is not None}
        self._roots = {k: r for k, r in self._roots.items() if r() is not None}
        self._names = {k: e for k, e in self._names.items() if e[0]() is not None}
        self._owners = {k: r for k, r in self._owners.items() if r.ref() is not None}

    def _find_compiled_roots(self) -> None:
        """A model compiled in place (model.compile()) runs even its own hooks inside the
        compiled code, where no outermost call can be seen: find such models once, by a
        scan of the live objects, to name their layers."""
        self._scanned = True
        compiled = [o for o in gc.get_objects() if issubclass(type(o), nn.Module)
                    and getattr(o, "_compiled_call_impl", None) is not None]
        inner = {id(m) for c in compiled for m in c.modules() if m is not c}
        for root in compiled:
            if id(root) not in inner:
                self._add_root_safely(root)

    def _add_root_safely(self, root) -> None:
        try:
            self._add_root(root)
        except Exception as e:  # noqa: BLE001
            self._fault(f"layer names of {type(root).__name__} unavailable", e)

    def _add_root(self, root):
        self._roots[id(root)] = weakref.ref(root)
        names = naming.qualified_names(root)
        inner = [i for i in names
                 if i != id(root) and i in self._roots and self._roots[i]() is not None]
        if self._name(root) is not None and not inner:
            return          # a submodule of a module already called: keeps its name there
        taken = {n for i, (_, n) in self._names.items() if i not in names}
        names = naming.prefixed(names, root, taken)
        self._names.update({id(m): (weakref.ref(m), names[id(m)]) for m in root.modules()})
        layers = []
        for module in root.modules():
            rec = self._recs.get(id(module))
            if rec is None or rec.ref() is not module:
                rec = self._register(module)
            if not rec.skip:
                layers.append({"name": names[id(module)], "type": type(module).__name__,
                               "kind": rec.kind if rec.leaf else "container",
                               "params": sum(0 if is_lazy(p) else p.numel()
                                             for p in module.parameters(recurse=False))})
        self.emit({"event": "model", "step": self.step, "root": type(naming.unwrap(root)).__name__,
                   "layers": layers})

    def _name(self, module) -> str | None:
        """The layer name of `module`, if it has one (ids of modules gone are reused)."""
        entry = self._names.get(id(module))
        return entry[1] if entry is not None and entry[0]() is module else None

    def name_of(self, rec: LayerRec) -> str:
        module = rec.ref() if rec.ref is not None else None
        name = self._name(module) if module is not None else None
        if name is not None:
            return name
        if rec.fallback_name is None:
            self._unnamed += 1
            rec.fallback_name = f"{rec.module_type}#{self._unnamed}"
        return rec.fallback_name

    def _disable(self, module, rec, error):
        if module is not None:
            self._skip(module)
        name = self.name_of(rec)
        self._fault(f"monitoring of layer {name} switched off", error, name)

    def _fault(self, what: str, error: BaseException, layer=None) -> None:
        msg = f"{what}: {type(error).__name__}: {error}"
        self.warn(msg)
        self.emit({"event": "warning", "step": self.step, "layer": layer, "message": msg})

    def _end_step_safely(self, complete: bool = True) -> None:
        """end_step, but a fault there switches monitoring off instead of ending training."""
        if not self.active:
            self.steps += complete
            self.step += complete
            return
        try:
            self.end_step(complete)
        except Exception as e:  # noqa: BLE001
            self.active = self._observing = False
            self._touched, self._grads = [], []
            self.steps += complete
            self.step += complete
            self._fault("monitoring switched off", e)

    # ---- step end: classify and write ---------------------------------------------------
    def end_step(self, complete: bool = True) -> None:
        self._pending_end = False
        if self._unnamed_seen and not self._scanned:
            self._find_compiled_roots()
        recs, self._touched = self._touched, []
        grads, self._grads = self._grads, []
        if self._inputs_checked:
            self._inputs_checked = False
            # A layer right after an activation module reads that module's output: its input
            # check would only echo the activation's own verdict (compiled code cannot tell).
            for prev, rec in zip(recs, recs[1:]):
                if rec.acc.inputs is not None and prev.kind in (RELU, SMOOTH):
                    rec.acc.inputs = None
        # gradients to norm (raw) and norms already taken, each optimizer's in one of them
        raw = [t for ts, _, normed in grads if not normed for t in ts]
        done = [t for ts, _, normed in grads if normed for t in ts]
        numbers, raw, done = gather([r.acc for r in recs], self.th.smooth.tail, self._min_grads,
                                    raw, done)
        th = self.th
        for rec, (norm, inactive, input_dead, sat) in zip(recs, numbers):
            acc = rec.acc
            rms = norm / math.sqrt(acc.numel) if math.isfinite(norm) else norm
            # a saturating output sigmoid is a confident prediction: not judged as saturated
            state, extra = activation_state(rec.kind, rms, rec.hist, th, inactive,
                                            None if rec.is_output else sat, input_dead)
            rec.hist.add_activation(rms, inactive)
            if state != rec.act.steady:     # else nothing to write, no evidence to assemble
                self._activation_changed(rec, state, extra, rms, inactive, input_dead, sat)
            acc.reset()
        for ts, groups, normed in grads:
            values = done if normed else raw
            self._classify_gradients(groups, values[:len(ts)])
            del values[:len(ts)]
        if complete:
            self.steps += 1
            self._optim.new_window()
            if self.steps % _PURGE_EVERY == 0:
                self._purge()
        self.step += 1 if complete else 0
        self._observing = self.step % self.every == 0
        self._depth = 0
        self._last_leaf = None

    def _activation_changed(self, rec: LayerRec, state, extra, rms, inactive, input_dead, sat):
        """A layer's activation state differs from its steady one: update its tracker."""
        kind, acc = rec.kind, rec.acc
        stats = {"rms": rms}
        if inactive is not None:
            stats["dead_ratio" if kind == RELU else "saturated_ratio"] = inactive
        if sat is not None:
            stats["saturated_ratio"] = sat
        if input_dead is not None:
            stats["input_dead_ratio"] = input_dead
        units_seen = acc.units if acc.units is not None else acc.usum
        if units_seen is not None:
            stats["units"] = units_seen.numel()
        t = rec.act.update(self.step, state, {**stats, **extra})
        if t is not None:
            self._write_transition(rec, "activation", t)

    def _classify_gradients(self, groups: list, values: list) -> None:
        """groups: [(layer record, positions of its parameters' norms in `values`: a slice,
        or a tuple where they are not side by side)]."""
        # a layer's norm from its parameters' norms: the square root of their sum of squares
        norms = [math.hypot(*(values[at] if type(at) is slice else [values[i] for i in at]))
                 for _, at in groups]
        top = max(norms)            # the largest finite one: max passes over NaN unless first
        if not math.isfinite(top):
            top = max((n for n in norms if math.isfinite(n)), default=0.0)
        th = self.th
        for (rec, _), norm in zip(groups, norms):
            state, extra = gradient_state(norm, top, rec.hist, th)
            rec.hist.add_gradient(norm)
            if state == rec.grad.steady:
                continue
            urgent = extra.pop("urgent", False)
            stats = {"grad_norm": norm, "model_max_grad_norm": top, **extra}
            t = rec.grad.update(self.step, state, stats, urgent)
            if t is not None:
                self._write_transition(rec, "gradient", t)

    def _write_transition(self, rec: LayerRec, signal: str, t) -> None:
        self.emit({"event": "transition", "step": t.step, "layer": self.name_of(rec),
                   "module_type": rec.module_type, "kind": rec.kind, "signal": signal,
                   "from": t.previous, "to": t.state, "stats": _rounded(t.stats)})


def _rounded(stats: dict) -> dict:
    return {k: (float(f"{v:.6g}") if isinstance(v, float) and math.isfinite(v) else v)
            for k, v in stats.items()}
