"""`neuraldbg report`: one self-contained HTML file, checked as a person sees it, in headless
chromium (tests/browser.py): the verdict and the hypotheses in the rendered page, a timeline
that painted coloured pixels, the loss and layer curves, no console errors (and proof that an
error would be caught), trace strings shown as text and never run, a big run opened in
seconds. The tests that need chromium skip without it; those of the embedded data do not."""
from __future__ import annotations

import html
import importlib.util
import json
import os
import re
import subprocess
import sys
import time

import pytest

from browser import need_chromium, render, screenshot
from conftest import ENV, REPO, SAMPLES, run_neuraldbg
from neuraldbg_cli import states
from neuraldbg_cli.publish import html as report_html
from neuraldbg_cli.publish.html import MAX_POINTS, build, write_report
from neuraldbg_cli.publish.page import embed
from tracemaker import MLP, TraceMaker, dying_relu

# The tracemaker's dying_relu story as explain tells it (tests/test_explain.py).
TOP = "#1 dead activation in net.3 (ReLU) at step 41 | cause learning_rate | confidence"


def with_summaries(t: TraceMaker, steps: int = 80, every: int = 10, loss: bool = True) -> TraceMaker:
    """Summary events before run_end, as the monitor writes them: every layer's numbers each
    `every` steps (net.3 dies at 41 in dying_relu: its inactive share jumps), and the loss."""
    end = next((i for i, e in enumerate(t.events) if e["event"] == "run_end"), len(t.events))
    events = []
    for step in range(0, steps, every):
        for name, _, kind in MLP:
            if kind == "param":
                stats = {"rms": 0.5, "grad_norm": 0.1 if step < 42 else 0.0, "update_ratio": 0.001}
            else:
                stats = {"rms": 0.3, "inactive": 0.97 if name == "net.3" and step > 41 else 0.2}
            events.append({"event": "summary", "step": step, "layer": name, "stats": stats})
        if loss:
            events.append({"event": "summary", "step": step, "layer": "(loss)",
                           "stats": {"loss": "inf" if step == 50 else 2.0 - step / 100}})
    t.events[end:end] = events
    return t


def report_of(tmp_path, *makers, name="report.html") -> str:
    paths = [m.write(tmp_path / f"t{i}.jsonl") for i, m in enumerate(makers)]
    out = tmp_path / name
    write_report(paths, str(out))
    return str(out)


def assert_clean(page):
    """The page's script ran to its end, and nothing reached the console."""
    assert not page.errors, page.errors
    assert page.ready, page.text[-500:]


def timeline_canvas(page) -> dict:
    (canvas,) = page.find("canvas", **{"class": "timeline-canvas"})
    return canvas


# ---- in the browser ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dying_page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dying")
    path = report_of(tmp, with_summaries(dying_relu()))
    return path, render(path)


def test_failing_run_shows_its_hypothesis_and_timeline(dying_page):
    _, page = dying_page
    assert_clean(page)
    assert "Hypotheses, most likely first" in page.text
    assert TOP in page.text
    assert "net.3 (ReLU) died at step 41: the learning rate was raised" in page.text
    assert "fix Switch to LeakyReLU" in page.text or "fix Lower the learning rate" in page.text
    for layer in ("net.0", "net.2", "net.3", "net.4"):
        assert f"{layer} (" in page.text      # its curves' heading: name (type)
    canvas = timeline_canvas(page)
    assert int(canvas["data-painted"]) > 10_000
    assert int(canvas["data-problem-pixels"]) > 1_000     # the dead and vanishing spans


def test_failing_run_timeline_is_red_on_screen(dying_page):
    """The pixels on screen, not the page's own count: dead is red in the timeline."""
    path, _ = dying_page
    shot = screenshot(path, size=(1000, 1100))
    red = shot.count(lambda r, g, b: r > 180 and g < 90 and b < 90)
    assert red > 3_000, red     # the headline's word "dead" alone is a few hundred


def test_hypothesis_layers_come_first_and_are_drawn(dying_page):
    _, page = dying_page
    layers = [n for n, _, _ in MLP]
    # ids are layer indices: (input) is 0, then the model's layers, then (loss) (its own chart)
    curves = [a["id"] for a in page.find("article", **{"class": "curve"})]
    assert curves[0] == f"curve-{1 + len(layers)}"
    assert curves[1] == f"curve-{1 + layers.index('net.3')}"    # the dead layer, then the rest
    after = page.text.split("then the rest", 1)[1]
    assert after.index("net.3 (ReLU)") < after.index("net.0 (Linear)") < after.index("net.4 (Linear)")
    drawn = [d for d in page.find("div", **{"class": "plot"}) if d.get("data-drawn") == "1"]
    assert len(drawn) >= 4


