"""Strings from a trace, made safe to print: a trace is data from elsewhere (a CI artifact,
a colleague's run), and a layer name holding terminal control sequences (clear the screen,
set the title, write the clipboard through OSC 52) must be shown, not obeyed."""
from __future__ import annotations

import re

# C0 controls (ESC, BEL, CR, newline too: a name is one line), DEL, C1 controls (a lone 0x9b
# is CSI to some terminals), the bidirectional overrides that reorder what is displayed, and
# lone surrogates (JSON's "\ud800" parses to one; no UTF-8 output can encode it).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def inert(text) -> str:
    """`text` as a string with every control character shown as an escape (\\x1b)."""
    s = text if isinstance(text, str) else str(text)
    return _UNSAFE.sub(_escape, s) if _UNSAFE.search(s) else s
