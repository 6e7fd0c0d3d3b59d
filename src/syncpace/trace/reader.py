"""Load a run directory into columnar tables, validating as it goes.

Every problem is a :class:`~syncpace.errors.TraceError` naming the file and the
problem in one line. Damage a crash can cause (a stream cut short, a rank that never
finished) is tolerated and reported in :attr:`Trace.warnings` instead; rows that break
the format are left out and counted. The rules live in :mod:`syncpace.trace.validate`;
every rank's events are read through :class:`~syncpace.trace.read.rank.RankEvents`,
the one loop the streaming readers run too. :func:`assemble_trace` is where every
:class:`Trace` of a run directory is made, loaded whole or streamed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from syncpace.errors import TraceError
from syncpace.trace import journal, schema, wholerun
from syncpace.trace.read.account import account_rank, rank_warnings
from syncpace.trace.read.meta import RankSet, TraceMeta, read_metadata, segment_files
from syncpace.trace.read.rank import (
    CHECK_ROWS,
    RankEvents,
    Segments,
    checked_steps,
    read_stream,
)
from syncpace.trace.segments import add_interval
from syncpace.trace.stall import StallRecord, load_stalls
from syncpace.trace.validate.checksums import expects_checksums
from syncpace.trace.validate.completeness import RankCompleteness
from syncpace.trace.validate.metadata import read_host_meta
from syncpace.trace.validate.rows import check_counters, check_events, check_steps
from syncpace.trace.validate.stream import Stream


@dataclass(frozen=True, kw_only=True)
class Trace(RankSet):
    """A loaded run: per-rank metadata and the events and steps of all ranks (made by
    keyword: :func:`assemble_trace` for a run directory)."""

    path: Path
    world_size: int
    meta: dict[int, dict[str, Any]]
    events: pl.DataFrame
    steps: pl.DataFrame
    warnings: tuple[str, ...] = field(default=())
    #: Per rank: events and steps declared, found, left out as invalid, dropped, cut.
    completeness: dict[int, RankCompleteness] = field(default_factory=dict)
    #: Counter series of every host that ran a sampler (``host-*.counters.arrow``).
    counters: pl.DataFrame = field(default_factory=lambda: _empty_counters())
    #: Host name -> that host's facts (``host-*.meta.json``).
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Stall records by rank (``rank-R.stall.json``, see :mod:`syncpace.trace.stall`).
    stalls: dict[int, StallRecord] = field(default_factory=dict)
    #: Per rank and step summaries of the whole run (always-on mode), else empty.
    summaries: pl.DataFrame = field(default_factory=lambda: _empty_summaries())
    #: The live monitor's detections, as read with the trace (their files' problems
    #: among :attr:`warnings` too); None when the trace was not read from its files,
    #: and whoever needs them reads them.
    detections: wholerun.RunDetections | None = None


def rotated_steps(metas: dict[int, dict[str, Any]]) -> list[list[int]]:
    """Steps whose events rotation removed on some rank, merged."""
    intervals: list[list[int]] = []
    for meta in metas.values():
        for first, last in (meta.get("segments") or {}).get("removed_steps", []):
            add_interval(intervals, int(first), int(last))
    return intervals


def _in_intervals(column: str, intervals: list[list[int]]) -> pl.Expr:
    expr = pl.lit(False)
    for first, last in intervals:
        expr = expr | pl.col(column).is_between(first, last)
    return expr


def _recover(
    rank: int,
    meta: dict[str, Any],
    stem: Path,
    events: Stream | Segments,
    steps: Stream,
    world_size: int,
    warnings: list[str],
) -> tuple[pa.Table, pa.Table, pa.Table] | None:
    """What a rank that died left in its crash journal beyond its streams: events,
    calls in flight (``pending``) and steps, held to the same rules as the streams."""
    recovered = journal.recover_rank(stem, rank, meta, events.journal_hi, steps.journal_hi)
    if recovered is None:
        return None
    warnings.append(f"{stem}{journal.JOURNAL_SUFFIX}: {recovered.note}")
    events_rec, bad = check_events(recovered.events, rank, world_size)
    pending, bad_pending = check_events(recovered.pending, rank, world_size)
    bad.add(bad_pending)
    steps_rec, bad_steps = check_steps(recovered.steps, rank)
    for quarantine, what in ((bad, "events"), (bad_steps, "steps")):
        if quarantine.rows:
            warnings.append(
                f"{stem}{journal.JOURNAL_SUFFIX}: {quarantine.rows:,} recovered {what} left "
                f"out as invalid ({quarantine.describe()})"
            )
    return events_rec, pending, steps_rec


def load_trace(path: str | Path, *, allow_missing_ranks: bool = True) -> Trace:
    """Load the run directory ``path``.

    Ranks absent from the directory are reported in ``Trace.warnings`` (or raise when
    ``allow_missing_ranks`` is false); analysis then works on the ranks present. Rows
    that break the format are left out and counted (``Trace.completeness``).
    """
    index = read_metadata(path, allow_missing_ranks=allow_missing_ranks)
    warnings = list(index.warnings)
    event_tables: list[pa.Table] = []
    step_tables: list[pa.Table] = []
    completeness: dict[int, RankCompleteness] = {}
    rotated = segment_files(index.path)
    for rank, meta in sorted(index.meta.items()):
        stem = index.path / schema.rank_stem(rank)
        events = RankEvents(index, rank, rotated)
        event_tables += [group.kept for group in events.checked(CHECK_ROWS)]
        warnings.extend(events.warnings)
        steps, st_stream, st_bad = checked_steps(events.steps_path, meta, rank, warnings)
        step_tables.append(steps)
        ev = (events.account, events.left_out())
        completeness[rank] = account_rank(rank, meta, stem, ev, (st_stream, st_bad), warnings)
        said = rank_warnings(rank, meta, stem)
        if not meta.get("finished", False):
            warnings.append(said.pop(0))  # did not finish: what its journal holds next
            recovered = _recover(
                rank, meta, stem, events.account, st_stream, index.world_size, warnings
            )
            if recovered is not None:
                events_rec, pending, steps_rec = recovered
                event_tables += [events_rec, pending]
                step_tables.append(steps_rec)
                completeness[rank] = replace(
                    completeness[rank],
                    events_recovered=events_rec.num_rows,
                    steps_recovered=steps_rec.num_rows,
                    calls_pending=pending.num_rows,
                )
        warnings.extend(said)
    events_table = pa.concat_tables(event_tables) if event_tables else schema.EVENTS.empty_table()
    events_frame = pl.from_arrow(events_table)
    steps_frame = pl.from_arrow(pa.concat_tables(step_tables))
    assert isinstance(events_frame, pl.DataFrame) and isinstance(steps_frame, pl.DataFrame)
    return assemble_trace(
        index,
        events=events_frame,
        steps=steps_frame,
        warnings=warnings,
        completeness=completeness,
    )


def assemble_trace(
    index: TraceMeta,
    *,
    events: pl.DataFrame,
    steps: pl.DataFrame,
    warnings: list[str],
    completeness: dict[int, RankCompleteness],
) -> Trace:
    """The :class:`Trace` of the run directory ``index`` from its ranks' events and
    steps (all of them, or those a streaming reader keeps), ``warnings`` so far and
    their accounts: the files beside them read here (per-step summaries, the live
    monitor's detections, the hosts' counters and facts, stall records), and the steps
    some rank lost to rotation left out of every rank."""
    root, metas = index.path, index.meta
    summaries = load_summaries(root, metas, warnings)
    detections = check_detections(root, metas, index.world_size, warnings)
    rotated = rotated_steps(metas)
    if rotated:
        # A step some rank lost events of cannot be matched across ranks: analyse the
        # steps every rank still holds in full; the summaries cover the rest.
        removed = steps.filter(_in_intervals("step", rotated))["step"].n_unique()
        events = events.filter(~_in_intervals("step", rotated))
        steps = steps.filter(~_in_intervals("step", rotated))
        spans = ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in rotated[:5])
        spans += ", ..." if len(rotated) > 5 else ""
        warnings.append(
            f"{root}: the events of {removed:,} steps ({spans}) "
            f"were rotated out (always-on mode keeps the recent and the pinned segments); "
            f"the analysis covers the {steps['step'].n_unique():,} steps kept in full, "
            f"the per-step summaries ({summaries.height:,} rows) the whole run"
        )
    counters, hosts = load_host_files(root, warnings)
    stalls, stall_warnings = load_stalls(root)
    warnings.extend(stall_warnings)
    return Trace(
        path=root,
        world_size=index.world_size,
        meta=metas,
        events=events,
        steps=steps,
        warnings=tuple(warnings),
        completeness=completeness,
        counters=counters,
        hosts=hosts,
        stalls=stalls,
        summaries=summaries,
        detections=detections,
    )


def _read_evidence(
    path: Path, expected: pa.Schema, what: str, warnings: list[str]
) -> pa.Table | None:
    """A file beside the trace (summaries, counters): absent is fine, damaged a warning."""
    if not path.exists():
        return None
    try:
        return read_stream(path, expected, warnings)[0]
    except TraceError as exc:
        warnings.append(f"{exc}; its {what} are left out")
        return None


def load_summaries(
    root: Path, metas: dict[int, dict[str, Any]], warnings: list[str]
) -> pl.DataFrame:
    """Every rank's per-step summaries (``rank-R.summary.arrow``), where written,
    validated (:func:`syncpace.trace.wholerun.read_summary`)."""
    tables = []
    for rank in sorted(metas):
        meta = metas[rank]
        declared = meta.get("summaries_written") if meta.get("finished") is True else None
        path = wholerun.summary_file(root, rank)
        table = wholerun.read_summary(
            path, rank, warnings, declared, checksummed=expects_checksums(meta)
        )
        if table is not None:
            tables.append(table)
    frame = pl.from_arrow(pa.concat_tables(tables) if tables else schema.SUMMARY.empty_table())
    assert isinstance(frame, pl.DataFrame)
    return frame


def check_detections(
    root: Path, metas: dict[int, dict[str, Any]], world_size: int, warnings: list[str]
) -> wholerun.RunDetections:
    """The live monitor's detections, each once; what is wrong with their files said in
    ``warnings`` too (a damaged line must show wherever the trace is described,
    ``trace-info`` too), read once for the whole run's analysis."""
    said: list[str] = []
    found = wholerun.run_detections(root, sorted(metas), world_size, said, metas)
    warnings.extend(said)
    return wholerun.RunDetections(tuple(found), tuple(said))


