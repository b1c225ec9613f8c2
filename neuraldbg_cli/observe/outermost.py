"""The once-per-forward half of the hooks: the outermost call of each forward, the model's
input and its output layer. A part of `hooks.Hooks` (the attributes it reads are that
class's)."""
from __future__ import annotations

import inspect
import itertools
import weakref

import torch
from torch import nn

from . import naming
from .accumulator import first_tensor
from .loss_graph import passed_through
from .parametrized import is_parametrization, own_parameters
from .transforms import transform_level

_graph_task = getattr(torch._C, "_current_graph_task_id", lambda: -1)  # -1: not in backward
_Tensor = torch.Tensor
_Loss = nn.modules.loss._Loss


class OutermostHooks:
    """What the outermost call of each forward brings: a root to name, the input, a step."""

    copies = None       # ModelCopies (copies.py): the calls without gradients, or None

    def _outermost_init(self) -> None:
        self.eval_roots: dict = {}          # id -> outermost module whose last call was in eval()
        self.eval_trained: set = set()      # ids of those found trained in eval() (step_facts.py)
        self._eval_call = False             # in an eval() call of a model not trained in eval()
        self.forwards = 0                   # outermost forwards so far (call sites, layers.py)
        self._input_in_kwargs = False       # the outermost call had no positional tensor
        self.transformed = False            # a model was called inside a torch.func transform

    def _outermost_return(self, module, args, output, kwargs) -> None:
        if transform_level() is not None:   # (a model called inside vmap: its tensors are
            self.transformed = True         # the transform's, transforms.py; run_end says
            return                          # so, where no step was seen to say why)
        if self.evidence is not None:       # (a capture may need the step's inputs)
            self.evidence.saw_forward(module, args, kwargs)
        if self._input_in_kwargs:
            # model(**batch), as Hugging Face's Trainer calls it: the input is the first
            # floating-point tensor passed by keyword (pixel_values, inputs_embeds, ...)
            self._input_in_kwargs = False
            x = next((v for k, v in kwargs.items() if isinstance(v, _Tensor)
                      and v.is_floating_point() and "mask" not in k.lower()), None)
            if x is not None:
                self._observe_input(x, first=True)
        calls = self.loss_calls
        if calls is not None and calls.call is None:
            calls.saw_output(first_tensor(output))      # (a hand-written loss may use it)
        last = self._last_leaf
        if last is not None and not last[0].is_output and returned(output, last[1]):
            # The model's own output layer: a sigmoid there saturating is a confident
            # prediction, the aim of training, not a failure.
            last[0].is_output = True
            prev = self._prev_leaf
            if prev is not None and last[1].numel() == 1 and _own_loss(output) \
                    and _loss_module(last[0]):
                # (the last module computed the loss the model returns, yhenon's RetinaNet
                # its focal loss on the sigmoid scores: the output layer was called before it;
                # not a Hugging Face model's (loss, logits), whose logits are its last layer's,
                # nor a critic's value of one state, a layer's own output)
                prev[0].is_output = True
        clock = self.clock
        if clock.optimizers_created == 0 and clock.optim.primary is None and self.active \
                and torch.is_grad_enabled() and module.training and not clock.by_hand:
            # no optimizer (yet), no backward() yet: each outermost forward with gradients
            # is a step
            clock.pending_end = True

    def _outermost_call(self, module, args):
        self._eval_call = False
        if self.clock.pending_end:
            self._end_step()
            if not self.active:
                return
        if isinstance(module, _Loss):
            return
        if not torch.is_grad_enabled():
            if self.copies is not None and module.training:     # (a target network? acting?)
                self.copies.saw(module, _rows(args), self.clock.step)
            return
        if _graph_task() != -1:
            # Called during backward: gradient checkpointing running a block again. Not a
            # model call: its input is a hidden state, and the block already has its name.
            return
        copies = self.copies
        if copies is not None and module.training and id(module) not in copies.training_ids:
            copies.saw_frozen(module, _rows(args))  # (DINO's teacher: every parameter frozen)
        self.forwards += 1                  # (a new forward: call sites count from the first)
        if not module.training:
            self.eval_roots[id(module)] = weakref.ref(module)
            # an evaluation pass with gradients on (a validation loop without no_grad): not
            # training, so its layers are not read, unless the model trains in eval()
            self._eval_call = id(module) not in self.eval_trained
        elif self.eval_roots:
            self.eval_roots.pop(id(module), None)
        reg = self.registry
        if reg.allowed is not None and id(module) not in reg.allowed \
                and naming.unwrap(module) is not reg.model:
            return
        root = self._roots.get(id(module))
        if root is None or root() is not module:
            if next(module.parameters(), None) is None or is_parametrization(module):
                # Parameter-free modules called on their own (nn.Softmax()(logits) in a loop)
                # are post-processing, not a model: neither a root nor layers of one; nor is
                # a parametrized weight computed outside a forward.
                reg.skip_all(module)
                return
            reg.add_root_safely(module)
        if not self.observing or self._eval_call:
            return
        masks = _masks.get(type(module))
        if masks is None:
            masks = _masks[type(module)] = mask_positions(module)
        x = first_tensor(args if not masks else [a for i, a in enumerate(args) if i not in masks])
        if x is not None:
            self._observe_input(x)
        else:
            self._input_in_kwargs = True        # (read when the call returns, from kwargs)

    def _observe_input(self, x, first: bool = False) -> None:
        """The outermost module's input, as the pseudo-layer (input); `first`: put it before
        the layers already touched (it is read after them, when the call returns)."""
        inp = self._input
        if not inp.skip and transform_level() is None:
            new = not inp.acc.numel
            try:
                if not inp.acc.add_output(x, defer=True):
                    return
            except Exception as e:  # noqa: BLE001
                inp.skip = True
                self.disable(None, inp, e)
                return
            if new:
                if first:
                    self.touched.insert(0, inp)
                else:
                    self.touched.append(inp)