def test_healthy_run_says_no_failure(tmp_path):
    page = render(report_of(tmp_path, with_summaries(TraceMaker().end(80))))
    assert_clean(page)
    assert "No failure found: every layer stayed normal and every gradient healthy." in page.text
    assert "Hypotheses, most likely first" not in page.text
    canvas = timeline_canvas(page)
    assert int(canvas["data-painted"]) > 10_000 and canvas["data-problem-pixels"] == "0"


def test_trace_cut_short_by_a_crash_is_reported_with_its_warning(tmp_path):
    t = with_summaries(dying_relu())
    t.events.pop()                                  # no run_end: the process died
    path = tmp_path / "t.jsonl"
    text = "".join(json.dumps(e) + "\n" for e in t.events)
    path.write_text(text[:-30], encoding="utf-8")   # and its last line was cut
    out = tmp_path / "r.html"
    write_report([str(path)], str(out))
    page = render(out)
    assert_clean(page)
    assert page.find("section", id="warnings")
    assert "cut short (the run was killed?)" in page.text
    assert "no run_end (killed?)" in page.text
    assert TOP in page.text


def test_two_ranks_are_lanes(tmp_path):
    rank0 = with_summaries(TraceMaker(rank=0, world_size=2, run_id="r").end(80))
    rank1 = with_summaries(dying_relu(rank=1, world_size=2, run_id="r"))
    page = render(report_of(tmp_path, rank0, rank1))
    assert_clean(page)
    assert "ranks 0, 1 of 2" in page.text
    assert "at step 41 on rank 1 | cause learning_rate" in page.text
    assert "rank 0: " in page.text and "rank 1: " in page.text
    lanes_per_rank = len(MLP) + 4                   # and the pseudo-layers (input), (loss), ...
    assert timeline_canvas(page)["data-lanes"] == str(2 * lanes_per_rank)


def test_loss_curve_is_drawn_with_its_transitions(tmp_path):
    t = TraceMaker().lr(40, 2.0, 0.05).tr(41, "net.3", "dead", dead_ratio=0.97, units=64)
    t.tr(45, "(loss)", "spiking", signal="loss", loss=9.0).end(80)
    page = render(report_of(tmp_path, with_summaries(t)))
    assert_clean(page)
    assert len(page.find("section", id="loss")) == 1
    assert page.find("canvas", aria_label="summary numbers of (loss)")
    assert "transitions: step 45 spiking (loss)" in page.text
    # without loss summaries, no loss chart
    page = render(report_of(tmp_path, with_summaries(dying_relu(), loss=False), name="n.html"))
    assert_clean(page)
    assert not page.find("section", id="loss")


EVIL = "<img src=x onerror=\"document.title='pwned'\">"
EVIL_SCRIPT = "</script><script>document.title='pwned'</script>.py"


def test_trace_strings_are_shown_as_text_never_run(tmp_path):
    layers = [("net.0", "Linear", "param"), (EVIL, "ReLU", "relu"), ("a&amp;b", "Linear", "param"),
              ("__proto__", "Linear", "param")]
    t = TraceMaker(layers, script=EVIL_SCRIPT).lr(40, 2.0, 0.05)
    t.tr(41, EVIL, "dead", dead_ratio=0.97, units=64, rms=0.01)
    # a state no version knows, named like what every JavaScript object has
    t.tr(30, "__proto__", "constructor", signal="activation", toString="<b>x</b>")
    t.events += [{"event": "summary", "step": 0, "layer": name, "stats": {EVIL: 1.0}}
                 for name, _, _ in layers]
    t.end(80)
    path = report_of(tmp_path, t)
    raw = open(path, encoding="utf-8").read()
    assert "<img" not in raw and raw.count("<script") == 2   # the data and report.js, nothing else
    assert raw.count("</script") == 2
    page = render(path)
    assert_clean(page)
    assert f"dead activation in {EVIL} (ReLU) at step 41" in page.text
    assert "a&amp;b (Linear)" in page.text              # shown as written, not unescaped
    assert "__proto__ (Linear) constructor" in page.text
    assert EVIL_SCRIPT in page.text
    assert page.find("canvas", aria_label=f"summary numbers of {EVIL}")     # its curves: drawn
    assert not page.find("img")
    title = html.unescape(re.search(r"<title>(.*?)</title>", page.dom, re.S).group(1))
    assert title == f"neuraldbg: {EVIL_SCRIPT}"