def _empty_summaries() -> pl.DataFrame:
    return pl.from_arrow(schema.SUMMARY.empty_table())  # type: ignore[return-value]


def _empty_counters() -> pl.DataFrame:
    return pl.from_arrow(schema.COUNTERS.empty_table())  # type: ignore[return-value]


def load_host_files(
    root: Path, warnings: list[str]
) -> tuple[pl.DataFrame, dict[str, dict[str, Any]]]:
    """The host files of a run directory: counters of all hosts and each host's facts.

    They are evidence beside the trace: a damaged one is a warning, never an error."""
    hosts: dict[str, dict[str, Any]] = {}
    tables = []
    for meta_path in sorted(root.glob(f"{schema.HOST_PREFIX}*{schema.HOST_META_SUFFIX}")):
        try:
            meta = read_host_meta(meta_path)
        except TraceError as exc:
            warnings.append(f"{exc}; its facts and counters are left out")
            continue
        host = str(meta.get("host", meta_path.name))
        hosts[host] = meta
        stem = meta_path.name[: -len(schema.HOST_META_SUFFIX)]
        table = _read_evidence(
            root / f"{stem}{schema.COUNTERS_SUFFIX}", schema.COUNTERS, "counters", warnings
        )
        if table is not None:
            kept, bad = check_counters(table)
            if bad.rows:
                warnings.append(
                    f"{root / f'{stem}{schema.COUNTERS_SUFFIX}'}: {bad.rows:,} of "
                    f"{table.num_rows:,} counter rows left out as invalid ({bad.describe()})"
                )
            tables.append(kept)
    if not tables:
        return _empty_counters(), hosts
    counters = pl.from_arrow(pa.concat_tables(tables))
    assert isinstance(counters, pl.DataFrame)
    return counters, hosts
