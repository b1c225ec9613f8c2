"""What the known keys of each event kind must hold, so that every reader can rely on them:
a trace from elsewhere is untrusted data, and an event that breaks its shape is skipped (with
a warning) rather than handed on."""
from __future__ import annotations


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_str(v) -> bool:
    return isinstance(v, str)


def _opt_str(v) -> bool:
    return v is None or isinstance(v, str)


def _is_dict(v) -> bool:
    return isinstance(v, dict)


def _is_list(v) -> bool:
    return isinstance(v, list)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _numbers(v) -> bool:
    return isinstance(v, list) and all(_is_number(x) for x in v)


def _opt_numbers(v) -> bool:
    return v is None or _numbers(v)


def _opt_id(v) -> bool:
    return v is None or isinstance(v, str) or _is_int(v)


# Keys whose type every reader relies on, per event kind (absent keys are the readers' concern:
# traces of older versions may lack some). Unknown kinds and keys are passed on untouched.
_SHAPES = {
    "run_start": {"rank": _is_int, "world_size": _is_int, "script": _is_str, "run_id": _opt_id,
                  "argv": _is_list, "thresholds": _is_dict},
    "transition": {"step": _is_int, "layer": _is_str, "signal": _is_str, "to": _is_str,
                   "from": _opt_str, "module_type": _opt_str, "kind": _opt_str, "stats": _is_dict},
    "model": {"layers": _is_list, "root": _opt_str, "step": _is_int},
    "hparams": {"step": _is_int, "lr": _numbers, "previous_lr": _opt_numbers,
                "optimizer": _opt_str, "optimizer_index": _is_int},
    "warning": {"message": _is_str, "layer": _opt_str},
    "run_end": {"status": _opt_str, "steps": _is_int, "exit_code": _is_int, "error": _opt_str},
}


def problem(event: dict) -> str | None:
    """Why the event cannot be used, or None. A run_start keeps its place (it opens the
    trace): its keys of the wrong type are dropped instead."""
    kind = event["event"]
    if not isinstance(kind, str):
        return "an event whose kind is not a string"
    for key, ok in _SHAPES.get(kind, {}).items():
        if key in event and not ok(event[key]):
            if kind == "run_start":
                del event[key]
                continue
            return f"{kind} with a {key!r} of the wrong type"
    if kind == "transition" and event.get("step", 0) < 0:
        return "transition at a negative step"
    return None
