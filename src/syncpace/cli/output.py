"""One overwrite policy for every verb that writes: an existing output is refused,
in one line, unless ``--force`` is given (``--overwrite``, its earlier spelling, still
works and is not listed)."""

from __future__ import annotations

import argparse
from pathlib import Path

from syncpace.errors import ConfigError


def add_force_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """``--force``: replace ``what`` (e.g. "the HTML file") when it exists."""
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"replace {what} when it exists (without --force an existing one is refused)",
    )
    parser.add_argument("--overwrite", dest="force", action="store_true", help=argparse.SUPPRESS)


def refuse_existing_trace(
    run_dir: str | Path, force: bool, flag: str = "--out", clear: bool = True
) -> None:
    """Refuse a directory that holds a trace (``rank-*`` files, in it or in the run
    directories of a study one level down) without ``--force``; with it they go,
    unless ``clear`` is false (the writer clears them itself)."""
    root = Path(run_dir)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root}: exists and is not a directory")
    found = sorted(root.glob("rank-*")) + sorted(root.glob("*/rank-*")) if root.is_dir() else []
    if found and not force:
        raise ConfigError(
            f"{root}: already holds a trace ({len(found)} rank files); "
            f"choose another {flag} or add --force to replace it"
        )
    for path in found if clear else ():
        path.unlink()


def refuse_existing(path: str | Path, force: bool, flag: str = "-o") -> None:
    """Refuse to replace ``path`` without ``--force``; a directory is never replaced."""
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{target}: is a directory; give a file name with {flag}")
    if target.exists() and not force:
        raise ConfigError(f"{target}: exists; choose another {flag} or add --force to replace it")
