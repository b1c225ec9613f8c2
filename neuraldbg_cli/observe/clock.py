"""Where steps begin and end: optimizer steps pace them, and only every N-th is observed."""
from __future__ import annotations

from .optimizers import OptimizerWatch

_PURGE_EVERY = 256        # steps between sweeps of modules that no longer exist


class StepClock:
    """The step being observed and the steps completed.

    The pacing optimizer's step ends a step; a script without any optimizer has each
    outermost forward with gradients end one (`pending_end`, ended at the next forward)."""

    def __init__(self, every: int, emit):
        # Observe every `every`-th step only (1: all). On the others the hooks return at once:
        # for models whose steps are mostly Python overhead, the cost drops about N-fold, and a
        # state must then last `debounce_steps` observed steps (N times as long) to be seen.
        self.every = every
        self.step = 0                       # index of the step being observed
        self.steps = 0                      # completed steps
        self.pending_end = False
        self.optimizers_created = 0
        self.optim = OptimizerWatch(emit)

    def has_optimizer(self) -> bool:
        """Knowing that the script has an optimizer (before its first step) keeps forwards
        of gradient accumulation in one step."""
        return self.optimizers_created > 0 or self.optim.primary is not None

    def forward_returned(self) -> None:
        """An outermost forward with gradients returned."""
        if not self.has_optimizer():
            self.pending_end = True

    def advance(self, complete: bool) -> bool:
        """The step is over (complete: not cut short by the end of the run); True when the
        next one is observed."""
        if complete:
            self.steps += 1
            self.step += 1
            self.optim.new_window()
        return self.step % self.every == 0

    def purge_due(self, complete: bool) -> bool:
        return complete and self.steps % _PURGE_EVERY == 0

    def restart(self) -> None:
        """Forwards before the optimizer existed (a dry run that initialises lazy modules)
        were counted as steps; training proper starts at step 0."""
        self.step = self.steps = 0
