"""A warning that torch gives from inside a wrapped function, shown at the user's line."""
from __future__ import annotations

import sys
import warnings


def warning_from_caller(original, args: tuple, kwargs: dict):
    """The call, where torch warns of a broadcast (a target of another shape). It warns with
    stacklevel=2, which names the wrapper: a warning about to be shown there is given again
    as from the wrapper's caller (the user's line), through the user's filters and registry,
    so it shows as under plain python (once per line by default). `catch_warnings` cannot do
    this: entering it resets every "once" registry, and the warning would show at each step."""
    caller = sys._getframe(2)
    shown = warnings.showwarning

    def again(message, category, filename, lineno, file=None, line=None):
        warnings.showwarning = shown
        where = caller.f_globals
        try:
            # (no module_globals: Python 3.13 rejects a script's, run as __main__ by runpy)
            warnings.warn_explicit(message, category, caller.f_code.co_filename,
                                   caller.f_lineno, module=where.get("__name__"),
                                   registry=where.setdefault("__warningregistry__", {}))
        except category:
            raise           # (a filter turned it into an error: as under plain python)
        except Exception:  # noqa: BLE001 - the user's loss must run: show it where torch said
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = again
    try:
        return original(*args, **kwargs)
    finally:
        if warnings.showwarning is again:
            warnings.showwarning = shown
