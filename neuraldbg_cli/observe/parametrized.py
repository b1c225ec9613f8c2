"""Layers under torch.nn.utils.parametrize (`parametrizations.spectral_norm`, `weight_norm`,
`orthogonal`): the weight is computed at each access from
`module.parametrizations.weight.original`, by modules of the parametrization's own. The
layer owns those originals (its gradient and updates are its weight's, not its bias's
alone), it is still a leaf, and the parametrization modules are not layers."""
from __future__ import annotations

from torch.nn.utils.parametrize import ParametrizationList

_HOLDER = "parametrizations"    # (the ModuleDict torch adds to a parametrized module)


def own_parameters(module):
    """The parameters a layer holds: its own, and the originals of its parametrized ones."""
    yield from module.parameters(recurse=False)
    inner = module._modules.get(_HOLDER)
    if inner is not None:
        yield from inner.parameters()


def is_leaf(module) -> bool:
    """No child module but its parametrizations."""
    return all(m is None or name == _HOLDER for name, m in module._modules.items())


def is_parametrization(module) -> bool:
    """What computes a parametrized weight (called at each access to it): not a layer."""
    return isinstance(module, ParametrizationList)