def _rows(args) -> int | None:
    """The rows of a call's first argument, a batch (None: not a tensor with a batch)."""
    x = args[0] if args else None
    return x.shape[0] if isinstance(x, _Tensor) and x.dim() else None


_masks: dict = {}   # module class -> mask_positions


def mask_positions(module) -> frozenset:
    """The positions of the forward's arguments named as masks (nn.Transformer's `src_mask`,
    `tgt_mask`: float masks of 0 and -inf): not the model's input, whose non-finite values
    are a bad batch."""
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(i for i, p in enumerate(params) if "mask" in p.name.lower()
                     and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def returned(output, y) -> bool:
    """Whether the model's `output` (a tensor, or a tuple, list or dict of them: CapsNet's
    (classes, reconstructions)) returns the last layer's output `y`, as itself, a view or a
    copy in another layout (a detection head's `out.permute(...).contiguous().view(...)`)."""
    if isinstance(output, _Tensor):
        outs = (output,)
    else:
        items = output.values() if isinstance(output, dict) else output \
            if isinstance(output, (tuple, list)) else ()
        outs = [t for t in itertools.islice(items, _RETURNED) if isinstance(t, _Tensor)]
    if any(same_values(t, y) for t in outs):
        return True
    fn = y.grad_fn
    return fn is not None and any(passed_through(t, fn) for t in outs)


_RETURNED = 8       # tensors of a returned tuple compared with the last layer's output


def _loss_module(rec) -> bool:
    """Whether the layer record's module holds no parameter of its own: it computes from
    what it is given (a loss), it is no layer that learns."""
    module = rec.ref() if rec.ref is not None else None
    return module is not None and next(own_parameters(module), None) is None


def _own_loss(output) -> bool:
    """Whether the model returned a loss (its first tensor one value on the graph), not a
    prediction."""
    t = first_tensor(output)
    return t is not None and t.numel() == 1 and t.grad_fn is not None


def same_values(out, y) -> bool:
    """Whether the model's output `out` is the last layer's output `y`, or a view of it in
    another shape (a generator's `self.model(z).view(n, *img_shape)`). By their bases, not
    their data pointers: a sharded tensor has no storage of its own to point to."""
    if out is y:
        return True
    base = out._base if out is not None else None
    return base is not None and (base is y or base is y._base) and out.numel() == y.numel()