def test_the_error_check_catches_errors(tmp_path, dying_page):
    """A page with a JS error, a report whose data breaks its script, and a report whose script
    was altered (refused by its Content-Security-Policy): each is caught."""
    broken = tmp_path / "broken.html"
    broken.write_text("<!DOCTYPE html><p>hello</p><script>undefinedFunction();</script>")
    assert any("undefinedFunction" in e for e in render(broken).errors)

    source = open(dying_page[0], encoding="utf-8").read()
    bad_data = tmp_path / "bad_data.html"
    bad_data.write_text(re.sub(r'(<script type="application/json" id="data">).*?(</script>)',
                               r'\1{"format": 1}\2', source, flags=re.S), encoding="utf-8")
    page = render(bad_data)
    assert page.errors and not page.ready
    assert "This report could not be drawn" in page.text

    altered = tmp_path / "altered.html"
    altered.write_text(source.replace('"use strict";', '"use strict"; document.title = "x";'),
                       encoding="utf-8")
    page = render(altered)
    assert any("Content Security Policy" in e for e in page.errors), page.errors
    assert not page.ready


# ---- bad input: exit 2, one line ------------------------------------------------------------------
def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "neuraldbg_cli", "report", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=ENV, timeout=120)


@pytest.mark.e2e
@pytest.mark.parametrize("args,needle", [
    (["nosuch.jsonl", "-o", "r.html"], "trace not found: nosuch.jsonl"),
    (["notes.txt", "-o", "r.html"], "trace notes.txt line 1: not a JSON event"),
    (["other.jsonl", "-o", "r.html"], "expected run_start, found 'model' (not a neuraldbg trace?)"),
    (["t.jsonl", "-o", "nope/r.html"], "cannot write report nope/r.html: folder nope does not exist"),
    (["nosuch.jsonl", "-o", "nope/r.html"], "folder nope does not exist"),   # the output first
    (["t.jsonl", "-o", "."], "cannot write report .: it is a folder"),
    (["t.jsonl", "-o", "t.jsonl"], "cannot write report t.jsonl: it is one of the traces"),
], ids=["not-found", "not-json", "not-a-trace", "no-folder", "output-first", "folder", "the-trace"])
def test_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    dying_relu().write(tmp_path / "t.jsonl")
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "other.jsonl").write_text('{"event": "model", "layers": []}\n')
    before = (tmp_path / "t.jsonl").read_bytes()
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("neuraldbg: error: "), r.stderr
    assert needle in lines[0] and r.stdout == ""
    assert not (tmp_path / "r.html").exists()
    assert (tmp_path / "t.jsonl").read_bytes() == before
    assert not list(tmp_path.glob(".neuraldbg-report-*"))


