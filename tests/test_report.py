"""The rich report: run line, hypotheses with evidence and fix, timeline; plain without colour."""
import io

from rich.console import Console

from neuraldbg_cli.cli import explain_cmd
from neuraldbg_cli.explain.analysis import analyze
from neuraldbg_cli.explain.report import THEME, render
from neuraldbg_cli.trace import read_trace
from tracemaker import TraceMaker, dying_relu


def text_of(tmp_path, *makers, width=100, color=False):
    paths = [m.write(tmp_path / f"t{i}.jsonl") for i, m in enumerate(makers)]
    buf = io.StringIO()
    console = Console(file=buf, width=width, theme=THEME, force_terminal=color,
                      color_system="truecolor" if color else None)
    console.print(render(analyze([read_trace(p) for p in paths])))
    return buf.getvalue()


def test_report_has_run_line_hypothesis_evidence_fix_and_timeline(tmp_path):
    out = text_of(tmp_path, dying_relu())
    lines = out.splitlines()
    assert lines[0].startswith("train.py | 80 steps | completed (exit 0)")
    assert "#1 dead activation in net.3 (ReLU) at step 41 | cause learning_rate" in out
    assert "learning rate raised 0.05 -> 2 (x40) at step 40" in out
    assert "fix" in out and "LeakyReLU" in out
    assert "vanishing gradient in" in out                    # the echoes, under their origin
    row = next(l for l in lines if l.startswith("net.3 act"))
    assert row.rstrip().endswith("<- #1") and "D" in row and "." in row
    assert any(l.startswith("net.0 grad") and "V" in l for l in lines)
    assert "\x1b[" not in out and "legend" in out


def test_timeline_rows_follow_forward_order_and_show_onsets(tmp_path):
    out = text_of(tmp_path, dying_relu(), width=200)
    rows = [l for l in out.splitlines() if l.startswith("net.")]
    assert [r.split()[0] + " " + r.split()[1] for r in rows] == ["net.0 grad", "net.2 grad", "net.3 act"]
    cells = rows[2].split(maxsplit=2)[2]
    assert cells.index("D") == 41                            # one column per step


def test_long_run_is_compressed_to_the_width(tmp_path):
    t = TraceMaker().tr(5000, "net.3", "dead", dead_ratio=1.0).end(10000)
    out = text_of(tmp_path, t, width=80)
    assert "1 column = " in out and all(len(line) <= 80 for line in out.splitlines())


def test_healthy_report_says_so(tmp_path):
    out = text_of(tmp_path, TraceMaker().end(50))
    assert "No failure found" in out and "Timeline" not in out


def test_weak_signals_only(tmp_path):
    t = TraceMaker().tr(30, "net.1", "anomalous", rms_ratio=12.0).tr(32, "net.1", "normal")
    out = text_of(tmp_path, t.end(60))
    assert "No likely failure" in out and "net.1" in out


def test_a_failed_verdict_of_unclear_cause_is_not_called_no_likely_failure(tmp_path):
    """A loss stalled to the end fails the run, and no rule names its cause with 0.5: the
    heading says the cause is unclear, never "No likely failure" under "Verdict: failed"."""
    t = TraceMaker().tr(78, "(loss)", "stalled", signal="loss", loss_median=2.0, loss_start=2.0)
    out = text_of(tmp_path, t.end(300))
    assert "Verdict: failed" in out and "No likely failure" not in out
    assert "The failure's cause is unclear (nothing with confidence >= 0.5)" in out


def test_several_ranks_show_the_rank(tmp_path):
    r0 = TraceMaker(rank=0, world_size=2).tr(10, "net.3", "dead", dead_ratio=1.0).end(20)
    r1 = TraceMaker(rank=1, world_size=2).tr(9, "net.3", "dead", dead_ratio=1.0).end(20)
    out = text_of(tmp_path, r0, r1)
    assert "ranks 0, 1 of 2" in out and "at step 9 on rank 1" in out
    assert any(l.startswith("r0 net.3 act") for l in out.splitlines())


def test_colour_when_asked_plain_otherwise(tmp_path):
    assert "\x1b[" in text_of(tmp_path, dying_relu(), color=True)
    assert "\x1b[" not in text_of(tmp_path, dying_relu(), color=False)


def test_console_is_plain_with_no_color_or_a_pipe(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr("sys.stdout", Tty())
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    assert explain_cmd.console_for_stdout(THEME).color_system is not None
    monkeypatch.setenv("NO_COLOR", "1")
    assert explain_cmd.console_for_stdout(THEME).color_system is None
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert explain_cmd.console_for_stdout(THEME).color_system is None


def test_many_rows_keep_the_origin_and_long_names_keep_their_end(tmp_path):
    layers = [(f"encoder.layers.{i}.feed_forward.linear", "Linear", "param") for i in range(40)]
    t = TraceMaker(layers)
    t.tr(3, "(input)", "nonfinite", rms="nan")
    for name, _, _ in layers:
        t.tr(3, name, "nonfinite", rms="nan")
    out = text_of(tmp_path, t.end(10), width=80)
    rows = [l for l in out.splitlines() if " act " in l]
    assert len(rows) == 30 and "11 more rows" in out
    assert rows[0].startswith("(input) act") and rows[0].rstrip().endswith("<- #1")
    assert rows[1].startswith("…s.0.feed_forward.linear act ")
