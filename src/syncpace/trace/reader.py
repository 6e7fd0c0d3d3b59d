"""Load a run directory into columnar tables, validating as it goes.

Every problem is a :class:`~syncpace.errors.TraceError` naming the file and the
problem in one line. Damage a crash can cause (a stream cut short, a rank that never
finished) is tolerated and reported in :attr:`Trace.warnings` instead; rows that break
the format are left out and counted. The rules live in :mod:`syncpace.trace.validate`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from syncpace.errors import TraceError
from syncpace.trace import journal, schema, validate, wholerun
from syncpace.trace.segments import add_interval
from syncpace.trace.stall import StallRecord, load_stalls

_DAMAGE = validate.DAMAGE
MAX_WORLD_SIZE = validate.MAX_WORLD_SIZE

_META_RE = re.compile(r"^rank-(\d{5,})" + re.escape(schema.META_SUFFIX) + "$")
_SUFFIXES = "|".join(re.escape(s) for s in (schema.EVENTS_SUFFIX, schema.STEPS_SUFFIX))
_DATA_RE = re.compile(r"^rank-(\d{5,})(?:" + _SUFFIXES + r"|\.events\.\d{6}\.arrow)$")


@dataclass(frozen=True)
class Trace:
    """A loaded run: per-rank metadata and the events and steps of all ranks."""

    path: Path
    world_size: int
    meta: dict[int, dict[str, Any]]
    events: pl.DataFrame
    steps: pl.DataFrame
    warnings: tuple[str, ...] = field(default=())
    #: Per rank: events and steps declared, found, left out as invalid, dropped, cut.
    completeness: dict[int, validate.RankCompleteness] = field(default_factory=dict)
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

    @property
    def ranks(self) -> list[int]:
        return sorted(self.meta)

    @property
    def missing_ranks(self) -> list[int]:
        return sorted(set(range(self.world_size)) - set(self.meta))


def _read_meta(path: Path) -> dict[str, Any]:
    return validate.read_meta(path)


def _read_stream(path: Path, expected: pa.Schema, warnings: list[str]) -> pa.Table:
    """Read an Arrow IPC stream, keeping every complete batch of a cut-short file."""
    return _read_rank_stream(path, expected, warnings)[0]


def _read_rank_stream(
    path: Path, expected: pa.Schema, warnings: list[str]
) -> tuple[pa.Table, validate.Stream]:
    if not path.exists() and not path.is_symlink():
        raise TraceError(path, "missing (the rank's metadata exists, its data file does not)")
    stream = validate.Stream(path, expected)
    try:
        table = stream.read_all()
    except _DAMAGE as exc:
        raise TraceError(path, f"unreadable columns ({_first_line(exc)})") from exc
    if stream.cut:
        warnings.append(f"{path}: {stream.cut}")
    return table, stream


@dataclass
class _Joined:
    """The segments of one rank's rotated events, read as one stream (what
    :func:`_check_rank` needs of a :class:`validate.Stream`)."""

    path: Path
    rows: int = 0
    cut: str | None = None
    has_eos: bool = True
    corrupt_rows: int = 0
    corrupt_batches: list[int] = field(default_factory=list)
    unvouched_rows: int = 0
    unvouched_batches: list[str] = field(default_factory=list)

    def unvouched(self, what: str) -> str | None:
        if not self.unvouched_batches:
            return None
        return validate.unvouched_warning(
            self.path, self.unvouched_batches, self.unvouched_rows, what
        )


def segment_files(root: Path) -> dict[int, list[Path]]:
    """Rank -> its rotated events segments after the first, in order (one listing)."""
    found: dict[int, list[tuple[int, Path]]] = {}
    try:
        names = os.listdir(root)
    except OSError:
        return {}
    for name in names:
        m = schema.SEGMENT_RE.match(name)
        if m:
            found.setdefault(int(m.group(1)), []).append((int(m.group(2)), root / name))
    return {rank: [p for _, p in sorted(v)] for rank, v in found.items()}


def _read_segments(
    first: Path, later: list[Path], meta: dict[str, Any], warnings: list[str]
) -> tuple[pa.Table, validate.Stream | _Joined]:
    """A rank's events: one file, or the segments rotation kept (the first may be gone),
    in the current schema whatever version wrote them."""
    version = meta["schema_version"]
    written = schema.events_schema(version)
    if not later and not meta.get("segments"):
        table, stream = _read_rank_stream(first, written, warnings)
        return _current(table, version), stream
    paths = ([first] if first.exists() else []) + later
    joined = _Joined(first.with_name(first.name.replace(".events.arrow", ".events.*.arrow")))
    tables = []
    for i, path in enumerate(paths):
        table, stream = _read_rank_stream(path, written, warnings)
        tables.append(_current(table, version))
        joined.rows += stream.rows
        joined.corrupt_rows += stream.corrupt_rows
        joined.corrupt_batches += [f"{path.name}:{b}" for b in stream.corrupt_batches]
        joined.unvouched_rows += stream.unvouched_rows
        joined.unvouched_batches += [f"{path.name}:{b}" for b in stream.unvouched_batches]
        if i == len(paths) - 1:
            joined.cut, joined.has_eos = stream.cut, stream.has_eos
        elif not stream.has_eos and not stream.cut:
            warnings.append(f"{path}: a closed segment ends without its end-of-stream marker")
    table = pa.concat_tables(tables) if tables else schema.EVENTS.empty_table()
    return table, joined


def read_steps_file(
    path: Path, meta: dict[str, Any], warnings: list[str]
) -> tuple[pa.Table, validate.Stream]:
    """A rank's steps file, in the current schema whatever version wrote it."""
    version = meta["schema_version"]
    table, stream = _read_rank_stream(path, schema.steps_schema(version), warnings)
    if version != schema.SCHEMA_VERSION:
        table = schema.upgrade_steps(table, version)
    return table, stream


