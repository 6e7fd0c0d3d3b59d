"""Stall records: what a rank was doing when it stopped making progress.

The tracer's stall watchdog (:mod:`syncpace.capture.watchdog`) writes one per rank,
``rank-R.stall.json``, atomically rewritten while the stall lasts, so whatever kills
the job later finds it on disk. Flight Recorder dumps are converted into the same
records (:mod:`syncpace.importers.flight_recorder`), so the hang diagnosis reads one
kind of input whatever produced it. See ``docs/trace-format.md`` for the fields.

This module is the format only: the dataclasses, their JSON view and the atomic
write and the validating read of the files. It imports neither torch nor the runtime.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncpace.errors import TraceError
from syncpace.trace import schema

STALL_SCHEMA = "syncpace.stall"
STALL_VERSION = 1
STALL_SUFFIX = ".stall.json"
#: Python's faulthandler output of a rank killed by a fatal signal (SIGSEGV, SIGABRT…).
FATAL_SUFFIX = ".fatal.txt"

#: ``state``: still stuck at the last write, made progress again, or a call failed.
STATES = ("stalled", "resolved", "failed")
#: ``kind``: stuck inside a call, nothing in flight and no progress, a call raised, the
#: process died of a fatal signal (read from ``rank-R.fatal.txt``).
KINDS = ("in_collective", "no_progress", "failed", "fatal")

_STALL_RE = re.compile(r"^rank-(\d{5,})" + re.escape(STALL_SUFFIX) + "$")
_FATAL_RE = re.compile(r"^rank-(\d{5,})" + re.escape(FATAL_SUFFIX) + "$")
_THREAD_RE = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):")
_FILE_RE = re.compile(r'^\s+File "(.*)", line (\d+) in (.*)$')


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    code: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "function": self.function, "code": self.code}

    def __str__(self) -> str:
        return f"{self.function} ({self.file}:{self.line})"


@dataclass(frozen=True)
class ThreadStack:
    """One thread's Python stack, outermost frame first (as a traceback prints it)."""

    name: str
    ident: int
    frames: tuple[Frame, ...]
    main: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ident": self.ident,
            "main": self.main,
            "frames": [f.to_json() for f in self.frames],
        }


@dataclass(frozen=True)
class Call:
    """One collective or point-to-point call as a rank saw it (times on rank 0's clock).

    ``status`` is a trace status (``completed``, ``failed``, ``timed_out``, ``aborted``,
    ``pending``) or ``in_flight``: entered, not completed when the record was written.
    ``frames`` is the stack that issued the call, where the producer knows it (Flight
    Recorder records it for every call; the tracer does not)."""

    group: str
    seq: int
    op: str
    bytes: int = 0
    dtype: str = ""
    peer: int = schema.NO_PEER
    step: int = -1
    enter_ns: int = -1
    exit_ns: int = -1
    status: str = "in_flight"
    error: str | None = None
    frames: tuple[Frame, ...] = ()

    @property
    def done(self) -> bool:
        return self.status == "completed"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "bytes": self.bytes,
            "dtype": self.dtype,
            "peer": self.peer,
            "step": self.step,
            "enter_ns": self.enter_ns,
            "exit_ns": self.exit_ns,
            "status": self.status,
            "error": self.error,
        }
        if self.frames:
            out["frames"] = [f.to_json() for f in self.frames]
        return out


@dataclass(frozen=True)
class StallRecord:
    """What one rank was doing at ``written_ns`` (see the module docstring)."""

    rank: int
    world_size: int
    state: str
    kind: str
    since_ns: int
    written_ns: int
    host: str = ""
    pid: int = -1
    threshold_s: float = 0.0
    detected_ns: int = -1
    resolved_ns: int = -1
    updates: int = 1
    step: int = -1
    last_step_ns: int = -1
    in_flight: tuple[Call, ...] = ()
    in_flight_total: int = 0
    last_completed: dict[str, Call] = field(default_factory=dict)
    failed: Call | None = None
    threads: tuple[ThreadStack, ...] = ()
    closed: bool = False
    source: str = "watchdog"

    @property
    def main_thread(self) -> ThreadStack | None:
        for t in self.threads:
            if t.main:
                return t
        return self.threads[0] if self.threads else None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": STALL_SCHEMA,
            "version": STALL_VERSION,
            "rank": self.rank,
            "world_size": self.world_size,
            "host": self.host,
            "pid": self.pid,
            "source": self.source,
            "state": self.state,
            "kind": self.kind,
            "threshold_s": self.threshold_s,
            "since_ns": self.since_ns,
            "detected_ns": self.detected_ns,
            "written_ns": self.written_ns,
            "resolved_ns": self.resolved_ns,
            "updates": self.updates,
            "closed": self.closed,
            "step": self.step,
            "last_step_ns": self.last_step_ns,
            "in_flight": [c.to_json() for c in self.in_flight],
            "in_flight_total": self.in_flight_total,
            "last_completed": {g: c.to_json() for g, c in sorted(self.last_completed.items())},
            "failed": self.failed.to_json() if self.failed is not None else None,
            "threads": [t.to_json() for t in self.threads],
        }


