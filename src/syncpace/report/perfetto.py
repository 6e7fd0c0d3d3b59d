"""Chrome/Perfetto trace export: one process track per rank, streamed.

Iterations are complete ("X") slices on the rank's first thread. Collectives of one
rank overlap each other when issued asynchronously, which "X" slices on one thread
cannot show (they must nest), so each collective is an async slice ("b"/"e") on the
rank's track, named by op and size, with its group, sequence number, wait and transfer
in ``args``. Times are microseconds from the start of the run. Rows are encoded by
polars expressions, not a Python loop, so large traces export quickly.

:func:`write_perfetto` on a run directory streams: each rank's Arrow streams are read
slice by slice (memory-mapped), validated by the reader's own rules
(:mod:`syncpace.trace.validate`), and the JSON is written as it is made. Collectives
are matched across ranks one window of steps at a time; a window is written once
every rank has been read :data:`LAG_STEPS` steps past it. Memory is bounded by the
events of one window (about :data:`CHUNK_EVENTS`, at least the events of
``LAG_STEPS + 1`` steps of all ranks), never by the length of the trace.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from syncpace.analysis.collectives import match, usable_events
from syncpace.errors import ReportError
from syncpace.report import perfetto_tracks
from syncpace.trace import schema
from syncpace.trace.journal import journal_path
from syncpace.trace.read.meta import TraceMeta, read_metadata
from syncpace.trace.read.rank import RankEvents
from syncpace.trace.reader import Trace, load_trace
from syncpace.trace.validate.checksums import expects_checksums
from syncpace.trace.validate.completeness import RankCompleteness, completeness_lines
from syncpace.trace.validate.rows import Quarantine, check_steps
from syncpace.trace.validate.stream import Stream

#: Events matched and encoded together (a window of steps of every rank).
CHUNK_EVENTS = 100_000
#: Steps a window waits for on every rank: an event of step s can be written after
#: events of later steps (an async call completing late).
LAG_STEPS = 2


def perfetto_events(trace: Trace) -> list[str]:
    """The trace as JSON-encoded Chrome trace events (one string each), in memory."""
    steps, events = trace.steps, trace.events
    origin = _origin(trace)
    lines = [_json(m) for m in _metadata(trace.meta)]
    if steps.height:
        lines += _step_lines(steps, origin)
    if events.height:
        lines += _collective_lines(events, origin)[0]
    lines += perfetto_tracks.counter_tracks(trace.path, origin, trace.counters).lines
    return lines


def _step_lines(steps: pl.DataFrame, origin: int) -> list[str]:
    frame = steps.filter(pl.col("end_ns") >= pl.col("start_ns"), pl.col("start_ns") >= 0)
    us = 1e-3
    return (
        frame.select(
            pl.struct(
                name=pl.format("step {}", pl.col("step")),
                cat=pl.lit("step"),
                ph=pl.lit("X"),
                ts=(pl.col("start_ns") - origin) * us,
                dur=(pl.col("end_ns") - pl.col("start_ns")) * us,
                pid=pl.col("rank"),
                tid=pl.lit(0),
                args=pl.struct("step", "pacing_delay_ns"),
            ).struct.json_encode()
        )
        .to_series()
        .to_list()
    )


def _collective_lines(events: pl.DataFrame, origin: int, first_id: int = 0) -> tuple[list, int]:
    """JSON lines of ``events`` (all ranks of whole instances); slice ids start at
    ``first_id``. Returns the lines and how many ids were used."""
    ev = usable_events(events)
    m = match(ev)
    t = m.events
    inst = m.instances
    frame = pl.DataFrame(
        {
            "rank": t.rank,
            "enter": t.enter,
            "exit": t.exit,
            "last_enter": t.last_enter,
            "instance": t.instance,
            # each event's own op: a transfer's send and recv are one instance
            "op": ev["op"],
            "peer": ev["peer"],
            "status": ev["status"],
        }
    ).with_row_index("id", offset=first_id)
    frame = perfetto_tracks.with_flows(frame)
    frame = frame.join(
        inst.select("group", "seq", "bytes", "transfer_ns").with_row_index("instance"),
        on="instance",
        how="left",
    )
    end = pl.when(pl.col("exit") >= pl.col("enter")).then(pl.col("exit")).otherwise(pl.col("enter"))
    common = {
        "name": pl.format("{} {}", pl.col("op"), _size(pl.col("bytes")))
        + pl.when(pl.col("op") == "send")
        .then(pl.format(" to {}", pl.col("peer")))
        .when(pl.col("op") == "recv")
        .then(pl.format(" from {}", pl.col("peer")))
        .otherwise(pl.lit("")),
        "cat": pl.lit("collective"),
        "id": pl.col("id"),
        "pid": pl.col("rank"),
        "tid": pl.lit(1),
    }
    begin = pl.struct(
        **common,
        ph=pl.lit("b"),
        ts=(pl.col("enter") - origin) * 1e-3,
        args=pl.struct(
            "group",
            "seq",
            "bytes",
            "peer",
            "status",
            wait_ns=pl.col("last_enter") - pl.col("enter"),
            transfer_ns=pl.col("transfer_ns"),
        ),
        **perfetto_tracks.FLOW_FIELDS,
    ).struct.json_encode()
    finish = pl.struct(**common, ph=pl.lit("e"), ts=(end - origin) * 1e-3).struct.json_encode()
    encoded = frame.select(b=begin, e=finish)
    return encoded["b"].to_list() + encoded["e"].to_list(), frame.height


def _size(nbytes: pl.Expr) -> pl.Expr:
    return (
        pl.when(nbytes >= 1 << 20)
        .then(pl.format("{}MiB", (nbytes / (1 << 20)).round(1)))
        .when(nbytes >= 1 << 10)
        .then(pl.format("{}KiB", (nbytes / (1 << 10)).round(1)))
        .otherwise(pl.format("{}B", nbytes))
    )


def _origin(trace: Trace) -> int:
    candidates = []
    if trace.steps.height:
        candidates.append(trace.steps.filter(pl.col("start_ns") >= 0)["start_ns"].min())
    if trace.events.height:
        candidates.append(trace.events.filter(pl.col("enter_ns") >= 0)["enter_ns"].min())
    values = [int(c) for c in candidates if c is not None]  # type: ignore[call-overload]
    return min(values) if values else 0


def _metadata(metas: dict[int, dict[str, Any]]) -> list[dict]:
    out = []
    for rank, meta in sorted(metas.items()):
        label = f"rank {rank} ({meta.get('host', '?')}, local {meta.get('local_rank', '?')})"
        out.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": label}})
        out.append(
            {"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}}
        )
        out.append(
            {"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "steps"}}
        )
        out.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": rank,
                "tid": 1,
                "args": {"name": "collectives"},
            }
        )
    return out


def _json(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))


# Streaming ---------------------------------------------------------------------------
@dataclass
class _Account:
    """One rank's rows as the export read them (the reader's completeness account)."""

    events: Quarantine = field(default_factory=Quarantine)
    steps: Quarantine = field(default_factory=Quarantine)
    streams: dict[str, Stream] = field(default_factory=dict)


@dataclass(frozen=True)
class ExportResult:
    """What :func:`write_perfetto` wrote, and what it left out."""

    path: Path
    events: int
    steps: int
    completeness: dict[int, RankCompleteness]
    warnings: tuple[str, ...]
    peak_window_events: int = 0  # the most events held at once (the memory bound)

    def lines(self, world_size: int, missing: list[int]) -> list[str]:
        return completeness_lines(self.completeness, missing, world_size)


def _event_slices(index: TraceMeta, rank: int, account: _Account) -> Iterator[pa.Table]:
    events = RankEvents(index, rank, mapped=False)
    account.events = events.bad
    for checked in events.checked(1, duplicates=False):  # each slice alone, as it comes
        yield checked.kept
    account.streams["events"] = events.account


def _step_slices(index: TraceMeta, rank: int, account: _Account | None) -> Iterator[pa.Table]:
    version = index.meta[rank]["schema_version"]
    stream = Stream(index.stream_paths(rank)[1], schema.steps_schema(version), mapped=False)
    if account is not None:
        account.streams["steps"] = stream
    last = np.iinfo(np.int64).min
    for batch in stream.batches():
        table = pa.Table.from_batches([batch])
        if version != schema.SCHEMA_VERSION:
            table = schema.upgrade_steps(table, version)
        table, bad = check_steps(table, rank)
        steps = table.column("step").to_numpy()
        if steps.size:  # in order, once each: a step at or below the last is damage
            prior = np.maximum.accumulate(np.concatenate(([last], steps)))[:-1]
            out_of_order = steps <= prior
            if out_of_order.any():
                bad.reasons["duplicate or backward step"] = int(out_of_order.sum())
                table = table.filter(pa.array(~out_of_order))
            last = max(last, int(steps.max()))
        if account is not None:
            account.steps.add(bad)
        yield table


def _stream_origin(index: TraceMeta) -> int:
    """The earliest valid step start or call enter: a first pass, one slice at a time."""
    best: int | None = None
    for rank in index.ranks:
        for table in _step_slices(index, rank, None):
            if table.num_rows:
                low = pc.min(pc.filter(table["start_ns"], pc.greater_equal(table["start_ns"], 0)))
                if low.is_valid:
                    best = low.as_py() if best is None else min(best, low.as_py())
        for table in _event_slices(index, rank, _Account()):
            if table.num_rows:
                low = pc.min(table["enter_ns"]).as_py()
                best = low if best is None else min(best, low)
    return best or 0


class _Windows:
    """Events of all ranks, a window of steps at a time (see the module docstring)."""

    def __init__(self, sources: dict[int, Iterator[pa.Table]], chunk_events: int) -> None:
        self._sources = sources
        self._chunk = chunk_events
        self._buffers: dict[int, list[pa.Table]] = {r: [] for r in sources}
        self._max_step = dict.fromkeys(sources, -1)
        self._done: set[int] = set()
        self._buffered = 0
        self.peak = 0

    def __iter__(self) -> Iterator[pl.DataFrame]:
        emitted_below = 0
        while len(self._done) < len(self._sources):
            live = [r for r in self._sources if r not in self._done]
            rank = min(live, key=lambda r: self._max_step[r])  # the rank furthest behind
            table = next(self._sources[rank], None)
            if table is None:
                self._done.add(rank)
                continue
            if table.num_rows:
                self._buffers[rank].append(table)
                self._max_step[rank] = max(self._max_step[rank], pc.max(table["step"]).as_py())
                self._buffered += table.num_rows
                self.peak = max(self.peak, self._buffered)
            if self._buffered >= self._chunk:
                live = [r for r in self._sources if r not in self._done]
                frontier = min(self._max_step[r] for r in live) - LAG_STEPS if live else None
                if frontier is not None and frontier > emitted_below:
                    emitted_below = frontier
                    yield self._take(frontier)
        rest = self._take(None)
        if rest.height:
            yield rest

    def _take(self, below: int | None) -> pl.DataFrame:
        """The buffered rows with ``step < below`` (all when ``below`` is None)."""
        out = []
        self._buffered = 0
        for rank, tables in self._buffers.items():
            if not tables:
                continue
            table = pa.concat_tables(tables)
            if below is None:
                out.append(table)
                self._buffers[rank] = []
                continue
            early = pc.less(table["step"], below)
            out.append(table.filter(early))
            keep = table.filter(pc.invert(early))
            self._buffers[rank] = [keep] if keep.num_rows else []
            self._buffered += keep.num_rows
        if not out:
            return pl.DataFrame(schema=pl.from_arrow(schema.EVENTS.empty_table()).schema)
        frame = pl.from_arrow(pa.concat_tables(out))
        assert isinstance(frame, pl.DataFrame)
        return frame


class _Lines:
    """Writes the JSON array's elements, separated, as they come."""

    def __init__(self, f: IO[str]) -> None:
        self._f = f
        self._first = True

    def write(self, lines: Iterable[str]) -> int:
        lines = list(lines)
        if lines:
            self._f.write(("" if self._first else ",\n") + ",\n".join(lines))
            self._first = False
        return len(lines)


