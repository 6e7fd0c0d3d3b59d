"""Process trees from ``/proc``: find a launcher's descendants and a rank's process."""

from __future__ import annotations

import os
import signal
from pathlib import Path

PROC = Path("/proc")


def _parents() -> dict[int, int]:
    parents = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # The command name is in parentheses and may contain spaces: parse after it.
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (not ``pid`` itself), parents before children."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def environ(pid: int) -> dict[str, str]:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def find_rank(roots: list[int], rank: int) -> list[int]:
    """Processes under ``roots`` whose environment says ``RANK=rank`` (torchrun workers,
    or the command itself when it is launched without torchrun)."""
    found = []
    for root in roots:
        for pid in [root, *descendants(root)]:
            if environ(pid).get("RANK") == str(rank):
                found.append(pid)
    return found


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal ``pid``'s process group, then any descendant that left it."""
    for target in [*descendants(pid), pid]:
        try:
            os.kill(target, sig)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
