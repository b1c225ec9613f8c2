"""torch's global hooks: every module call, every optimizer step. The per-call hot path.

Why global hooks and not a patched `nn.Module.__call__`: torch.compile traces module calls
without going through a patched `__call__` (unless dynamo was imported before the patch, which
costs seconds and made gloo teardown hang), while `register_module_forward_hook` and friends are
honoured in eager, compiled and DDP-wrapped models alike, and come with removable handles.
"""
from __future__ import annotations

import gc

import torch
from torch.optim.optimizer import Optimizer

from .accumulator import first_tensor
from .installed import Installed
from .judged import JudgedOutputs
from .layers import MAX_SITES
from .optimizer_hooks import OptimizerHooks
from .outermost import OutermostHooks
from .residual import UNSEEN, block_of
from .transforms import transform_level

# Bound once: the hooks run for every module call (dynamo knows these functions by identity).
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_graph_task = getattr(torch._C, "_current_graph_task_id", lambda: -1)  # -1: not in backward
_transform = transform_level        # None outside torch.func's transforms
_Tensor = torch.Tensor
_NO_KWARGS: dict = {}


class Hooks(OptimizerHooks, OutermostHooks):
    """Records what each call and each optimizer step brings, for the step end to judge.

    Everything the per-call hook reads is an attribute of this object (one lookup each):
    the registry's dicts are shared, not reached through it. Every hook is guarded: a fault
    switches off that layer, or that part, with a warning; never the user's run."""

    def __init__(self, registry, clock, end_step, fault):
        self.registry, self.clock = registry, clock
        self._recs = registry.recs          # shared: changed in place only
        self._roots = registry.roots
        self._register = registry.register
        self._input = registry.input
        self._batchnorms = registry.batchnorms  # shared: changed in place only
        self._end_step = end_step           # callable(): ends the step, never raises
        self._fault = fault                 # callable(what, error, layer=None)
        self.active = False
        self.observing = True               # this step is observed (and monitoring is on)
        self.touched: list = []             # layers that produced numbers this step
        self.normed: list = []              # layers with a norm reading this step (norms.py)
        self.blocks: list = []              # residual blocks called this step (residual.py)
        self._last_block = None             # (block, output) of the last block called
        self.grads, self.grads_off = [], False  # per optimizer stepped: its GradBatch
        self.optimizer_steps = 0            # optimizer steps taken (scaler.py: one skipped?)
        self.inputs_checked = False         # some layer's input was checked this step
        self.renewed = None                 # the watched gradient was renewed (backward.py)
        self.paced = False                  # the pacing optimizer stepped (ending this step)
        self.updates = None                 # UpdateSampler, or None: updates not measured
        self.backward = None                # Backward (the loss and the resets), or None
        self.loss_calls = None              # LossCalls (the output's pairing), or None
        self.stopper = self.evidence = None  # Stopper and its Evidence (stopper.py), or None
        self._depth = 0
        self._last_leaf = None              # eager only: (rec, output) of the last leaf call
        self._prev_leaf = None              # ... and of the one before it
        self._judged = JudgedOutputs()      # eager only: outputs whose units a layer judges
        self._installed = None
        self._outermost_init()

    # ---- lifecycle -------------------------------------------------------------------
    def install(self, existing_optimizers: bool, optimizer_created) -> None:
        """existing_optimizers: look for optimizers made before this call (a notebook)."""
        if existing_optimizers:
            found = [o for o in gc.get_objects() if issubclass(type(o), Optimizer)]
            self.clock.optimizers_created += len(found)
            self.registry.hold(*found)
        self._installed = Installed(self._pre_hook, self._hook, self._optimizer_stepping,
                                    self._optimizer_stepped, optimizer_created,
                                    self.registry.parents.assigned)
        self.active = True

    def remove(self) -> None:
        if self._installed is not None:
            self._installed.remove()
            self._installed = None
        self.active = self.observing = False

    def take(self) -> tuple:
        """(layers touched, gradient batches, whether inputs were checked) of the step, now
        handed over to the step end."""
        out = self.touched, self.grads, self.inputs_checked
        self.touched, self.grads, self.inputs_checked = [], [], False
        return out

    def new_step(self, observing: bool) -> None:
        self.observing = observing
        self._depth = 0
        self._last_leaf = self._prev_leaf = None
        self._judged.clear()
        self._last_block = None
        self._input_in_kwargs = False
        installed = self._installed
        if installed is not None and installed.modules_on == (not observing) \
                and (observing or may_pause(self)):
            installed.modules(observing)

    # ---- the hot path ----------------------------------------------------------------
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
        if self._batchnorms:        # (a model without BatchNorm pays one test of a dict)
            rec = self._batchnorms.get(id(module))
            if rec is not None and self.observing and module.training and _grad_enabled():
                try:    # its running statistics before the call, to compare after it
                    if rec.ref() is module:
                        rec.norm.before(module)
                except Exception as e:  # noqa: BLE001
                    self.disable(module, rec, e)

    def _hook(self, module, args, kwargs, output=None):
        if output is None and type(kwargs) is not dict:
            # (when forward raised, torch calls an always_call hook without the kwargs)
            kwargs, output = _NO_KWARGS, kwargs
        eager = not _is_compiling()
        rec = None
        inside = False          # called inside an outermost call seen by the pre-hook
        try:    # a monitor fault must not end the user's run (try costs nothing until raised)
            if eager:
                depth = self._depth
                if depth > 1:
                    self._depth = depth - 1
                    inside = True
                else:
                    self._depth = 0
                    root = self._roots.get(id(module))
                    if root is not None and root() is module:
                        self._outermost_return(module, args, output, kwargs)
            # (not an evaluation pass, unless the model trains in eval(), a finding; nor a
            # torch.func transform's call, whose tensors are its own: transforms.py)
            if not self.observing or self._eval_call or not _grad_enabled() or _transform():
                return
            rec = self._recs.get(id(module))
            if rec is None or rec.ref() is not module:  # new, or an id reused by a new module
                rec = self._register(module)
            if _graph_task() != -1 and not _unseen_leaf(rec):
                return      # (gradient checkpointing recomputing in backward what was seen)
            norm = rec.norm
            if norm is not None and eager and norm.after(module, args, self.clock.step):
                self.normed.append(rec)
            if not rec.leaf and eager and rec.residual is not None:    # (a container)
                self._residual(module, rec, args, output)
            if not rec.reads:               # skipped, or nothing read from its outputs
                if rec.transparent and eager:   # (a Dropout: it passes its input's reading on)
                    self._leaf(rec, args, output)
                return
            if rec.sites is not None and inside:    # an activation: at which of its places?
                # (not in compiled code, which may show no outermost call to count forwards by)
                rec = self._site(rec, self.forwards, args[0] if args else None)
            y = output if isinstance(output, _Tensor) else first_tensor(output)
            acc = rec.acc
            if acc.channel_first is None and eager and args:    # (its first call)
                acc.channel_first = _keeps_channels(args[0], y, self._last_leaf)
            first = not acc.numel                       # the layer's first call this step
            known = norm.known if norm is not None and eager else None  # (norms.py)
            if y is None or not acc.add_output(y, eager, known):
                return
            if rec.wants_input and args and self._judged.read_input(acc, args[0], eager):
                self.inputs_checked = True
            if eager:
                self._leaf(rec, args, y)
            if first:
                self.touched.append(rec)
                rec.dtype = y.dtype     # (the precision it computes in: mixed precision)
        except Exception as e:  # noqa: BLE001
            if rec is None or rec.skip:
                self.registry.skip(module)
                self._fault(f"monitoring of a {type(module).__name__} switched off", e)
            else:
                self.disable(module, rec, e)

    def _leaf(self, rec, args, y) -> None:
        """A leaf's output (eager): read, it is the last leaf's; a Dropout's or a pool's, not
        read, stands for its input's. Either may be judged (judged.py)."""
        if rec.reads:
            self._prev_leaf, self._last_leaf = self._last_leaf, (rec, y)
        else:
            self._last_leaf = passed_on(self._last_leaf, args, y)
        self._judged.add(rec, args, y)

    def _residual(self, module, rec, args, output) -> None:
        """A container's call in training: a residual block's branch and skip, its first
        call deciding whether it is one (observe/residual.py)."""
        if not module.training:
            return
        try:   # (Hugging Face's blocks return a tuple: the hidden states first)
            y = output if isinstance(output, _Tensor) else first_tensor(output)
            block = rec.residual
            if block is UNSEEN:
                block = rec.residual = block_of(module, args, y, self.registry)
            if block is not None:
                if block.add(args[0], y, self._last_block):
                    self.blocks.append(block)
                self._last_block = (block, y)
        except Exception as e:  # noqa: BLE001 - only this block's reading stops
            rec.residual = None
            self._fault(f"residual reading of {type(module).__name__} switched off", e)

    def _site(self, rec, forward: int, x):
        """The record of this call's site (input `x`): `rec` at its first call in this forward,
        else the first of its sites not yet called in it (the last one once MAX_SITES are made)."""
        site, k = rec, 0
        while site.seen_in == forward and k < MAX_SITES:
            k += 1
            site = self.registry.site(rec, k)
        site.seen_in = forward      # (its first call tells what its units are: _keeps_channels)
        return site

    def disable(self, module, rec, error) -> None:
        """Switch off one layer after a fault in its monitoring."""
        if module is not None:
            self.registry.skip(module)
        name = self.registry.name_of(rec)
        self._fault(f"monitoring of layer {name} switched off", error, name)


