"""torch's global hooks and the one patch neuraldbg makes, installed and removed as one."""
from __future__ import annotations

import warnings

from torch.nn.modules import module as nn_module
from torch.optim.optimizer import (
    Optimizer,
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

_COMPILE_HOOK_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"


class Installed:
    """Every module call (before and after), every optimizer step (before and after), every
    submodule assigned into a module (for layer names), and a patched `Optimizer.__init__`."""

    def __init__(self, pre_hook, hook, optimizer_stepping, optimizer_stepped, optimizer_created,
                 module_assigned):
        self._pre_hook, self._hook = pre_hook, hook
        self._module_handles = []           # the two module hooks: paused between observed steps
        self.modules(True)
        self._handles = [
            register_optimizer_step_pre_hook(optimizer_stepping),
            register_optimizer_step_post_hook(optimizer_stepped),
            nn_module.register_module_module_registration_hook(module_assigned),
        ]
        # Knowing that the script has an optimizer (before its first step) keeps forwards of
        # gradient accumulation in one step; without one, each outermost forward is a step.
        orig = self._orig_opt_init = Optimizer.__init__

        def init(opt, *args, **kwargs):
            orig(opt, *args, **kwargs)
            optimizer_created(opt)
        Optimizer.__init__ = init
        # torch warns, on the user's stderr, that global hooks also fire for the wrapper of
        # torch.compile(model): these hooks are neuraldbg's and skip that wrapper.
        warnings.filterwarnings("ignore", message=_COMPILE_HOOK_WARNING, category=UserWarning)
        self._warning_filter = warnings.filters[0]

    @property
    def modules_on(self) -> bool:
        return bool(self._module_handles)

    def modules(self, on: bool) -> None:
        """Install or remove the module-call hooks (a dict entry each way: microseconds).
        Removed, torch calls modules on its fast path, as if neuraldbg were not there."""
        if on and not self._module_handles:
            self._module_handles = [
                nn_module.register_module_forward_pre_hook(self._pre_hook),
                nn_module.register_module_forward_hook(self._hook, with_kwargs=True,
                                                       always_call=True)]
        elif not on and self._module_handles:
            _remove(self._module_handles)
            self._module_handles = []

    def remove(self) -> None:
        self.modules(False)
        _remove(self._handles)
        self._handles = []
        Optimizer.__init__ = self._orig_opt_init
        if self._warning_filter in warnings.filters:
            warnings.filters.remove(self._warning_filter)
            getattr(warnings, "_filters_mutated", lambda: None)()   # drop cached verdicts


def _remove(handles: list) -> None:
    for h in handles:
        h.remove()
        # (torch's handle forgets the with_kwargs flag of a global forward hook)
        getattr(nn_module, "_global_forward_hooks_with_kwargs", {}).pop(h.id, None)