def _stream_export(index: TraceMeta, f: IO[str], chunk_events: int) -> ExportResult:
    origin = _stream_origin(index)
    accounts = {rank: _Account() for rank in index.ranks}
    out = _Lines(f)
    out.write(_json(m) for m in _metadata(index.meta))
    tracks = perfetto_tracks.counter_tracks(index.path, origin)
    out.write(tracks.lines)
    steps = 0
    for rank in index.ranks:
        for table in _step_slices(index, rank, accounts[rank]):
            if table.num_rows:
                frame = pl.from_arrow(table)
                assert isinstance(frame, pl.DataFrame)
                steps += out.write(_step_lines(frame, origin))
    sources = {r: _event_slices(index, r, accounts[r]) for r in index.ranks}
    windows = _Windows(sources, chunk_events)
    next_id = 0
    for frame in windows:
        lines, used = _collective_lines(frame, origin, next_id)
        next_id += used
        out.write(lines)
    warnings = list(index.warnings) + tracks.warnings
    completeness = {}
    for rank, account in accounts.items():
        meta = index.meta[rank]
        finished = meta.get("finished") is True
        cut = []
        for what, stream in account.streams.items():
            bad = account.events if what == "events" else account.steps
            if stream.corrupt_rows:
                bad.reasons["in batches failing their checksum"] = stream.corrupt_rows
                warnings.append(
                    f"{stream.path}: {stream.corrupt_rows:,} {what} in batches failing their "
                    "checksum left out"
                )
            unvouched = stream.unvouched(what) if expects_checksums(meta) else None
            if unvouched:
                warnings.append(unvouched)
            if stream.cut:
                cut.append(what)
                warnings.append(f"{stream.path}: {stream.cut}")
            elif finished and not stream.has_eos:
                cut.append(what)
                warnings.append(f"{stream.path}: ends without its end-of-stream marker")
            declared = meta.get(f"{what}_written") if finished else None
            if declared is not None and declared != stream.rows:
                warnings.append(
                    f"{stream.path}: {stream.rows:,} {what} found, {declared:,} declared"
                )
            if bad.rows:
                warnings.append(
                    f"{stream.path}: {bad.rows:,} of {stream.rows:,} {what} left out as invalid "
                    f"({bad.describe()})"
                )
        ev, st = account.streams.get("events"), account.streams.get("steps")
        completeness[rank] = RankCompleteness(
            rank=rank,
            finished=finished,
            events_declared=meta.get("events_written") if finished else None,
            events_found=ev.rows if ev else 0,
            events_invalid=account.events.rows,
            events_dropped=int(meta.get("dropped_events") or 0),
            steps_declared=meta.get("steps_written") if finished else None,
            steps_found=st.rows if st else 0,
            steps_invalid=account.steps.rows,
            cut=tuple(cut),
            write_error=meta.get("write_error"),
        )
    return ExportResult(
        Path(f.name),
        next_id,
        steps,
        completeness,
        tuple(warnings),
        windows.peak,
    )