def _current(table: pa.Table, version: int) -> pa.Table:
    return table if version == schema.SCHEMA_VERSION else schema.upgrade_events(table, version)


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


def _first_line(exc: BaseException) -> str:
    return validate.first_line(exc)


def _check_rank(
    rank: int,
    meta: dict[str, Any],
    stem: Path,
    events: tuple[pa.Table, validate.Stream],
    steps: tuple[pa.Table, validate.Stream],
    world_size: int,
    warnings: list[str],
) -> tuple[pa.Table, pa.Table, validate.RankCompleteness]:
    """Quarantine the rows that break the format, check what the metadata declares
    against what the streams hold, and account for the rank."""
    (ev, ev_stream), (st, st_stream) = events, steps
    ev_kept, ev_bad = validate.check_events(ev, rank, world_size)
    if ev_stream.corrupt_rows:
        ev_bad.reasons["in batches failing their checksum"] = ev_stream.corrupt_rows
    ev_kept, duplicates = validate.check_event_duplicates(ev_kept)
    ev_bad.add(duplicates)
    st_kept, st_bad = validate.check_steps(st, rank)
    if st_stream.corrupt_rows:
        st_bad.reasons["in batches failing their checksum"] = st_stream.corrupt_rows
    st_kept, order = validate.check_step_order(st_kept)
    st_bad.add(order)
    account = account_rank(rank, meta, stem, (ev_stream, ev_bad), (st_stream, st_bad), warnings)
    return ev_kept, st_kept, account