def may_pause(hooks) -> bool:
    """Whether the module hooks may go until the next observed step (`every` > 1): the steps
    are paced by an optimizer (not by outermost forwards, which only these hooks see), and no
    compiled model runs (dynamo guards on the global hooks: adding them back would
    recompile)."""
    clock = hooks.clock
    if not hooks.active or (not clock.optimizers_created and clock.optim.primary is None):
        return False
    if hooks.registry.unnamed_seen:     # (layers seen inside compiled code)
        return False
    for ref in hooks.registry.roots.values():
        root = ref()
        if root is not None and (type(root).__name__ == "OptimizedModule"
                                 or getattr(root, "_compiled_call_impl", None) is not None):
            return False
    return True


def _channel_first(x, last) -> bool:
    """Whether an activation's units are the channels of its input `x`: `x` is the very output
    of the layer observed just before, itself read channel-first (a Conv1d's (B, C, T), or an
    activation's after one). Else (a Linear's (B, T, F), a functional op's output) they are
    its last dimension; a 4-D map is read channel-first whatever this tells."""
    return last is not None and last[1] is x and last[0].acc.channel_first is True


def _keeps_channels(x, y, last) -> bool:
    """Whether a layer's output `y` keeps the channels of its input `x`, itself channel-first
    (_channel_first): an activation's, or a crop's or pad's of a Conv1d's (B, C, T) that leaves
    B and C as they are."""
    return _channel_first(x, last) and isinstance(y, _Tensor) and y.dim() == x.dim() \
        and y.shape[:2] == x.shape[:2]


def passed_on(last, args, output):
    """The last leaf's (record, output) after a Dropout (or Identity) not read itself: fed the
    very output of the layer observed just before, its output stands for that layer's, so
    that an activation after it (Conv1d -> Dropout -> ReLU) counts the conv's channels."""
    if last is not None and args and args[0] is last[1] and isinstance(output, _Tensor):
        return last[0], output
    return last


def _unseen_leaf(rec) -> bool:
    """A layer whose output this step's forwards did not show: a reentrant checkpoint runs
    its region's forward without gradients, and again in backward with them (read then, once
    a step). A container's branch is not read there: a non-reentrant checkpoint's forward
    was seen, and its recomputation would count the block's call twice."""
    return rec.leaf and rec.reads and not rec.acc.numel
