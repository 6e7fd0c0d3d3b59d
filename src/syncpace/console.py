"""The rich console the commands print to, and the escaping of what they print.

On a terminal rich uses its width. Into a file, a pipe or a CI log rich falls back to
80 columns, which wraps the tables of ``diagnose``, ``bench`` and ``simulate`` into
unreadable stacks; there the console is :data:`PIPE_WIDTH` wide unless ``COLUMNS``
says otherwise.

Every string that comes from a trace, a file or a command line (host, group and op
names, paths, error messages) goes through :func:`safe` before rich sees it, or
:func:`visible` before a plain ``print``: rich markup (``[/]``, ``[link=…]``) is
escaped, and control characters (ANSI escapes, carriage returns, newlines, bidi
overrides) and lone surrogates are shown as ``\\x1b``-style escapes, so a hostile
name can neither crash the output, restyle the terminal nor fake a line.
"""

from __future__ import annotations

import os
import re
from typing import Any

from rich.console import Console
from rich.markup import escape

_INVISIBLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]"
)


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """``text`` with every control or invisible character written as an escape."""
    return _INVISIBLE.sub(_escape_char, str(text))


def safe(text: object) -> str:
    """``text`` ready for rich: :func:`visible`, then rich markup escaped."""
    return escape(visible(text))


PIPE_WIDTH = 120


def make_console(**options: Any) -> Console:
    console = Console(**options)
    if console.is_terminal or "width" in options or os.environ.get("COLUMNS"):
        return console
    return Console(width=PIPE_WIDTH, **options)