def account_rank(
    rank: int,
    meta: dict[str, Any],
    stem: Path,
    events: tuple[validate.Stream, validate.Quarantine],
    steps: tuple[validate.Stream, validate.Quarantine],
    warnings: list[str],
) -> validate.RankCompleteness:
    """Check what the metadata declares against what the streams held (read to their
    end) and what was quarantined; warn of every gap, and account for the rank."""
    (ev_stream, ev_bad), (st_stream, st_bad) = events, steps
    for bad, stream, what in ((ev_bad, ev_stream, "events"), (st_bad, st_stream, "steps")):
        if stream.corrupt_batches:
            warnings.append(
                f"{stream.path}: batch(es) {', '.join(map(str, stream.corrupt_batches[:5]))} "
                f"fail their checksum: {stream.corrupt_rows:,} {what} left out"
            )
        unvouched = stream.unvouched(what) if validate.expects_checksums(meta) else None
        if unvouched:
            warnings.append(unvouched)
        if bad.rows:
            warnings.append(
                f"{stream.path}: {bad.rows:,} of {stream.rows:,} {what} left out as invalid "
                f"({bad.describe()})"
            )
    finished = meta.get("finished") is True
    cut = []
    rotated = int((meta.get("segments") or {}).get("removed_events", 0))
    written = meta.get("events_written")
    declared = {
        "events": written - rotated if written is not None else None,
        "steps": meta.get("steps_written"),
    }
    for stream, what in ((ev_stream, "events"), (st_stream, "steps")):
        expected = declared[what] if finished else None
        if stream.cut:
            cut.append(what)
        elif finished and not stream.has_eos:
            cut.append(what)
            warnings.append(
                f"{stream.path}: ends without its end-of-stream marker although rank {rank} "
                f"finished: the stream was cut at a batch boundary"
            )
        if expected is not None and stream.rows != expected:
            relation = "fewer" if stream.rows < expected else "more"
            warnings.append(
                f"{stream.path}: {stream.rows:,} {what} found, {relation} than the "
                f"{expected:,} the metadata declares"
            )
    write_error = meta.get("write_error")
    if write_error:
        warnings.append(
            f"{stem}{schema.META_SUFFIX}: rank {rank} stopped writing its trace "
            f"({write_error}); what came after is not in the trace"
        )
    return validate.RankCompleteness(
        rank=rank,
        finished=finished,
        events_declared=declared["events"] if finished else None,
        events_found=ev_stream.rows,
        events_invalid=ev_bad.rows,
        events_dropped=int(meta.get("dropped_events") or 0),
        steps_declared=declared["steps"] if finished else None,
        steps_found=st_stream.rows,
        steps_invalid=st_bad.rows,
        cut=tuple(cut),
        write_error=write_error,
        events_rotated=rotated,
        invalid_reasons={
            **{f"events: {k}": v for k, v in ev_bad.reasons.items()},
            **{f"steps: {k}": v for k, v in st_bad.reasons.items()},
        },
    )


def _recover(
    rank: int,
    meta: dict[str, Any],
    stem: Path,
    events: validate.Stream,
    steps: validate.Stream,
    world_size: int,
    warnings: list[str],
) -> tuple[pa.Table, pa.Table, pa.Table] | None:
    """What a rank that died left in its crash journal beyond its streams: events,
    calls in flight (``pending``) and steps, held to the same rules as the streams."""
    recovered = journal.recover_rank(stem, rank, meta, events.journal_hi, steps.journal_hi)
    if recovered is None:
        return None
    warnings.append(f"{stem}{journal.JOURNAL_SUFFIX}: {recovered.note}")
    events_rec, bad = validate.check_events(recovered.events, rank, world_size)
    pending, bad_pending = validate.check_events(recovered.pending, rank, world_size)
    bad.add(bad_pending)
    steps_rec, bad_steps = validate.check_steps(recovered.steps, rank)
    for quarantine, what in ((bad, "events"), (bad_steps, "steps")):
        if quarantine.rows:
            warnings.append(
                f"{stem}{journal.JOURNAL_SUFFIX}: {quarantine.rows:,} recovered {what} left "
                f"out as invalid ({quarantine.describe()})"
            )
    return events_rec, pending, steps_rec


