"""What the loop does around backward(): the loss it is given, and the gradient resets.

`torch.autograd.backward` (which `loss.backward()` calls) is wrapped to see each loss, scaled
back under `torch.amp.GradScaler` (whose `scale()` is wrapped to remember the factor);
`Optimizer.zero_grad` and `Module.zero_grad` are wrapped to count resets. A reset done by
hand (`p.grad = None`, `p.grad.zero_()`) is seen on one watched parameter: its gradient is
gone, or is zero before the step's first backward. Nothing here syncs with the device: the
numbers are read with the step's others. A fault switches this part off with a warning; the
user's call always runs, unchanged, outside of it.
"""
from __future__ import annotations

import functools
import math
import weakref

import torch
from torch import nn
from torch.optim.optimizer import Optimizer

_F32 = torch.float32


class Backward:
    """The loss and the resets of the current step (between two pacing optimizer steps)."""

    def __init__(self, fault):
        self._fault = fault         # callable(what, error)
        self.active = False
        self.losses: list = []      # 0-d tensors, detached, unscaled
        self.resets = 0             # zero_grad calls
        self.first_grad = None      # 0-d norm of the watched gradient before the first backward
        self._watched = None        # (weakref to a parameter, weakref to its gradient then)
        self._scaled = None         # (weakref to GradScaler.scale's last output, its scale)
        self._in_step = False       # inside optimizer.step(): a closure's backwards
        self._step_loss = False     # ... of which the first loss was taken
        self._saved = None
        self.on_loss = None         # callable(loss tensor): a step's loss, as given to backward
        self.on_bare = None         # callable() -> bool: a backward() of a bare-tensor model
        self.backwards = 0          # backward() calls in the step (the step end resets it)
        self.total = 0              # ... and in the run
        self.summed = 0             # values the step's losses summed over (uneven.py), 0: none
        self.sums = True            # ... still counted (uneven.py stops it: 3 us a step)
        self.no_grads = False       # the pacing optimizer's parameters had no gradient
        self._leaf = None           # weakref to the leaf watched there

    # ---- lifecycle -------------------------------------------------------------------
    def install(self) -> None:
        autograd, scaler = torch.autograd, torch.amp.GradScaler
        self._saved = [(autograd, "backward", autograd.backward),
                       (scaler, "scale", scaler.scale),
                       (Optimizer, "zero_grad", Optimizer.zero_grad),
                       (nn.Module, "zero_grad", nn.Module.zero_grad)]
        autograd.backward = self._wrap_backward(autograd.backward)
        scaler.scale = self._wrap_scale(scaler.scale)
        Optimizer.zero_grad = self._wrap_reset(Optimizer.zero_grad)
        nn.Module.zero_grad = self._wrap_reset(nn.Module.zero_grad)
        self.active = True

    def remove(self) -> None:
        for owner, name, original in self._saved or ():
            setattr(owner, name, original)
        self._saved = None
        self.active = False

    def take(self) -> tuple:
        """(losses, resets, first_grad) of the step, now handed over to the step end."""
        out = self.losses, self.resets, self.first_grad
        self.losses, self.resets, self.first_grad = [], 0, None
        return out

    # ---- at the optimizer steps ---------------------------------------------------------
    def stepping(self, inside: bool) -> None:
        """An optimizer step begins (True) or ends. A closure (LBFGS) evaluates the loss
        several times inside one step: the first evaluation is the step's loss."""
        self._in_step, self._step_loss = inside, False

    def renewed(self, opt) -> bool | None:
        """Was the watched gradient set to None (or replaced) since the last step? Then
        watch a parameter of `opt` that has a gradient now. None: nothing was watched."""
        was, self._watched = self._watched, None
        renewed = None
        if was is not None:
            p, g = was[0](), was[1]()
            if p is not None:
                renewed = p.grad is None or p.grad is not g
        for group in opt.param_groups:
            for p in group["params"]:
                # (a parameter with no elements on this rank, FSDP's uneven shard, would
                # read 0 at every step and look like a reset)
                g = p.grad
                if g is not None and not g.is_sparse and getattr(g, "_local_tensor", g).numel():
                    self._watched = (weakref.ref(p), weakref.ref(g))
                    self.no_grads = False
                    return renewed
        self.no_grads = not any(p.grad is not None for group in opt.param_groups
                                for p in group["params"])
        return renewed

    def ungraded(self, optimized: bool) -> tuple:
        """At the step's end: (the optimizer stepped with no backward() and no gradient on its
        parameters, it stepped after backward() with none: a loss that reached none of them);
        the step's backward() calls counted anew."""
        n, self.backwards = self.backwards, 0
        none = optimized and self.no_grads
        return none and not n, none and n > 0

    def renewed_leaf(self) -> bool | None:
        """renewed() for a model of bare tensors, on the leaf the loss reached."""
        was, self._watched = self._watched, None
        renewed = None
        if was is not None and (p := was[0]()) is not None:
            renewed = p.grad is None or p.grad is not was[1]()
        leaf = self._leaf() if self._leaf is not None else None
        if leaf is not None and leaf.grad is not None:
            self._watched = (weakref.ref(leaf), weakref.ref(leaf.grad))
        return renewed

    # ---- the wrappers ------------------------------------------------------------------
    def _wrap_backward(self, original):
        @functools.wraps(original)
        def backward(tensors, *args, **kwargs):
            self.backwards += 1
            self.total += 1
            if self.active:
                try:
                    self._saw_backward(tensors)
                except Exception as e:  # noqa: BLE001 - the user's backward must run
                    self._switch_off(e)
            return original(tensors, *args, **kwargs)
        return backward

    def _saw_backward(self, tensors) -> None:
        if not self._in_step and self.on_bare is not None and self.on_bare():
            # a model of bare tensors: each backward is a step; a leaf the loss reaches is
            # the watched gradient (its reset tells a loop that never zeroes it)
            if self._leaf is None and isinstance(tensors, torch.Tensor):
                self._leaf = _leaf_of(tensors.grad_fn)
        if not self.losses and self._watched is not None:
            p = self._watched[0]()
            g = p.grad if p is not None else None
            if g is not None:   # (FSDP's sharded gradient: this rank's shard, no collective)
                g = getattr(g, "_local_tensor", g)
                self.first_grad = torch.linalg.vector_norm(g.detach(), dtype=torch.float32)
        if isinstance(tensors, torch.Tensor) and tensors.numel() == 1 \
                and tensors.is_floating_point():
            if self._in_step:
                if self._step_loss:
                    return
                self._step_loss = True
            if self.on_loss is not None and tensors.grad_fn is not None:
                self.on_loss(tensors)
            if self.sums:
                self.summed += summed_over(tensors.grad_fn)
            loss = tensors.detach()
            if loss.dim():                      # (a loss of shape (1,), say)
                loss = loss.reshape(())
            if loss.dtype is not _F32:
                loss = loss.float()
            scaled = self._scaled
            if scaled is not None and scaled[0]() is tensors:
                loss = loss / scaled[1].to(loss.device).float()
            self.losses.append(loss)

    def _wrap_scale(self, original):
        @functools.wraps(original)
        def scale(scaler, outputs):
            out = original(scaler, outputs)
            # (a disabled scaler returns the loss itself, and has no scale)
            if self.active and isinstance(out, torch.Tensor) and out is not outputs \
                    and getattr(scaler, "_scale", None) is not None:
                try:
                    self._scaled = (weakref.ref(out), scaler._scale)
                except Exception as e:  # noqa: BLE001
                    self._switch_off(e)
            return out
        return scale

    def _wrap_reset(self, original):
        @functools.wraps(original)
        def zero_grad(obj, *args, **kwargs):
            self.resets += 1
            return original(obj, *args, **kwargs)
        return zero_grad

    def _switch_off(self, error: BaseException) -> None:
        self.active = False
        self.losses, self.first_grad = [], None
        self._fault("loss observation switched off", error)


def summed_over(fn, most: int = 4) -> int:
    """How many values a loss is a sum of: the size of the tensor that its first sum node
    (near the loss: its negation, a scaling, the sum of two sums) reduced; 0 for a mean or
    a loss function's own reduction. Read off the autograd graph, no tensor touched."""
    for node in _nodes(fn, most):
        sizes = getattr(node, "_saved_self_sym_sizes", None) if node.name() == "SumBackward0" else None
        if sizes is not None:
            return math.prod(int(s) for s in sizes)
    return 0


def _leaf_of(fn, most: int = 64):
    """A weakref to a leaf tensor that requires grad reached from the autograd node `fn`
    (breadth first, at most `most` nodes), or None."""
    for node in _nodes(fn, most):
        leaf = getattr(node, "variable", None)      # (an AccumulateGrad node)
        if isinstance(leaf, torch.Tensor):
            return weakref.ref(leaf)
    return None


def _nodes(fn, most: int):
    """The autograd nodes reached from `fn`, breadth first, `most` looked at (None too)."""
    queue, seen = [fn], 0
    while queue and seen < most:
        node = queue.pop(0)
        seen += 1
        if node is not None:
            yield node
            queue += [n for n, _ in node.next_functions]