def stall_path(run_dir: str | os.PathLike[str], rank: int) -> Path:
    return Path(run_dir) / f"{schema.rank_stem(rank)}{STALL_SUFFIX}"


def write_stall(path: Path, record: StallRecord) -> None:
    """Write ``record`` atomically: a temporary file beside it, then a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(record.to_json(), indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


# Reading ---------------------------------------------------------------------------


def _int(d: dict[str, Any], key: str, default: int = -1) -> int:
    value = d.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return int(value)


def _str(d: dict[str, Any], key: str, default: str = "") -> str:
    value = d.get(key, default)
    return default if value is None else str(value)


def frame_from_json(d: Any) -> Frame:
    if not isinstance(d, dict):
        raise ValueError(f"a frame must be an object, got {d!r}")
    return Frame(_str(d, "file"), _int(d, "line", 0), _str(d, "function"), _str(d, "code"))


def call_from_json(d: Any) -> Call:
    if not isinstance(d, dict):
        raise ValueError(f"a call must be an object, got {d!r}")
    for key in ("group", "seq", "op"):
        if key not in d:
            raise ValueError(f"a call lacks {key!r}")
    error = d.get("error")
    return Call(
        group=str(d["group"]),
        seq=_int(d, "seq"),
        op=str(d["op"]),
        bytes=_int(d, "bytes", 0),
        dtype=_str(d, "dtype"),
        peer=_int(d, "peer", schema.NO_PEER),
        step=_int(d, "step"),
        enter_ns=_int(d, "enter_ns"),
        exit_ns=_int(d, "exit_ns"),
        status=_str(d, "status", "in_flight"),
        error=None if error is None else str(error),
        frames=tuple(frame_from_json(f) for f in d.get("frames") or ()),
    )


def stall_from_json(d: Any) -> StallRecord:
    """A :class:`StallRecord` from its JSON view; ``ValueError`` says what is wrong."""
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    if d.get("schema") != STALL_SCHEMA:
        raise ValueError(f"not a stall record (schema is {d.get('schema')!r})")
    if d.get("version") != STALL_VERSION:
        raise ValueError(
            f"stall record version {d.get('version')!r} is not supported "
            f"(this syncpace reads version {STALL_VERSION})"
        )
    state, kind = _str(d, "state"), _str(d, "kind")
    if state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}, got {state!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    threads = []
    for t in d.get("threads") or ():
        if not isinstance(t, dict):
            raise ValueError(f"a thread must be an object, got {t!r}")
        threads.append(
            ThreadStack(
                name=_str(t, "name"),
                ident=_int(t, "ident", 0),
                frames=tuple(frame_from_json(f) for f in t.get("frames") or ()),
                main=bool(t.get("main", False)),
            )
        )
    last = d.get("last_completed") or {}
    if not isinstance(last, dict):
        raise ValueError("last_completed must be an object")
    failed = d.get("failed")
    rank, world = _int(d, "rank"), _int(d, "world_size")
    if rank < 0 or world < 1 or rank >= world:
        raise ValueError(f"rank {rank} does not fit world size {world}")
    return StallRecord(
        rank=rank,
        world_size=world,
        state=state,
        kind=kind,
        since_ns=_int(d, "since_ns"),
        written_ns=_int(d, "written_ns"),
        host=_str(d, "host"),
        pid=_int(d, "pid"),
        threshold_s=float(d.get("threshold_s") or 0.0),
        detected_ns=_int(d, "detected_ns"),
        resolved_ns=_int(d, "resolved_ns"),
        updates=_int(d, "updates", 1),
        step=_int(d, "step"),
        last_step_ns=_int(d, "last_step_ns"),
        in_flight=tuple(call_from_json(c) for c in d.get("in_flight") or ()),
        in_flight_total=_int(d, "in_flight_total", 0),
        last_completed={str(g): call_from_json(c) for g, c in last.items()},
        failed=call_from_json(failed) if failed is not None else None,
        threads=tuple(threads),
        closed=bool(d.get("closed", False)),
        source=_str(d, "source", "watchdog"),
    )


def read_stall(path: Path) -> StallRecord:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"cannot read the stall record: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise TraceError(path, f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    try:
        return stall_from_json(data)
    except (ValueError, TypeError) as exc:
        raise TraceError(path, f"bad stall record: {exc}") from exc


def load_stalls(run_dir: str | os.PathLike[str]) -> tuple[dict[int, StallRecord], list[str]]:
    """Every stall record of ``run_dir`` by rank, and a warning per unreadable one.

    A damaged record never stops the diagnosis of the others: it is skipped and named.
    """
    root = Path(run_dir)
    records: dict[int, StallRecord] = {}
    warnings: list[str] = []
    if not root.is_dir():
        return records, warnings
    for path in sorted(root.iterdir()):
        m = _STALL_RE.match(path.name)
        if not m:
            continue
        try:
            record = read_stall(path)
        except TraceError as exc:
            warnings.append(str(exc))
            continue
        if record.rank != int(m.group(1)):
            named = int(m.group(1))
            warnings.append(f"{path}: file is named for rank {named} but says {record.rank}")
            continue
        records[record.rank] = record
    for path in sorted(root.iterdir()):
        m = _FATAL_RE.match(path.name)
        if m:
            rank = int(m.group(1))
            record = read_fatal(path, rank, records.get(rank))
            if record is not None:
                records[rank] = record
    return records, warnings


def parse_fatal(text: str) -> tuple[str, tuple[ThreadStack, ...]]:
    """faulthandler's report: its first line ("Fatal Python error: Aborted") and every
    thread's stack, outermost first. The thread running ``<module>`` is marked main
    (else the one faulthandler calls current)."""
    lines = text.splitlines()
    error = next((ln.strip() for ln in lines if ln.strip()), "")
    threads: list[ThreadStack] = []
    current: list[Frame] | None = None
    name, ident = "", 0
    for line in [*lines, ""]:
        head = _THREAD_RE.match(line)
        frame = _FILE_RE.match(line)
        if frame and current is not None:
            current.append(Frame(frame.group(1), int(frame.group(2)), frame.group(3)))
            continue
        if current is not None:
            threads.append(ThreadStack(name, ident, tuple(reversed(current))))
            current = None
        if head:
            current, ident = [], int(head.group(2), 16)
            name = "current thread" if head.group(1).startswith("Current") else "thread"
    main = next(
        (i for i, t in enumerate(threads) if t.frames and t.frames[0].function == "<module>"),
        next((i for i, t in enumerate(threads) if t.name == "current thread"), None),
    )
    if main is not None:
        t = threads[main]
        threads[main] = ThreadStack(t.name, t.ident, t.frames, main=True)
    return error, tuple(threads)


def read_fatal(path: Path, rank: int, base: StallRecord | None) -> StallRecord | None:
    """The record of a rank that died of a fatal signal, or ``None`` when ``path`` is
    empty (the rank never crashed). What ``base`` (its last stall record) knew of its
    calls is kept."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        when = path.stat().st_mtime_ns
    except OSError:
        return None
    if not text.strip():
        return None
    error, threads = parse_fatal(text)
    return StallRecord(
        rank=rank,
        world_size=base.world_size if base is not None else rank + 1,
        state="failed",
        kind="fatal",
        since_ns=when,
        written_ns=when,
        host=base.host if base is not None else "",
        pid=base.pid if base is not None else -1,
        in_flight=base.in_flight if base is not None else (),
        in_flight_total=base.in_flight_total if base is not None else 0,
        last_completed=base.last_completed if base is not None else {},
        failed=base.failed if base is not None else None,
        threads=threads,
        source=f"faulthandler: {error}",
    )
