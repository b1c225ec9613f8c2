"""Calls made inside a torch.func transform (vmap, grad, jvp): MAML's inner loop, a model
ensemble run with vmap, per-sample gradients. Their tensors are the transform's wrappers,
and a number reduced from one belongs to the transform: read at the step end, outside it,
it fails ("your tensor may have escaped from inside a function being vmapped"). The hooks
leave such calls alone, as they do a backward pass's; the loss passed to backward(), the
gradients and the updates, all outside the transform, are observed as usual."""
from __future__ import annotations

import torch

# transform_level(): None outside every transform (one C call, ~35 ns; a torch without
# functorch has no transform)
transform_level = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack",
                          None) or (lambda: None)
