"""The files a conversion reads: paths given on the command line, directories expanded."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from syncpace.errors import TraceError

#: syncpace's own files, never an input.
_OWN = re.compile(r"^rank-\d{5,}\.(meta\.json|events\.arrow|steps\.arrow)$")


def find_files(
    sources: Iterable[str | os.PathLike[str]], suffixes: tuple[str, ...], what: str
) -> list[Path]:
    """Every file named in ``sources``, and every file under a named directory whose name
    ends with one of ``suffixes``, sorted and without duplicates."""
    found: list[Path] = []
    for source in sources:
        path = Path(source)
        if not path.exists():
            raise TraceError(path, "no such file or directory")
        if path.is_file():
            found.append(path)
            continue
        matches = sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and p.name.endswith(suffixes) and not _OWN.match(p.name)
        )
        if not matches:
            raise TraceError(path, f"no {what} here (looked for *{', *'.join(suffixes)})")
        found.extend(matches)
    unique = sorted({p.resolve(): p for p in found}.values(), key=lambda p: str(p))
    if not unique:
        raise TraceError(", ".join(map(str, sources)) or ".", f"no {what} given")
    return unique


def total_bytes(files: list[Path]) -> int:
    return sum(p.stat().st_size for p in files)