@dataclass(frozen=True)
class TraceMeta:
    """A run directory's validated metadata, without its data: what streaming readers
    (the Perfetto export) start from."""

    path: Path
    world_size: int
    meta: dict[int, dict[str, Any]]
    warnings: tuple[str, ...]

    @property
    def ranks(self) -> list[int]:
        return sorted(self.meta)

    @property
    def missing_ranks(self) -> list[int]:
        return sorted(set(range(self.world_size)) - set(self.meta))

    def stream_paths(self, rank: int) -> tuple[Path, Path]:
        stem = self.path / schema.rank_stem(rank)
        return Path(f"{stem}{schema.EVENTS_SUFFIX}"), Path(f"{stem}{schema.STEPS_SUFFIX}")


def read_metadata(path: str | Path, *, allow_missing_ranks: bool = True) -> TraceMeta:
    """Validate the directory ``path`` and every rank's metadata (not the data)."""
    root = Path(path)
    if not root.exists():
        raise TraceError(root, "no such directory")
    if not root.is_dir():
        raise TraceError(root, "not a directory (expected a syncpace run directory)")
    try:
        names = sorted(p.name for p in root.iterdir())
    except OSError as exc:
        raise TraceError(root, f"cannot list the directory: {exc.strerror or exc}") from exc
    meta_files = [root / n for n in names if _META_RE.match(n)]
    if not meta_files:
        raise TraceError(
            root, "no syncpace trace here (no rank-*.meta.json files)" + _foreign_hint(root)
        )
    warnings: list[str] = []
    metas: dict[int, dict[str, Any]] = {}
    meta_paths: dict[int, Path] = {}
    for meta_path in meta_files:
        file_rank = int(_META_RE.match(meta_path.name).group(1))  # type: ignore[union-attr]
        if file_rank in meta_paths:
            raise TraceError(
                meta_path,
                f"a second metadata file for rank {file_rank} (the first is "
                f"{meta_paths[file_rank].name}): two traces were merged into one directory",
            )
        meta_paths[file_rank] = meta_path
        meta = _read_meta(meta_path)
        edited = validate.checksum_warning(meta_path, meta)
        if edited:
            warnings.append(edited)
        if meta["rank"] != file_rank:
            raise TraceError(
                meta_path, f"file is named for rank {file_rank} but says rank {meta['rank']}"
            )
        metas[file_rank] = meta
    sizes = {m["world_size"] for m in metas.values()}
    if len(sizes) != 1:
        raise TraceError(root, f"ranks disagree on the world size: {sorted(sizes)}")
    world_size = sizes.pop()
    missing = sorted(set(range(world_size)) - set(metas))
    if missing:
        message = (
            f"{root}: {len(missing)} of {world_size} ranks have no trace files: {_ranges(missing)}"
        )
        if not allow_missing_ranks:
            raise TraceError(root, message.split(": ", 1)[1])
        warnings.append(message)
    for name in names:
        data = _DATA_RE.match(name)
        if data and int(data.group(1)) not in metas:
            warnings.append(
                f"{root / name}: data of rank {int(data.group(1))} without its "
                "metadata file; left out"
            )
    return TraceMeta(root, world_size, metas, tuple(warnings))


