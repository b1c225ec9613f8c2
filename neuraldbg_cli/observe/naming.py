"""Layer names: qualified names in the model the script called (the outermost module, or
the module it was assigned into), without the prefixes that wrappers (torch.compile, DDP,
FSDP, activation checkpointing, Lightning's strategies) insert."""
from __future__ import annotations

import os
import sys
import weakref

import torch
from torch import nn

from ..trace import ROOT_LAYER

_ALWAYS_STRIPPED = {"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module",
                    "_forward_module"}      # (Lightning's wrapper of a LightningModule)


def is_wrapper(module: nn.Module) -> bool:
    """Modules that only wrap the user's model: not layers of their own."""
    name = type(module).__name__
    return name in ("OptimizedModule", "DistributedDataParallel", "DataParallel",
                    "FullyShardedDataParallel", "CheckpointWrapper")


def unwrap(module: nn.Module) -> nn.Module:
    while is_wrapper(module):
        inner = getattr(module, "_orig_mod", None) or getattr(module, "module", None)
        inner = inner or getattr(module, "_fsdp_wrapped_module", None)
        if inner is None:
            break
        module = inner
    return module


def clean(name: str, strip_module: bool) -> str:
    """'_orig_mod.module.fc1' -> 'fc1'; '' -> '(root)'."""
    parts = [p for p in name.split(".") if p and p not in _ALWAYS_STRIPPED]
    if strip_module and parts and parts[0] == "module":
        parts = parts[1:]
    return ".".join(parts) or ROOT_LAYER


def qualified_names(root: nn.Module) -> dict:
    """id(submodule) -> cleaned qualified name, for every module under `root`."""
    strip_module = is_wrapper(root)
    names = {}
    for name, module in root.named_modules():
        names.setdefault(id(module), clean(name, strip_module))
    return names


def prefixed(names: dict, root: nn.Module, taken: set, called: nn.Module | None = None) -> dict:
    """Names of a second outermost module (a GAN's discriminator, say) that would collide
    with the first one's get a prefix: the script's name for it where the code that called
    it (`called`, the module called: `root` or a part of it) holds it in a variable,
    'netD.fc1'; else its class name, 'Discriminator.fc1'."""
    if not taken.intersection(names.values()):
        return names
    prefix = _variable_name(root, called) or class_name(unwrap(root))
    if prefix in taken:
        prefix = class_name(unwrap(root))
    base, n = prefix, 2
    while prefix in taken:
        prefix, n = f"{base}#{n}", n + 1
    return {i: prefix if n_ == ROOT_LAYER else f"{prefix}.{n_}" for i, n_ in names.items()}


# Code whose frames stand between the script's call and the registry (torch's module call,
# neuraldbg's hooks): the script's own frame is the first outside them.
_INSIDE = (os.path.dirname(torch.__file__) + os.sep,
           os.path.dirname(os.path.dirname(__file__)) + os.sep)
_LOOKED_AT = 40     # frames at most


def _variable_name(root: nn.Module, called: nn.Module | None) -> str | None:
    """The name of the variable that holds `root` (or the module called, or a wrapper of it)
    in the script's frame that called it, 'G_BA' for `G_BA(real_A)`; None where none does
    (a module called through an attribute: `self.generator(z)`). Read once per model."""
    wanted = {id(root), id(called)}
    frame = sys._getframe(1)
    for _ in range(_LOOKED_AT):
        if frame is None:
            return None
        if not frame.f_code.co_filename.startswith(_INSIDE):
            break
        frame = frame.f_back
    else:
        return None
    for scope in (frame.f_locals, frame.f_globals):     # (a training loop at module level)
        for name, value in scope.items():
            if name != "self" and isinstance(value, nn.Module) and name.isidentifier() \
                    and (id(value) in wanted or id(unwrap(value)) in wanted):
                return name
    return None


class Parents:
    """The module each module was assigned into (torch's global module-registration hook), so
    that a submodule the script calls on its own is named in the model it belongs to: a
    LightningModule whose training_step calls self.generator(z) has layers 'generator.0' and
    'discriminator.0', not '0' and 'Sequential.0'. Only modules built while neuraldbg
    observes are known (under `neuraldbg run`: all of them)."""

    def __init__(self):
        self.of: dict = {}      # id(child) -> (weakref to it, weakref to its first parent)

    def assigned(self, parent, name, child) -> None:
        """torch's hook: `child` assigned as `parent.name`; returns None (keeps `child`)."""
        if child is None:
            return
        entry = self.of.get(id(child))
        if entry is None or entry[0]() is not child or entry[1]() is None:
            self.of[id(child)] = (weakref.ref(child), weakref.ref(parent))

    def topmost(self, module: nn.Module, allowed: set | None = None) -> nn.Module:
        """The outermost module that still holds `module` (itself when none does), within
        `allowed` (ids) when given."""
        seen = {id(module)}
        while True:
            entry = self.of.get(id(module))
            parent = entry[1]() if entry is not None and entry[0]() is module else None
            if parent is None or id(parent) in seen or (allowed is not None
                                                         and id(parent) not in allowed):
                return module
            if not any(c is module for c in parent.children()):
                return module           # moved, or replaced by another (model.head = new)
            seen.add(id(parent))
            module = parent

    def purge(self) -> None:
        for key in [k for k, (child, _) in self.of.items() if child() is None]:
            del self.of[key]


def class_name(module: nn.Module) -> str:
    """The class name the user wrote: FSDP2's fully_shard (and replicate) swap a module's
    class for one made on the fly, FSDPLinear(FSDPModule, Linear), that names the original
    at `_orig_cls_mro_index` in its MRO; 'FSDPLinear' would match no class-name table and
    tell the user of no layer of theirs."""
    cls = type(module)
    index = getattr(cls, "_orig_cls_mro_index", None)
    if index is None and cls.__bases__ and cls.__bases__[0].__name__ == "FSDPModule":
        index = 2               # (older torch: the same layout, without the attribute)
    mro = cls.__mro__
    if type(index) is int and 0 < index < len(mro) and mro[index] is not object:
        cls = mro[index]
    return cls.__name__
