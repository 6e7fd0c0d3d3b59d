"""Streaming JSON: plain or gzip'd files read in bounded memory, with byte progress.

A profiler trace of a long job is gigabytes of JSON; loading it whole (``json.load``)
takes several times its size in memory. ijson's C backend (yajl) parses the stream
incrementally and hands over one event object at a time, at ~100 MB/s, so memory is
bounded by the largest single event, not by the file.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ijson

from syncpace.errors import TraceError

#: What a damaged or truncated stream raises while being parsed.
_DAMAGE = (ijson.JSONError, ijson.IncompleteJSONError, EOFError, OSError, zlib.error)

#: The header of a trace (the keys before its events) is read at most this far.
HEADER_LIMIT = 64 << 20

_BUFFER = 1 << 20

Progress = Callable[[int], None]


class _Counting(io.RawIOBase):
    """A raw file that reports every byte read from disk (compressed bytes for gzip)."""

    def __init__(self, raw: BinaryIO, on_bytes: Progress) -> None:
        self._raw = raw
        self._on_bytes = on_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)
        if n:
            self._on_bytes(n)
        return n or 0

    def close(self) -> None:
        self._raw.close()
        super().close()


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_stream(path: str | Path, on_bytes: Progress | None = None) -> BinaryIO:
    """``path`` opened for reading, decompressed if it is gzip'd (by content, not name)."""
    path = Path(path)
    try:
        gz = is_gzip(path)
        raw: BinaryIO = open(path, "rb")  # noqa: SIM115 - returned to the caller
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from exc
    if on_bytes is not None:
        raw = io.BufferedReader(_Counting(raw, on_bytes), _BUFFER)  # type: ignore[assignment]
    if gz:
        return _Gunzip(raw)  # type: ignore[return-value]
    return raw


