"""The report's page: the document embedded in one self-contained HTML file, its policy, and
the file written whole or not at all. Torch-free."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import tempfile
from importlib import resources
from pathlib import Path

from .. import __version__
from ..errors import InputError, check_writable


def render(doc: dict) -> str:
    """The HTML page: style, data and script inline, nothing fetched."""
    files = resources.files(__package__)
    css = files.joinpath("report.css").read_text(encoding="utf-8")
    js = files.joinpath("report.js").read_text(encoding="utf-8")
    # (inside <script> and <style>, "</" may end the element and "<!--" or "<script" change how
    # the parser reads on: the page's own files hold none of them, the data is escaped)
    assert not re.search(r"</|<!--|<script", js + css, re.I), "report.js/css hold '</', '<!--' or '<script'"
    policy = (f"default-src 'none'; script-src '{_sha256(js)}'; style-src '{_sha256(css)}'; "
              "img-src data:; base-uri 'none'; form-action 'none'")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<meta http-equiv=\"Content-Security-Policy\" content=\"{policy}\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<meta name=\"generator\" content=\"neuraldbg {__version__}\">\n"
        "<title>neuraldbg report</title>\n"
        f"<style>{css}</style>\n</head>\n<body>\n"
        "<noscript>This report draws itself with JavaScript: allow scripts for this file "
        "(it fetches nothing).</noscript>\n<main id=\"report\"></main>\n"
        f"<script type=\"application/json\" id=\"data\">{embed(doc)}</script>\n"
        f"<script>{js}</script>\n</body>\n</html>\n")


def embed(doc: dict) -> str:
    """The document as JSON that cannot end its <script> element nor open a comment: `<`, `>`
    and `&` as \\u escapes (JSON.parse reads them back). ASCII only, so a lone surrogate in a
    trace string stays an escape instead of failing the write."""
    text = json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()


# ---- the output file ------------------------------------------------------------------------------
def check_output(output: str, traces: list[str]) -> None:
    check_writable(output, "report")
    p = Path(output)
    if p.exists() and any(Path(t).exists() and os.path.samefile(p, t) for t in traces):
        raise InputError(f"cannot write report {output}: it is one of the traces")


def write(output: str, page: str) -> None:
    """Whole or not at all: a temporary file beside the output, renamed over it."""
    folder = os.path.dirname(output) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".neuraldbg-report-", suffix=".html", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(page)
            os.chmod(tmp, 0o666 & ~_umask())    # as open() would have made it, not mkstemp's 0600
            os.replace(tmp, output)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        raise InputError(f"cannot write report {output}: {e.strerror or e}") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