def _left_journals(index: TraceMeta) -> bool:
    """Whether a rank that did not finish left its crash journal: what it recorded last
    is there, not in its streams."""
    return any(
        not meta.get("finished") and journal_path(index.path, rank).exists()
        for rank, meta in index.meta.items()
    )


def _rotated(index: TraceMeta) -> bool:
    """Whether the run was traced in always-on mode (its events in segments)."""
    return any(meta.get("segments") for meta in index.meta.values())


def export_perfetto(
    source: Trace | str | Path, out: str | Path, *, chunk_events: int = CHUNK_EVENTS
) -> ExportResult:
    """Write a Chrome trace JSON file that Perfetto and chrome://tracing open.

    ``source`` is a run directory (streamed, bounded memory; loaded whole when a rank
    that died left its crash journal, or when it was traced in always-on mode) or a
    loaded :class:`Trace` (such as one job's per-node directories,
    :func:`~syncpace.trace.merge.load_job`).
    The result accounts for every rank's rows, as the reader does."""
    path = Path(out)
    index = source if isinstance(source, Trace) else read_metadata(source)
    if isinstance(index, TraceMeta) and (_left_journals(index) or _rotated(index)):
        # A dead rank's journal and rotated segments are read only by the reader; a
        # rotated run is bounded by its disk budget.
        index = load_trace(index.path)
    try:
        with path.open("w", encoding="utf-8") as f:
            f.write('{"displayTimeUnit":"ms","traceEvents":[\n')
            if isinstance(index, Trace):
                _Lines(f).write(perfetto_events(index))
                result = ExportResult(
                    path,
                    index.events.height,
                    index.steps.height,
                    dict(index.completeness),
                    index.warnings,
                )
            else:
                result = _stream_export(index, f, chunk_events)
            f.write("\n]}\n")
    except OSError as exc:
        raise ReportError(f"{path}: cannot write the export ({exc.strerror or exc})") from exc
    return result


def write_perfetto(
    source: Trace | str | Path, out: str | Path, *, chunk_events: int = CHUNK_EVENTS
) -> Path:
    """:func:`export_perfetto`, returning the file written."""
    return export_perfetto(source, out, chunk_events=chunk_events).path
