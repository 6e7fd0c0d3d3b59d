"""Where a stack says a rank is: the innermost frame that is neither the tracer's nor
Python's threading machinery, and the job's own frame below library code.
"""

from __future__ import annotations

import re

from syncpace.trace.stall import Frame

#: Frames of the tracer itself and of Python's threading machinery are not "where".
_NOT_WHERE = re.compile(r"[/\\]syncpace[/\\]capture[/\\]|[/\\]threading\.py$")
_LIBRARY = re.compile(r"[/\\](site-packages|dist-packages|lib[/\\]python\d)[/\\]")


def where_of(frames: tuple[Frame, ...]) -> str:
    """The innermost frame that is not the tracer's or Python's threading machinery,
    and, when that is library code, the innermost frame of the job's own code."""
    inner = next((fr for fr in reversed(frames) if not _NOT_WHERE.search(fr.file)), None)
    if inner is None:
        return str(frames[-1]) if frames else ""
    user = user_frame(frames)
    if user is None or user is inner:
        return str(inner)
    return f"{inner}, called from {user}"


def trim(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """``frames`` without the tracer's own innermost frames (they only show that the
    call is being recorded)."""
    end = len(frames)
    while end > 1 and _NOT_WHERE.search(frames[end - 1].file):
        end -= 1
    return frames[:end]


def user_frame(frames: tuple[Frame, ...]) -> Frame | None:
    """The innermost frame outside installed packages and the standard library."""
    for fr in reversed(frames):
        if not _LIBRARY.search(fr.file) and not _NOT_WHERE.search(fr.file):
            return fr
    return None
