"""Run a script or module as `__main__`, in this process, the way `python` does.

Knows nothing of torch. Sets sys.argv, sys.path[0] (both restored afterwards) and a real
`__main__` module object (also registered as `__mp_main__`, so classes defined in the script
pickle to and from spawn and forkserver workers), which stays, as under python.
"""
from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass

from ..errors import InputError


@dataclass
class Target:
    """What to run: `path` is the file that runs; `spec` is set for `-m`."""
    path: str
    argv0: str
    path0: str
    code: types.CodeType
    spec: importlib.machinery.ModuleSpec | None = None


def script_target(script: str) -> Target:
    """Read and compile SCRIPT; InputError if missing, unreadable or not Python."""
    path = os.path.abspath(script)
    if os.path.isdir(path):
        main = os.path.join(path, "__main__.py")
        if not os.path.isfile(main):
            raise InputError(f"can't find '__main__.py' in {script}")
        return _compiled(main, script, path)
    if not os.path.exists(path):
        raise InputError(f"script not found: {script}")
    return _compiled(path, script, os.path.dirname(path))


def _compiled(path: str, argv0: str, path0: str) -> Target:
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        raise InputError(f"cannot read script {argv0}: {e.strerror or e}") from None
    try:
        code = compile(source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        line = f" line {e.lineno}" if getattr(e, "lineno", None) else ""
        raise InputError(f"script {argv0}{line}: {type(e).__name__}: {getattr(e, 'msg', e)}") from None
    return Target(path, argv0, path0, code)


def module_target(name: str) -> Target:
    """Find MODULE as `python -m` does (a package runs its __main__)."""
    cwd = os.getcwd()
    sys.path.insert(0, cwd)
    try:
        spec = _find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = _find_spec(name + ".__main__")
            if spec is None:
                raise InputError(f"no module named {name}.__main__; '{name}' is a package "
                                 "and cannot be directly executed")
    finally:
        sys.path.remove(cwd)
    if spec is None or spec.loader is None:
        raise InputError(f"no module named {name}")
    try:
        code = spec.loader.get_code(spec.name)
    except SyntaxError as e:
        raise InputError(f"module {name} line {e.lineno}: SyntaxError: {e.msg}") from None
    except (ImportError, OSError) as e:
        raise InputError(f"cannot load module {name}: {e}") from None
    if code is None:
        raise InputError(f"module {name} has no code to run")
    return Target(spec.origin or name, spec.origin or name, cwd, code, spec)


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError) as e:
        if isinstance(e, ModuleNotFoundError):
            return None
        raise InputError(f"cannot find module {name}: {e}") from None


def run(target: Target, args: list) -> None:
    """Execute the target as __main__; exceptions (SystemExit included) propagate."""
    main = types.ModuleType("__main__")
    main.__file__ = target.path
    main.__builtins__ = builtins
    main.__loader__ = target.spec.loader if target.spec else None
    main.__spec__ = target.spec
    if target.spec is not None:
        main.__package__ = target.spec.parent
    saved = (sys.argv, sys.path[:])
    sys.argv = [target.argv0, *args]
    sys.path.insert(0, target.path0)
    # As under python, the script stays the process's __main__ until the process exits:
    # atexit handlers, worker finalizers and teardown code may still look it up (dropping it
    # early made gloo's teardown abort now and then).
    sys.modules["__main__"] = main
    sys.modules["__mp_main__"] = main
    try:
        exec(target.code, main.__dict__)
    finally:
        sys.argv, sys.path[:] = saved


def user_traceback(tb, path: str):
    """Drop neuraldbg's own frames, so the traceback starts where python's would."""
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename != path:
        start = start.tb_next
    return start or tb
