"""Where steps begin and end: optimizer steps pace them, and only every N-th is observed."""
from __future__ import annotations

from .optimizers import OptimizerWatch

_PURGE_EVERY = 256        # steps between sweeps of modules that no longer exist


class StepClock:
    """The step being observed and the steps completed.

    The pacing optimizer's step ends a step. Knowing that the script has an optimizer (made,
    if not yet stepped) keeps forwards of gradient accumulation in one step; a script without
    any has each outermost forward with gradients end one (`pending_end`, ended at the next
    outermost call), until it calls backward(): from then on each backward() ends one
    (`by_hand`: an RNN cell called once a character and stepped by hand once a name)."""

    def __init__(self, every: int, emit):
        # Observe every `every`-th step only (1: all). On the others the hooks return at once:
        # for models whose steps are mostly Python overhead, the cost drops about N-fold, and a
        # state must then last `debounce_steps` observed steps (N times as long) to be seen.
        self.every = every
        self.step = 0                       # index of the step being observed
        self.steps = 0                      # completed steps
        self.pending_end = False
        self.iterations = 0                 # steps completed, when numbered by a framework
        self.optimizers_created = 0
        self.by_hand = False                # modules, no optimizer, backward() seen
        self.optim = OptimizerWatch(emit)

    def advance(self, complete: bool, to: int | None = None) -> bool:
        """The step is over (complete: not cut short by the end of the run); True when the
        next one is observed. `to`: the next step's number, the framework's (framework_step)."""
        if complete:
            self.steps += 1
            self.step += 1
            self.optim.new_window()
        if to is not None:
            self.iterations += 1
            self.step = self.steps = to
            return self.iterations % self.every == 0
        return self.step % self.every == 0

    def saw_backward(self) -> None:
        """A backward() of a model of modules: with no optimizer, it ends the step (at the
        next outermost call)."""
        if not self.optimizers_created and self.optim.primary is None:
            self.by_hand = self.pending_end = True

    def purge_due(self) -> bool:
        """Time to forget modules that no longer exist (checked after a completed step)."""
        return self.steps % _PURGE_EVERY == 0

    def restart(self) -> None:
        """Forwards before the optimizer existed (a dry run that initialises lazy modules)
        were counted as steps; training proper starts at step 0."""
        self.step = self.steps = 0
