"""The observing wing: hooks into torch, reduces each layer's numbers per step, judges them
and writes transitions. Imports torch; nothing in `explain` imports this package."""