class _Gunzip(gzip.GzipFile):
    """A gzip reader that owns the file under it (GzipFile leaves a passed one open)."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _first_char(stream: BinaryIO) -> bytes:
    """The first non-blank byte of ``stream`` (which is left at its start)."""
    head = stream.peek(64) if hasattr(stream, "peek") else b""
    return head.lstrip()[:1]


def is_chrome_trace(path: str | Path, probe: int = 1 << 20) -> bool:
    """Does ``path`` look like a Chrome trace (an object with ``traceEvents`` in its
    first ``probe`` bytes, or a bare list of event objects)?"""
    try:
        with open_stream(path) as stream:
            head = stream.read(probe)
    except (OSError, EOFError, zlib.error, TraceError):
        return False
    start = head.lstrip()[:2]
    if start.startswith(b"["):
        return start == b"[{" or head.lstrip()[1:].lstrip()[:1] in (b"{", b"]")
    return start.startswith(b"{") and b'"traceEvents"' in head


def read_header(path: str | Path, stop_key: str = "traceEvents") -> dict[str, Any]:
    """The top-level keys of a JSON object that come before ``stop_key``.

    Only the start of the file is parsed (at most :data:`HEADER_LIMIT` bytes), so this
    is cheap however large the file. Keys after ``stop_key`` are not seen.
    """
    header: dict[str, Any] = {}
    seen = [0]

    def count(n: int) -> None:
        seen[0] += n
        if seen[0] > HEADER_LIMIT:
            raise _HeaderTooLong

    with open_stream(path, count) as stream:
        if _first_char(stream) not in (b"{", b""):
            return header  # a bare list of events: no header
        key: str | None = None
        builder: ijson.ObjectBuilder | None = None
        try:
            for prefix, event, value in ijson.parse(stream, use_float=True):
                if prefix == "" and event in ("map_key", "end_map"):
                    if builder is not None and key is not None:
                        header[key] = builder.value
                    builder = None
                    key = value if event == "map_key" else None
                    if key == stop_key or event == "end_map":
                        break
                    continue
                if key is None:
                    continue
                if builder is None:
                    builder = ijson.ObjectBuilder()
                builder.event(event, value)
        except _HeaderTooLong:
            pass
        except _DAMAGE as exc:
            raise TraceError(path, f"not valid JSON ({_first_line(exc)})") from exc
    return header


class _HeaderTooLong(Exception):
    pass


def iter_items(
    path: str | Path,
    prefix: str | None,
    on_bytes: Progress | None = None,
    warnings: list[str] | None = None,
) -> Iterator[Any]:
    """Every value at ``prefix`` (ijson's notation, ``"traceEvents.item"``), streamed.

    ``prefix=None`` picks the events of a Chrome trace: ``traceEvents.item`` in an
    object, ``item`` in a bare list. A file cut short (a killed writer) yields what was
    complete and appends a warning to ``warnings``; a file with nothing readable raises.
    """

    def items(stream: BinaryIO) -> Iterator[Any]:
        where = prefix
        if where is None:
            where = "item" if _first_char(stream) == b"[" else "traceEvents.item"
        return ijson.items(stream, where, use_float=True)

    return _guarded(path, on_bytes, warnings, items)


def iter_values(
    path: str | Path, on_bytes: Progress | None = None, warnings: list[str] | None = None
) -> Iterator[Any]:
    """Every top-level value of a file of concatenated JSON values (JSON lines or not)."""

    def items(stream: BinaryIO) -> Iterator[Any]:
        return ijson.items(stream, "", multiple_values=True, use_float=True)

    return _guarded(path, on_bytes, warnings, items)


def _guarded(
    path: str | Path,
    on_bytes: Progress | None,
    warnings: list[str] | None,
    items: Callable[[BinaryIO], Iterator[Any]],
) -> Iterator[Any]:
    """``items`` of the opened file, a damaged or cut file handled as the readers say."""
    stream = open_stream(path, on_bytes)
    n = 0
    try:
        for item in items(stream):
            n += 1
            yield item
    except _DAMAGE as exc:
        if n == 0 or warnings is None:
            raise TraceError(path, f"not valid JSON ({_first_line(exc)})") from exc
        warnings.append(f"{path}: cut short after {n:,} records ({_first_line(exc)})")
    finally:
        stream.close()


# The Kineto layout fast path -----------------------------------------------------------

#: Kineto prints every event of ``traceEvents`` as its own block: a line ``  {``, the
#: event's keys indented deeper (``args`` nested further), a line ``  }``.
_EVENT_START = b"\n  {"
_EVENT_END = b"\n  }"
_CHUNK = 8 << 20


class NotThisLayout(Exception):
    """The file is valid JSON, but not laid out as Kineto prints it."""


def iter_named_events(
    path: str | Path,
    prefixes: tuple[str, ...],
    on_bytes: Progress | None = None,
    warnings: list[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """The events of a Kineto trace whose ``name`` starts with one of ``prefixes``.

    Most of a profiler trace is compute ops nobody here needs; parsing all of them is
    what makes a full parse slow. Kineto's writer puts each event in its own block
    (see ``_EVENT_START``), so the blocks that name a wanted event are found with a
    byte search for the (rare) quoted prefixes, the key before each checked to be
    ``"name"``, and only those blocks are parsed. Anything unexpected (a block that does
    not parse, another layout) raises :class:`NotThisLayout`, so the caller can parse the
    file fully with :func:`iter_items` instead.
    """
    needles = [b'"' + p.encode() for p in prefixes]
    stream = open_stream(path, on_bytes)
    found = 0
    try:
        buf = stream.read(_CHUNK)
        begin = buf.find(b'"traceEvents"')
        if begin < 0 or buf.find(_EVENT_START, begin) < 0:
            raise NotThisLayout("no traceEvents laid out one block per event")
        scan = begin
        while True:
            chunk = stream.read(_CHUNK)
            at_end = not chunk
            buf += chunk
            # Only blocks that end in the buffer: the rest waits for the next chunk.
            last = buf.rfind(_EVENT_END)
            limit = max(last, scan)
            for at in _positions(buf, needles, scan, limit):
                if not _NAME_KEY.search(buf, max(at - 16, 0), at):
                    continue  # the prefix in another key's value
                start = buf.rfind(_EVENT_START, scan, at)
                end = buf.find(_EVENT_END, at)
                if start < 0 or end < 0:
                    raise NotThisLayout("a wanted event outside a block")
                try:
                    event = json.loads(buf[start + 1 : end + len(_EVENT_END)].decode())
                except ValueError as exc:
                    raise NotThisLayout(f"a block that is not one event ({exc})") from None
                if not isinstance(event, dict):
                    raise NotThisLayout("a block that is not an object")
                found += 1
                yield event
            if at_end:
                tail = buf[limit:]
                if _EVENT_START in tail or b"]" not in tail:
                    if warnings is None:
                        raise TraceError(path, "cut short (the trace ends inside an event)")
                    warnings.append(f"{path}: cut short after {found:,} wanted events")
                break
            # Keep from the last complete block on; search the rest next time.
            buf, scan = buf[limit:], 0
    except _DAMAGE as exc:
        if warnings is None:
            raise TraceError(path, f"unreadable ({_first_line(exc)})") from exc
        warnings.append(f"{path}: cut short after {found:,} wanted events ({_first_line(exc)})")
    finally:
        stream.close()


#: What precedes a wanted value: its key (``"name": "`` as Kineto writes it).
_NAME_KEY = re.compile(rb'"name"\s*:\s*$')


def _positions(buf: bytes, needles: list[bytes], lo: int, hi: int) -> list[int]:
    """Where any of ``needles`` occurs in ``buf[lo:hi]``, in order (``bytes.find`` runs
    at memory speed where a regex stops at every quote)."""
    out: list[int] = []
    for needle in needles:
        at = buf.find(needle, lo, hi)
        while at >= 0:
            out.append(at)
            at = buf.find(needle, at + 1, hi)
    out.sort()
    return out


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
