"""Layer names: qualified names in the outermost module the script called, without the
prefixes that wrappers (torch.compile, DDP, FSDP, activation checkpointing) insert."""
from __future__ import annotations

from torch import nn

from ..trace import ROOT_LAYER

_ALWAYS_STRIPPED = {"_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"}


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


def prefixed(names: dict, root: nn.Module, taken: set) -> dict:
    """Names of a second outermost module (a GAN's discriminator, say) that would collide
    with the first one's get its class name as a prefix: 'Discriminator.fc1'."""
    if not taken.intersection(names.values()):
        return names
    prefix = type(unwrap(root)).__name__
    base, n = prefix, 2
    while prefix in taken:
        prefix, n = f"{base}#{n}", n + 1
    return {i: prefix if n_ == ROOT_LAYER else f"{prefix}.{n_}" for i, n_ in names.items()}