def load_trace(path: str | Path, *, allow_missing_ranks: bool = True) -> Trace:
    """Load the run directory ``path``.

    Ranks absent from the directory are reported in ``Trace.warnings`` (or raise when
    ``allow_missing_ranks`` is false); analysis then works on the ranks present. Rows
    that break the format are left out and counted (``Trace.completeness``).
    """
    index = read_metadata(path, allow_missing_ranks=allow_missing_ranks)
    root, world_size, metas = index.path, index.world_size, index.meta
    warnings = list(index.warnings)
    event_tables, step_tables = [], []
    completeness: dict[int, validate.RankCompleteness] = {}
    segments = segment_files(root)
    for rank, meta in sorted(metas.items()):
        stem = root / schema.rank_stem(rank)
        events_path = Path(f"{stem}{schema.EVENTS_SUFFIX}")
        ev = _read_segments(events_path, segments.get(rank, []), meta, warnings)
        st = read_steps_file(Path(f"{stem}{schema.STEPS_SUFFIX}"), meta, warnings)
        events_table, steps_table, completeness[rank] = _check_rank(
            rank, meta, stem, ev, st, world_size, warnings
        )
        event_tables.append(events_table)
        step_tables.append(steps_table)
        if not meta.get("finished", False):
            warnings.append(f"{stem}{schema.META_SUFFIX}: rank {rank} did not finish cleanly")
            recovered = _recover(rank, meta, stem, ev[1], st[1], world_size, warnings)
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
        if meta.get("dropped_events"):
            why = "after it stopped writing" if meta.get("write_error") else "(buffer full)"
            warnings.append(
                f"{stem}{schema.META_SUFFIX}: rank {rank} dropped {meta['dropped_events']} "
                f"events {why}"
            )
    events = pl.from_arrow(pa.concat_tables(event_tables))
    steps = pl.from_arrow(pa.concat_tables(step_tables))
    assert isinstance(events, pl.DataFrame) and isinstance(steps, pl.DataFrame)
    summaries = load_summaries(root, metas, warnings)
    detections = check_detections(root, metas, world_size, warnings)
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
        root,
        world_size,
        metas,
        events,
        steps,
        tuple(warnings),
        completeness,
        counters,
        hosts,
        stalls,
        summaries,
        detections,
    )


def rank_warnings(rank: int, meta: dict[str, Any], stem: Path) -> list[str]:
    """What a rank's metadata says went wrong: it did not finish, it dropped events."""
    out = []
    if not meta.get("finished", False):
        out.append(f"{stem}{schema.META_SUFFIX}: rank {rank} did not finish cleanly")
    if meta.get("dropped_events"):
        why = "after it stopped writing" if meta.get("write_error") else "(buffer full)"
        out.append(
            f"{stem}{schema.META_SUFFIX}: rank {rank} dropped {meta['dropped_events']} events {why}"
        )
    return out


def _read_evidence(
    path: Path, expected: pa.Schema, what: str, warnings: list[str]
) -> pa.Table | None:
    """A file beside the trace (summaries, counters): absent is fine, damaged a warning."""
    if not path.exists():
        return None
    try:
        return _read_stream(path, expected, warnings)
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
            path, rank, warnings, declared, checksummed=validate.expects_checksums(meta)
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
            meta = validate.read_host_meta(meta_path)
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
            kept, bad = validate.check_counters(table)
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


#: Names other tools give their traces -> the ``syncpace import`` format that reads them.
_FOREIGN = (
    (re.compile(r"\.pt\.trace\.json(\.gz)?$"), "kineto"),
    (re.compile(r"^.+-pid\d+\.log$"), "nccl-inspector"),
)


def _foreign_hint(root: Path, limit: int = 500) -> str:
    """``"; it holds …: run syncpace import …"`` when ``root`` holds another tool's
    traces (by their usual names, or a JSON file that starts like a Chrome trace)."""
    for i, path in enumerate(sorted(root.rglob("*"))):
        if i >= limit:
            break
        fmt = next((f for pattern, f in _FOREIGN if pattern.search(path.name)), None)
        if fmt is None and path.suffix == ".json" and path.is_file():
            try:
                with open(path, "rb") as f:
                    fmt = "kineto" if b'"traceEvents"' in f.read(1 << 16) else None
            except OSError:
                fmt = None
        if fmt is not None:
            return (
                f"; it holds {fmt} files ({path.name}): convert them first with "
                f"`syncpace import {fmt} {root} --out RUN_DIR`"
            )
    return ""


def _ranges(values: list[int]) -> str:
    return validate.ranges(values)
