"""The rich console the commands print to.

On a terminal rich uses its width. Into a file, a pipe or a CI log rich falls back to
80 columns, which wraps the tables of ``diagnose``, ``bench`` and ``simulate`` into
unreadable stacks; there the console is :data:`PIPE_WIDTH` wide unless ``COLUMNS``
says otherwise.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

PIPE_WIDTH = 120


def make_console(**options: Any) -> Console:
    console = Console(**options)
    if console.is_terminal or "width" in options or os.environ.get("COLUMNS"):
        return console
    return Console(width=PIPE_WIDTH, **options)
