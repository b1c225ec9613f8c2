"""The `neuraldbg` command: parses options, opens files, maps errors to exit codes."""
from __future__ import annotations

import os
import signal
import sys

import typer

try:        # typer >= 0.24 carries its own copy of click
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _cx

from ..errors import InputError
from ..inert import inert
from ..states import failure_names, parse_signals
from ..thresholds import Thresholds, defaults_text, load_thresholds, parse_states

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,   # the script's tracebacks must look like python's
    rich_markup_mode=None,
    help="Find where and why PyTorch training fails: dead ReLUs, saturation, vanishing or "
         "exploding gradients, NaN.",
)

DEFAULT_TRACE = "neuraldbg-trace.jsonl"
JUNIT_HELP = ("write JUnit XML here: a test case per observed layer and signal, failed by "
              "the --fail-on states")


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so the trace is closed before the process dies."""


class _Die(BaseException):
    """Carries a KeyboardInterrupt or SIGTERM past typer, to end the process as python would."""

    def __init__(self, death):
        super().__init__(death)
        self.death = death


def _fail_on(option: str | None, thresholds: Thresholds) -> tuple:
    return thresholds.fail_on if option is None else parse_states(option)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                      "allow_interspersed_args": False},
    help="Run a training script (or -m MODULE) as python would, observing every layer. "
         "Options go before SCRIPT; everything after it is the script's own.",
)
def run(
    ctx: typer.Context,
    script: str = typer.Argument(..., metavar="SCRIPT", help="the training script (with -m: a module)"),
    module: bool = typer.Option(False, "-m", help="run SCRIPT as a module, like python -m"),
    trace: str = typer.Option(DEFAULT_TRACE, "--trace", metavar="PATH",
                              help="where the JSONL trace goes (under torchrun: NAME.rankR.jsonl)"),
    thresholds: str | None = typer.Option(None, "--thresholds", metavar="PATH",
                                             help="YAML file overriding the default thresholds"),
    fail_on: str | None = typer.Option(None, "--fail-on", metavar="STATES",
                                          help="comma list of states that fail the run with "
                                               "exit 3, e.g. dead,nonfinite; none disables"),
    every: int = typer.Option(1, "--every", metavar="N", min=1,
                              help="observe every N-th step only (default 1: all); cheaper "
                                   "for tiny models, but a state must then last N times longer"),
    detectors: str | None = typer.Option(None, "--detectors", metavar="SIGNALS",
                                          help="comma list of the signals observed, e.g. "
                                               "activation,gradient (default all): fewer "
                                               "cost less"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no summary on stderr"),
    junit: str | None = typer.Option(None, "--junit", metavar="FILE", help=JUNIT_HELP),
) -> None:
    from ..observe.session import trace_path_for
    from ..trace import check_writable
    from . import runner

    if script.startswith("-") and script != "-":
        # ignore_unknown_options hands an unknown option over as SCRIPT
        raise InputError(f"no such option: {script} (see: neuraldbg run --help)")
    th = load_thresholds(thresholds)
    gate = _fail_on(fail_on, th)
    signals = parse_signals(detectors)
    check_writable(trace_path_for(trace))
    if junit is not None:
        from ..publish.junit import check_writable as junit_writable

        junit = trace_path_for(junit)       # (under torchrun: one per rank, as the trace)
        junit_writable(junit)
    target = runner.module_target(script) if module else runner.script_target(script)
    raise typer.Exit(_observe(target, list(ctx.args), trace, th, gate, quiet, every, junit,
                              signals))


def _observe(target, args, trace, th, gate, quiet, every, junit=None, signals=None) -> int:
    from ..observe.session import Session
    from . import runner

    session = Session(trace, th, script=target.argv0, argv=[target.argv0, *args], quiet=quiet,
                      every=every, signals=signals)
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_terminated)
    status, code, error, death = "completed", 0, None, None
    try:
        session.start()
        runner.run(target, args)
    except SystemExit as e:
        code = _exit_code(e.code)
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
    _to_ci(session, gate, junit)
    if death is not None:
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


def _die_like_python(death) -> None:
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


@app.command(help="Explain one or more traces (several: the ranks of one distributed run).")
def explain(
    traces: list[str] = typer.Argument(..., metavar="TRACE...", help="trace files"),
    as_json: bool = typer.Option(False, "--json", help="print the hypotheses as JSON"),
    fail_on: str | None = typer.Option(None, "--fail-on", metavar="STATES",
                                          help="exit 3 if any of these states is in the traces"),
    junit: str | None = typer.Option(None, "--junit", metavar="FILE", help=JUNIT_HELP),
) -> None:
    from .explain_cmd import explain_traces

    gate = parse_states(fail_on) if fail_on is not None else None
    if junit is not None:
        from ..publish.junit import check_writable as junit_writable

        junit_writable(junit)
    raise typer.Exit(explain_traces(traces, as_json=as_json, fail_on=gate, junit=junit))


@app.command(help="Write one self-contained HTML file of one or more traces: the verdict, a "
                  "layer x step timeline coloured by state, each layer's curves.")
def report(
    traces: list[str] = typer.Argument(..., metavar="TRACE...", help="trace files"),
    output: str = typer.Option("neuraldbg-report.html", "--output", "-o", metavar="FILE",
                               help="the HTML file to write"),
) -> None:
    from ..publish.html import write_report

    write_report(traces, output)
    print(f"neuraldbg: report written to {output}", file=sys.stderr)


@app.command("thresholds", help="Print the default thresholds, annotated: a file to start "
                                 "from (neuraldbg thresholds > mine.yaml; --thresholds mine.yaml).")
def thresholds_cmd() -> None:
    sys.stdout.write(defaults_text())


def main(argv: list | None = None) -> int:
    """Entry point; returns the exit status. Errors of usage and input are one line, exit 2."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        rc = app(args=argv, prog_name="neuraldbg", standalone_mode=False)
        return rc if isinstance(rc, int) else 0
    except _Die as d:
        _die_like_python(d.death)
        return 130
    except typer.Exit as e:
        return e.exit_code
    except _cx.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":     # bare `neuraldbg`: the help
            print(e.format_message(), file=sys.stderr)
            return 2
        ctx = getattr(e, "ctx", None)
        where = f"neuraldbg {ctx.info_name} --help" if ctx is not None and ctx.parent else "neuraldbg --help"
        print(f"neuraldbg: error: {e.format_message()} (see: {where})", file=sys.stderr)
        return 2
    except _cx.ClickException as e:
        print(f"neuraldbg: error: {e.format_message()}", file=sys.stderr)
        return 2
    except typer.Abort:
        return 130
    except InputError as e:
        print(f"neuraldbg: error: {e}", file=sys.stderr)
        return e.exit_code


def main_exit() -> None:
    """Console-script entry point."""
    sys.exit(main())
