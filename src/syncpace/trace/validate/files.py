"""Files of a run directory: only regular files are opened, without blocking (a FIFO or
a device in place of a trace file is refused, never read), and within a size bound.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from syncpace.errors import TraceError

#: Bound on a metadata file: a real one is kilobytes (clock samples are capped).
MAX_META_BYTES = 64 << 20
#: Bound on one Arrow stream file (they are memory-mapped, never read whole).
MAX_STREAM_BYTES = 1 << 40


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path: Path, limit: int, what: str) -> tuple[int, int]:
    """``(fd, size)`` of ``path`` opened for reading, if it is a regular file within
    ``limit`` bytes. Opening never blocks: ``O_NONBLOCK`` makes a FIFO's open return at
    once, and the type is checked on the open file itself (no race with a rename)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise TraceError(path, f"missing {what}") from exc
    except OSError as exc:
        raise TraceError(path, f"cannot open the {what}: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        for test, kind in _KINDS:
            if test(st.st_mode):
                raise TraceError(path, f"is {kind}, not a regular file (refused, not read)")
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(path, "not a regular file (refused, not read)")
        if st.st_size > limit:
            raise TraceError(
                path, f"{st.st_size:,} bytes is more than a {what} may hold ({limit:,})"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_regular(path: Path, limit: int, what: str) -> bytes:
    fd, size = open_regular(path, limit, what)
    try:
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise TraceError(path, f"cannot read the {what}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if total > limit:  # it grew while being read
        raise TraceError(path, f"more than a {what} may hold ({limit:,} bytes)")
    return b"".join(chunks)
