"""`neuraldbg run`'s engine: the script run under a Session, its end turned into a status
and an exit code (the script's own, 3 for a --fail-on state or a stop), the summary line, the
CI outputs."""
from __future__ import annotations

import os
import signal
import sys

from ..errors import InputError
from ..inert import inert
from ..states import failure_names
from ..stopping import TrainingStopped


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so the trace is closed before the process dies."""


class _Die(BaseException):
    """Carries a KeyboardInterrupt or SIGTERM past typer, to end the process as python would."""

    def __init__(self, death):
        super().__init__(death)
        self.death = death


def observe(target, args, trace, th, gate, quiet, every, junit=None, signals=None,
            stop_on=(), capture=None) -> int:
    """Runs the target under a Session; the exit status."""
    from ..observe.session import Session
    from . import runner

    session = Session(trace, th, script=target.argv0, argv=[target.argv0, *args], quiet=quiet,
                      every=every, signals=signals, stop_on=stop_on, capture=capture)
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)
    if session.world_size > 1:
        session.on_stop = _outlive_peers
    status, code, error, death = "completed", 0, None, None
    try:
        session.start()
        runner.run(target, args)
    except SystemExit as e:
        code = _exit_code(e.code)
    except TrainingStopped as e:        # (the status and exit code: Session.finish)
        status, code, error = "failed", 1, f"{type(e).__name__}: {e}"
    except KeyboardInterrupt as e:
        status, code, error, death = "interrupted", 130, "KeyboardInterrupt", e
        _print_exception(e, target.path)
    except _Terminated:
        status, code, error, death = "interrupted", 143, "SIGTERM", signal.SIGTERM
    except BaseException as e:  # noqa: BLE001 - reported exactly as python would
        status, code, error = "failed", 1, f"{type(e).__name__}: {e}"
        _print_exception(e, target.path)
    finally:
        if signal.getsignal(signal.SIGTERM) is _raise_terminated:
            signal.signal(signal.SIGTERM, previous)
        code = session.finish(status, code, error, fail_on=gate)
    if not session.quiet:
        _summary(session)
        _stopped(session)
    _to_ci(session, gate, junit)
    if death is not None and session.stopped is None:
        raise _Die(death)
    return code


def _to_ci(session, gate, junit) -> None:
    """The run's own trace, explained for CI systems (JUnit, GitHub); never the cause of a
    different exit status: what cannot be written or explained is a warning."""
    from ..publish import ci

    if not ci.wanted(junit) or (junit is None and session.rank != 0):
        return
    from ..explain.analysis import analyze
    from ..trace import open_trace

    try:
        analysis = analyze([open_trace(session.path)])
        if session.rank != 0:       # only rank 0 speaks to GitHub; each rank has its JUnit
            from ..publish import junit as junit_xml

            junit_xml.write(analysis, gate, junit)
        else:
            ci.publish(analysis, gate, junit)
    except InputError as e:
        print(f"neuraldbg: warning: {e}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - the script's own result stands
        print(f"neuraldbg: warning: CI output not written: {type(e).__name__}: {e}",
              file=sys.stderr)


def _print_exception(e: BaseException, path: str) -> None:
    """The traceback as python prints it: from the script's first frame, through excepthook."""
    from .runner import user_traceback

    e = e.with_traceback(user_traceback(e.__traceback__, path))
    sys.excepthook(type(e), e, e.__traceback__)


def _outlive_peers() -> None:
    """Under torchrun, once this rank has stopped: the SIGTERM that torchrun sends every rank
    when one of them exits is the stop's own consequence, not an interrupt. Ignored, so that
    the script's `finally` blocks and the trace's end run whole, and this rank exits 3 (torchrun
    still kills a rank that does not end within its grace period)."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:      # (not the main thread: then a SIGTERM ends the rank as before)
        pass


def _raise_terminated(signum, frame):
    raise _Terminated()


def _exit_code(code) -> int:
    """SystemExit.code -> process status, as python computes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


def die_like_python(death) -> None:
    """Python dies of SIGINT after an uncaught KeyboardInterrupt and of SIGTERM by default;
    a parent (a shell, torchrun) sees the same signal status under neuraldbg."""
    sys.stdout.flush()
    sys.stderr.flush()
    if isinstance(death, KeyboardInterrupt):
        # Re-raised outside typer, python itself runs atexit handlers and then exits by
        # SIGINT; the traceback was already printed without neuraldbg's frames.
        sys.excepthook = lambda *a: None
        raise death
    signal.signal(death, signal.SIG_DFL)
    os.kill(os.getpid(), death)


def _summary(session) -> None:
    # The episodes that count (verdict.py); blips and warning signs are only numbered: the
    # first lasting failure is what the line should name.
    failures = session.failures(failure_names())
    steps, blips = session.steps, session.blips()
    seen = f" ({blips} blip{'s' * (blips != 1)}: failures that did not last)" if blips else ""
    if session.off is not None:     # (a clean verdict on steps nobody watched says nothing)
        seen += f"; monitoring was switched off at step {session.off[0]}: not observed from then on"
    if not failures and steps == 0:     # (why, as far as this process can tell)
        why = ("the run ended before its first step was completed" if session.transitions else
               "training under torch.func transforms is not observed" if session.torch_func
               else "training in child processes is not observed")
        print(f"neuraldbg: no training step observed in this process ({why}){seen}; "
              f"trace: {session.path}", file=sys.stderr)
        return
    if not failures:
        print(f"neuraldbg: {steps} steps, no failure detected{seen}; trace: {session.path}",
              file=sys.stderr)
        return
    first = min(failures, key=lambda t: t["step"])
    layers = len({t["layer"] for t in failures})
    print(f"neuraldbg: {steps} steps, {len(failures)} lasting failure{'s' * (len(failures) != 1)} "
          f"in {layers} layer{'s' * (layers != 1)}{seen}; first: {inert(first['layer'])} "
          f"{first['signal']} {first['to']} at step {first['step']}. "
          f"Run: neuraldbg explain {session.path}", file=sys.stderr)



def _stopped(session) -> None:
    """Where training was stopped, the capture, and the samples to blame."""
    from ..stopping import pinpointed

    stop = session.stopped
    captured = session.stopper.captured if session.stopper is not None else None
    if stop is not None:
        since = f" since step {stop.step}" if stop.at != stop.step else ""
        print(f"neuraldbg: training stopped at step {stop.at}, before its update: "
              f"{inert(stop.layer)} {stop.signal} {stop.state}{since}", file=sys.stderr)
    if captured is not None:
        said = pinpointed(captured.get("pinpoint"), captured.get("blamed_indices"))
        print(f"neuraldbg: evidence captured in {captured['path']}"
              f"{'; ' + said if said else ''}", file=sys.stderr)
