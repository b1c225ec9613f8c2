"""A small headless-chromium harness for the HTML report tests: the DOM after the page's
scripts ran, a screenshot decoded to pixels (zlib, no image library), and every console
message, so that a test asserts on what a person would see.

Console output is read from chromium's log (--enable-logging=stderr): an uncaught error, a
syntax error, a blocked script (Content-Security-Policy) all land there, even those that
happen before the page's own error recorder is installed. The report also records errors
into `data-errors` on its root element; `Page.errors` holds both."""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest


def chromium() -> str | None:
    """The chromium binary: `chromium` on PATH, else Debian's /usr/bin/chromium."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return found or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)


def need_chromium() -> str:
    binary = chromium()
    if binary is None:
        pytest.skip("chromium not installed (apt install chromium)")
    return binary


# Headless, offline and quiet: no sandbox (tests run as root in containers), and nothing that
# reaches for the network (the report must not, and these would only time out).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--hide-scrollbars",
         "--mute-audio", "--force-device-scale-factor=1")
# virtual time: timers and IntersectionObserver callbacks run before the DOM is dumped
BUDGET_MS = 3000
_CONSOLE = re.compile(r":CONSOLE(?::\d+)?\]\s*(.*)")


@dataclass
class Page:
    """What chromium rendered: the serialized DOM, its visible text (not inside script or
    style), the elements by tag, every console message and every error the page recorded."""
    dom: str
    seconds: float
    console: list
    text: str = ""
    tags: dict = field(default_factory=dict)
    root: dict = field(default_factory=dict)

    @property
    def errors(self) -> list:
        recorded = json.loads(self.root.get("data-errors") or "[]")
        return [*self.console, *recorded]

    @property
    def ready(self) -> bool:
        return self.root.get("data-ready") == "1"

    def find(self, tag: str, **attrs) -> list:
        """The attributes of each `tag` element whose attributes include `attrs` (id=...)."""
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [a for a in self.tags.get(tag, []) if all(a.get(k) == v for k, v in want.items())]


def _run(args: list, timeout: float) -> tuple:
    binary = need_chromium()
    with tempfile.TemporaryDirectory(prefix="neuraldbg-chromium-") as profile:
        cmd = [binary, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout)
        seconds = time.perf_counter() - t0
    stderr = proc.stderr.decode("utf-8", "replace")
    console = [m.group(1) for line in stderr.splitlines() if (m := _CONSOLE.search(line))]
    return proc, seconds, console


def url_of(path) -> str:
    return Path(path).resolve().as_uri()


def render(path, *, budget_ms: int = BUDGET_MS, width: int = 1200, timeout: float = 60) -> Page:
    """Load `path` and return the DOM once its scripts ran (and `budget_ms` of virtual time)."""
    proc, seconds, console = _run([f"--virtual-time-budget={budget_ms}",
                                   f"--window-size={width},900", "--dump-dom", url_of(path)], timeout)
    dom = proc.stdout.decode("utf-8", "replace")
    assert proc.returncode == 0 and dom, f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]!r}"
    page = Page(dom=dom, seconds=seconds, console=console)
    parser = _Reader()
    parser.feed(dom)
    page.text = " ".join(" ".join(parser.text).split())
    page.tags, page.root = parser.tags, parser.root
    return page


def screenshot(path, *, size=(1200, 900), timeout: float = 60) -> Image:
    """A screenshot of the top of the page, `size` (width, height) pixels, decoded. (Keep it
    small: the PNG is unfiltered in pure Python, about a second per megapixel.)"""
    with tempfile.TemporaryDirectory(prefix="neuraldbg-shot-") as folder:
        png = Path(folder) / "shot.png"
        proc, _, _ = _run([f"--virtual-time-budget={BUDGET_MS}", f"--window-size={size[0]},{size[1]}",
                           f"--screenshot={png}", url_of(path)], timeout)
        assert png.exists(), f"no screenshot ({proc.returncode}): {proc.stderr[-2000:]!r}"
        return decode_png(png.read_bytes())


class _Reader(HTMLParser):
    """Visible text (outside script, style, noscript and title), attributes by tag, and the
    root element's attributes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text, self.tags, self.root = [], {}, {}
        self._hidden = 0

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        self.tags.setdefault(tag, []).append(attrs)
        if tag == "html":
            self.root = attrs
        if tag in ("script", "style", "noscript", "title"):
            self._hidden += 1

    def handle_endtag(self, tag):
        if tag in ("script", "style", "noscript", "title"):
            self._hidden = max(0, self._hidden - 1)

    def handle_data(self, data):
        if not self._hidden:
            self.text.append(data)


# ---- PNG, enough for chromium's screenshots (8-bit RGB or RGBA, not interlaced) ---------------
@dataclass
class Image:
    width: int
    height: int
    channels: int
    rows: list      # bytes per row, unfiltered

    def pixel(self, x: int, y: int) -> tuple:
        c = self.channels
        return tuple(self.rows[y][x * c:x * c + 3])

    def count(self, test, box=None) -> int:
        """Pixels (x0, y0, x1, y1 box, default all) whose (r, g, b) passes `test`."""
        x0, y0, x1, y1 = box or (0, 0, self.width, self.height)
        c = self.channels
        n = 0
        for row in self.rows[y0:y1]:
            for i in range(x0 * c, x1 * c, c):
                if test(row[i], row[i + 1], row[i + 2]):
                    n += 1
        return n


def decode_png(data: bytes) -> Image:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and not interlace, f"unsupported PNG {header}"
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        row = _unfilter(raw[start], bytearray(raw[start + 1:start + 1 + stride]), prev, channels)
        rows.append(bytes(row))
        prev = row
    return Image(width, height, channels, rows)


def _unfilter(kind: int, row: bytearray, prev: bytearray, bpp: int) -> bytearray:
    """PNG's five row filters, undone (RFC 2083, 6.3)."""
    n = len(row)
    if kind == 1:
        for i in range(bpp, n):
            row[i] = (row[i] + row[i - bpp]) & 0xFF
    elif kind == 2:
        row = bytearray((a + b) & 0xFF for a, b in zip(row, prev))
    elif kind == 3:
        for i in range(n):
            left = row[i - bpp] if i >= bpp else 0
            row[i] = (row[i] + ((left + prev[i]) >> 1)) & 0xFF
    elif kind == 4:
        for i in range(n):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    return row
