"""A state's rich style ("bold red", "green dim") as a CSS colour for the HTML report.

The registry (states.py) gives each state a terminal style; the report derives its colours
from it, so a state registered later is coloured without touching the report. The 16 standard
terminal colours get a palette that reads on a white page (terminal yellow on white does
not); any other colour rich knows (#rrggbb, rgb(), color(N), names) is taken as rich gives it."""
from __future__ import annotations

from rich.color import ColorParseError
from rich.errors import StyleSyntaxError
from rich.style import Style

# Standard colours 0-15 (black, red, green, yellow, blue, magenta, cyan, white, then bright).
_STANDARD = ("#333333", "#d62728", "#2e9e44", "#d9a400", "#2563c9", "#b5179e", "#0e9aa7", "#9aa0a6",
             "#666666", "#ff4d4f", "#52c41a", "#f2c200", "#4d8cf5", "#e040c0", "#22c3d0", "#c8ccd0")
UNKNOWN = "#8c8c8c"     # a style rich cannot parse, or one without a colour
DIM = 0.55              # share of white mixed into a dim colour (a healthy cell is quiet)


def css_color(style: str) -> str:
    """`#rrggbb` for a rich style's foreground colour, lightened when the style is dim."""
    try:
        parsed = Style.parse(style or "")
    except (StyleSyntaxError, ColorParseError):
        return UNKNOWN
    color = parsed.color
    if color is None:
        return UNKNOWN
    if color.number is not None and color.number < len(_STANDARD):
        rgb = _rgb(_STANDARD[color.number])
    else:
        rgb = tuple(color.get_truecolor())
    if parsed.dim:
        rgb = tuple(round(c + (255 - c) * DIM) for c in rgb)
    return "#" + "".join(f"{c:02x}" for c in rgb)


def _rgb(hex_color: str) -> tuple:
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