# ---- a real run, end to end -----------------------------------------------------------------------
@pytest.mark.e2e
def test_dying_relu_sample_end_to_end(tmp_path):
    need_chromium()             # (before the seconds of training)
    proc, _ = run_neuraldbg(tmp_path, SAMPLES / "dying_relu.py")
    assert proc.returncode == 0, proc.stderr
    r = cli(tmp_path / "trace.jsonl", "-o", tmp_path / "r.html", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr.strip() == f"neuraldbg: report written to {tmp_path / 'r.html'}"
    page = render(tmp_path / "r.html")
    assert_clean(page)
    assert "#1 dead activation in 1 (ReLU) at step" in page.text
    assert int(timeline_canvas(page)["data-problem-pixels"]) > 1_000
    assert page.find("section", id="loss") and page.find("canvas", aria_label="summary numbers of (loss)")


# ---- a big run: 500 layers, 100k steps -----------------------------------------------------------
def _bench():
    spec = importlib.util.spec_from_file_location("report_open", REPO / "bench" / "report_open.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_big_run_opens_in_seconds(tmp_path, capsys):
    need_chromium()
    trace, out = tmp_path / "big.jsonl", tmp_path / "big.html"
    _bench().write_trace(trace, layers=500, steps=100_000)
    t0 = time.perf_counter()
    write_report([str(trace)], str(out))
    written = time.perf_counter() - t0
    page = render(out, timeout=60)
    total = time.perf_counter() - t0
    size = out.stat().st_size
    with capsys.disabled():
        print(f"\nbig report: written in {written:.2f} s, {size / 1e6:.1f} MB, chromium "
              f"{page.seconds:.2f} s, {total:.2f} s in all")
    assert_clean(page)
    assert total < 20 and size < 12e6
    assert "#1 dead activation in blocks.125.act (ReLU) at step 60000" in page.text
    # the lanes with problems alone (the 501 are a button away), coloured
    canvas = timeline_canvas(page)
    assert canvas["data-lanes"] == "5" and int(canvas["data-problem-pixels"]) > 1_000
    assert "show all 501 lanes" in page.text
    # 500 layer cards, drawn when near the screen: few of them in a page not scrolled
    assert len(page.find("article", **{"class": "curve"})) == 500 + 1      # and the loss
    drawn = [d for d in page.find("div", **{"class": "plot"}) if d.get("data-drawn") == "1"]
    assert 4 <= len(drawn) < 50


# ---- the embedded data, without a browser ----------------------------------------------------------
def test_embedded_json_cannot_end_its_script_element():
    text = embed({"s": "</script><!-- & -->", "u": "\ud800"})
    assert not set("<>&") & set(text) and text.isascii()
    assert json.loads(text) == {"s": "</script><!-- & -->", "u": "\ud800"}


def test_curves_are_bounded_and_keep_the_last_point(tmp_path):
    t = TraceMaker()
    end = 10_000
    for step in range(end):
        t.events.append({"event": "summary", "step": step, "layer": "net.1",
                         "stats": {"rms": 0.3, "inactive": float("nan") if step == end - 1 else 0.2}})
    t.events += [{"event": "summary", "step": "x", "layer": "net.1", "stats": {}},
                 {"event": "summary", "step": 3, "layer": None, "stats": {}},
                 {"event": "summary", "step": 3, "layer": "net.1", "stats": [1]},
                 {"event": "summary", "step": 5, "layer": "net.0", "stats": {"rms": True, "b": "x"}}]
    doc = build([t.end(end).write(tmp_path / "t.jsonl")])
    (net1,) = [layer for layer in doc["layers"] if layer["name"] == "net.1"]
    curve = net1["lanes"][0]["curve"]
    steps = doc["step_sets"][curve["steps"]]
    assert MAX_POINTS // 2 <= len(steps) <= MAX_POINTS + 1
    assert steps[-1] == end - 1 and curve["stats"]["inactive"][-1] == "nan"
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    assert "3 malformed summary events skipped" in doc["warnings"]
    (net0,) = [layer for layer in doc["layers"] if layer["name"] == "net.0"]
    assert net0["lanes"][0]["curve"] is None       # nothing but a bool and a word: no curve
    json.dumps(doc, allow_nan=False)


def test_verdict_and_heading_are_explains(tmp_path):
    def doc(t, name):
        return build([t.write(tmp_path / name)])

    likely = doc(dying_relu(), "likely.jsonl")
    assert (likely["verdict"], likely["heading"]) == ("likely", "Hypotheses, most likely first")
    blip = TraceMaker().tr(10, "net.1", "dead", dead_ratio=0.95).tr(12, "net.1", "normal").end(80)
    weak = doc(blip, "weak.jsonl")
    assert weak["verdict"] == "weak" and weak["heading"].startswith("No likely failure")
    assert weak["hypotheses"][0]["confidence"] < 0.5
    healthy = doc(TraceMaker().end(80), "healthy.jsonl")
    assert healthy["verdict"] == "none" and healthy["heading"].startswith("No failure found")
    assert healthy["hypotheses"] == []


def test_every_state_has_a_colour_even_one_registered_later(tmp_path, monkeypatch):
    late = states.Signal("memory", "normal", (states.State("normal", failure=False),
                                              states.State("leaking", True, 0.7, "K", "bold #ff8800")))
    monkeypatch.setitem(states.SIGNALS, "memory", late)
    t = TraceMaker().tr(10, "net.1", "leaking", signal="memory").end(50)
    doc = build([t.write(tmp_path / "t.jsonl")])
    assert set(states.state_names()) <= set(doc["states"])
    assert all(re.fullmatch(r"#[0-9a-f]{6}", s["color"]) for s in doc["states"].values())
    assert doc["states"]["leaking"]["color"] == "#ff8800" and doc["states"]["dead"]["color"] != \
        doc["states"]["normal"]["color"]
    assert "memory" in doc["signals"]


def test_output_is_written_whole_and_readable(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old")
    report_of(tmp_path, dying_relu(), name="r.html")
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "Content-Security-Policy" in page and "connect-src" not in page   # default-src 'none'
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask      # as any file, not a temp file's 0600
    data = json.loads(re.search(r'id="data">(.*?)</script>', page, re.S).group(1))
    assert data["format"] == report_html.FORMAT and data["hypotheses"][0]["layer"] == "net.3"
