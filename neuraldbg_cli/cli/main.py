"""The `neuraldbg` command: parses options, opens files, maps errors to exit codes."""
from __future__ import annotations

import sys

import typer

try:        # typer >= 0.24 carries its own copy of click
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _cx

from ..errors import InputError, check_folder
from ..states import parse_signals
from ..thresholds import Thresholds, defaults_text, load_thresholds, parse_states
from .run_cmd import _Die, die_like_python, observe

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,   # the script's tracebacks must look like python's
    rich_markup_mode=None,
    help="Find where and why PyTorch training fails: dead ReLUs, saturation, vanishing or "
         "exploding gradients, NaN.",
)

DEFAULT_TRACE = "neuraldbg-trace.jsonl"
DEFAULT_CAPTURE = "neuraldbg-capture"
JUNIT_HELP = ("write JUnit XML here: a test case per observed layer and signal, failed by "
              "the --fail-on states")


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        print(f"neuraldbg {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version,
                                          is_eager=True, help="print the version and exit")):
    pass


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
    stop_on: str | None = typer.Option(None, "--stop-on", metavar="STATES",
                                          help="comma list of states that stop training where "
                                               "they count, before the update (exit 3), "
                                               "e.g. nonfinite,dead"),
    capture: str | None = typer.Option(None, "--capture", metavar="DIR",
                                          help="write the evidence of the first counted "
                                               "failure here (implied by --stop-on: "
                                               f"{DEFAULT_CAPTURE})"),
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
    stops = parse_states(stop_on, what="--stop-on") if stop_on is not None else ()
    if stops and capture is None:
        capture = DEFAULT_CAPTURE
    if capture is not None:
        check_folder(capture, "capture folder")
    target = runner.module_target(script) if module else runner.script_target(script)
    raise typer.Exit(observe(target, list(ctx.args), trace, th, gate, quiet, every, junit,
                             signals, stops, capture))


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
        die_like_python(d.death)
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
