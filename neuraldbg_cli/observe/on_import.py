"""Call back once a module has been imported, at the moment the importer imports it.

`neuraldbg run` must not import torch before the script does: importing torch can print
(in an environment without numpy it warns on stderr), so a script that never imports torch,
or that prints before it does, would show output that `python` would not. Instead the
monitor is installed right after the script's own `import torch` completes, before the
statement after it runs, so no model can be called unobserved.
"""
from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder


class AfterImport(MetaPathFinder):
    """A meta-path finder that finds nothing itself: when `name` is about to be imported, it
    asks the finders after it for the real spec and has the module's loader call `callback()`
    once the module has executed. Removes itself after the first attempt (successful or
    not), so it costs nothing once the module is loaded."""

    def __init__(self, name: str, callback):
        self.name = name
        self.callback = callback

    def install(self) -> None:
        if self.name in sys.modules:
            self.callback()
        else:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        self.remove()
        spec = _real_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, callback = spec.loader, self.callback

        def exec_module(module):
            try:
                type(loader).exec_module(loader, module)
            finally:
                del loader.exec_module      # the loader is this module's own: leave it as found
            callback()

        loader.exec_module = exec_module
        return spec


def _real_spec(fullname, path, target):
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(fullname, path, target)
        if spec is not None:
            return spec
    return None
