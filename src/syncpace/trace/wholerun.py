"""What always-on mode keeps of the whole run, read back: per-step summaries, step
boundaries and the live monitor's detections.

In always-on mode a rank's events rotate out; three files stay for the whole run
(``docs/monitoring.md``): ``rank-R.steps.arrow`` (every step boundary),
``rank-R.summary.arrow`` (per step: calls, bytes, time in calls, blocked time, the
longest call, failures) and ``rank-R.monitor.jsonl`` (the live detector's starts and
stops, one JSON object a line, the same on every rank, each ending with the CRC-32 of
the rest of its line: :func:`detection_line`).

The rules are the reader's: a damaged or cut summary file keeps its complete batches
and says so in a warning naming the file; rows that break the format are left out and
counted; a detections file is read only when it is a regular file within
:data:`MAX_MONITOR_BYTES`, and each line that is not a detection (or fails its
checksum) is left out and counted in one warning for the file. Nothing here raises
on bad input but a :class:`~syncpace.errors.TraceError` the caller turns into a
warning.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import numpy as np
import pyarrow as pa

from syncpace.errors import TraceError
from syncpace.trace import schema
from syncpace.trace.validate.files import read_regular
from syncpace.trace.validate.metadata import MAX_WORLD_SIZE, visible_reason
from syncpace.trace.validate.rows import MAX_STEP, check_step_order, check_steps, check_summaries
from syncpace.trace.validate.stream import DAMAGE, Stream, first_line

#: Bound on one rank's detections file: a detection is ~200 bytes, a start and a stop
#: per episode; a real file is kilobytes even after days.
MAX_MONITOR_BYTES = 16 << 20
#: Bound on one line of it.
MAX_LINE_BYTES = 4096

_Step = Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]
_Rank = Annotated[int, msgspec.Meta(ge=0, lt=MAX_WORLD_SIZE)]
_Share = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
_Cost = Annotated[float, msgspec.Meta(ge=-1.0, le=1e6)]
_Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=1e7)]


class Detection(msgspec.Struct, frozen=True):
    """One line of ``rank-R.monitor.jsonl``: something started or stopped at ``step``
    (as :class:`syncpace.monitor.Detection` writes it; unknown keys are ignored)."""

    kind: Literal["straggler", "step_time_jump"]
    state: Literal["start", "stop"]
    step: _Step
    rank: _Rank | None = None
    share: _Share = 0.0
    cost: _Cost = 0.0
    steps_seen: _Step = 0
    since_step: _Step | None = None  # straggler: the change point the detector named
    median_s: _Seconds | None = None  # step_time_jump: the window's median step time
    baseline_s: _Seconds | None = None


_DECODER = msgspec.json.Decoder(Detection)


#: The end of a checksummed line: ``, "crc32": "1a2b3c4d"}``.
_CHECKSUM_TAIL = re.compile(rb', "' + schema.CHECKSUM_KEY.encode() + rb'": "([0-9a-f]{8})"}\s*$')


def detection_line(record: dict[str, Any]) -> str:
    """One line of a detections file (no newline): ``record`` as JSON with sorted keys,
    then the CRC-32 of that text as its last key. A flipped digit in a share or a step
    is otherwise a valid, wrong detection; lines without one (older files) are read
    unchecked."""
    body = json.dumps(record, sort_keys=True, allow_nan=False)
    if not body.startswith("{") or body == "{}":
        raise ValueError("a detection is a non-empty JSON object")
    crc = zlib.crc32(body.encode())
    return f'{body[:-1]}, "{schema.CHECKSUM_KEY}": "{crc:08x}"}}'


def _checksum_fails(line: bytes) -> bool:
    found = _CHECKSUM_TAIL.search(line)
    if found is None:
        return False
    body = line[: found.start()] + b"}"
    return f"{zlib.crc32(body):08x}".encode() != found.group(1)


def monitor_path(root: Path, rank: int) -> Path:
    return root / f"{schema.rank_stem(rank)}{schema.MONITOR_SUFFIX}"


def declared_detections(meta: dict[str, Any]) -> int | None:
    """How many detections a finished rank's live monitor recorded (its metadata's
    ``monitor.detections``); ``None`` when it does not say."""
    monitor = meta.get("monitor") if meta.get("finished") is True else None
    count = monitor.get("detections") if isinstance(monitor, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return None
    return count


def read_detections(
    path: Path, world_size: int, warnings: list[str], declared: int | None = None
) -> list[Detection]:
    """The detections of one rank's file; ``[]`` when there is none. A file that is not
    a regular file or too large is refused with one warning; each bad line is left out
    (one warning for the file, with the first reason). ``declared``: the detections
    the rank's metadata says it recorded; a file missing them is said."""
    if not path.exists() and not path.is_symlink():
        if declared:
            warnings.append(
                f"{path}: missing (the metadata declares {declared:,} detections); they "
                "are left out where no other rank holds them"
            )
        return []
    try:
        data = read_regular(path, MAX_MONITOR_BYTES, "detections file")
    except TraceError as exc:
        warnings.append(f"{exc}; its detections are left out")
        return []
    lines = data.split(b"\n")
    cut = bool(lines) and lines[-1] != b""  # the last line was being written
    out: list[Detection] = []
    bad: list[tuple[int, str]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            bad.append((number, f"longer than {MAX_LINE_BYTES:,} bytes"))
            continue
        if _checksum_fails(line):
            bad.append((number, "its checksum does not match"))
            continue
        try:
            record = _DECODER.decode(line)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            bad.append((number, visible_reason(exc)))
            continue
        problem = _problem(record, world_size)
        if problem:
            bad.append((number, problem))
            continue
        out.append(record)
    lines_held = len(out) + len(bad)  # every line that is not blank is one or the other
    if declared is not None and lines_held < declared:
        warnings.append(
            f"{path}: {lines_held:,} detection line(s) found, fewer than the {declared:,} "
            "the metadata declares"
        )
    if bad:
        number, reason = bad[0]
        ending = " (the last one cut short)" if cut and bad[-1][0] == len(lines) else ""
        warnings.append(
            f"{path}: {len(bad):,} line(s) are not detections{ending}, left out "
            f"(line {number}: {reason})"
        )
    return out


def _problem(d: Detection, world_size: int) -> str | None:
    if d.rank is not None and d.rank >= world_size:
        return f"rank {d.rank} outside the world of {world_size}"
    if d.kind == "straggler" and d.rank is None:
        return "a straggler without a rank"
    if d.since_step is not None and d.since_step > d.step:
        return f"since step {d.since_step} after its step {d.step}"
    return None


@dataclass(frozen=True)
class RunDetections:
    """Every rank's detections, each once, and what was wrong with their files."""

    found: tuple[Detection, ...]
    warnings: tuple[str, ...]


def run_detections(
    root: Path,
    ranks: Iterable[int],
    world_size: int,
    warnings: list[str],
    metas: dict[int, dict[str, Any]] | None = None,
) -> list[Detection]:
    """Every rank's detections, each once (every rank records the same ones; a rank
    that stopped early holds fewer), in step order. ``metas``: the ranks' metadata,
    for the count each finished rank declares."""
    seen: set[Detection] = set()
    for rank in ranks:
        declared = declared_detections(metas.get(rank, {})) if metas is not None else None
        path = monitor_path(root, rank)
        seen.update(read_detections(path, world_size, warnings, declared))
    return sorted(seen, key=lambda d: (d.step, d.kind, -1 if d.rank is None else d.rank, d.state))


# Summaries and steps -----------------------------------------------------------------
def summary_file(root: Path, rank: int) -> Path:
    return root / f"{schema.rank_stem(rank)}{schema.SUMMARY_SUFFIX}"


def read_summary(
    path: Path,
    rank: int,
    warnings: list[str],
    declared: int | None = None,
    *,
    checksummed: bool = False,
) -> pa.Table | None:
    """One rank's summaries, validated; ``None`` when there is no file or it cannot be
    read at all (said in ``warnings``). A cut file keeps its complete batches.
    ``declared``: the rows a finished rank's metadata says it wrote; a file that is
    missing or holds another number is said. ``checksummed``: its writer checksums
    every batch, so a batch without one is said."""
    if not path.exists() and not path.is_symlink():
        if declared:
            warnings.append(
                f"{path}: missing (the metadata declares {declared:,} summaries); the whole "
                f"run leaves rank {rank} out"
            )
        return None
    try:
        stream = Stream(path, schema.SUMMARY)
        table = stream.read_all()
    except TraceError as exc:
        warnings.append(f"{exc}; its summaries are left out")
        return None
    except DAMAGE as exc:
        warnings.append(f"{path}: unreadable columns ({first_line(exc)}); "
                        "its summaries are left out")  # fmt: skip
        return None
    if stream.cut:
        warnings.append(f"{path}: {stream.cut}")
    if stream.corrupt_batches:
        warnings.append(
            f"{path}: batch(es) {', '.join(map(str, stream.corrupt_batches[:5]))} fail their "
            f"checksum: {stream.corrupt_rows:,} summaries left out"
        )
    unvouched = stream.unvouched("summaries") if checksummed else None
    if unvouched:
        warnings.append(unvouched)
    if declared is not None and stream.rows != declared:
        relation = "fewer" if stream.rows < declared else "more"
        warnings.append(
            f"{path}: {stream.rows:,} summaries found, {relation} than the {declared:,} "
            f"the metadata declares"
        )
    kept, bad = check_summaries(table, rank)
    if bad.rows:
        warnings.append(
            f"{path}: {bad.rows:,} of {table.num_rows:,} summaries left out as invalid "
            f"({bad.describe()})"
        )
    return kept


@dataclass(frozen=True)
class RankSeries:
    """One rank's whole run as arrays: its step boundaries and its summaries."""

    rank: int
    steps: np.ndarray  # step ids with a boundary row, increasing
    step_ns: np.ndarray  # end - start of each
    summary_steps: np.ndarray  # step ids with a summary row
    calls: np.ndarray
    comm_ns: np.ndarray
    blocked_ns: np.ndarray
    failed: np.ndarray


def rank_series(root: Path, rank: int, warnings: list[str]) -> RankSeries | None:
    """One rank's whole-run series; ``None`` when it has no summaries file. Problems
    of its steps file are the main reader's to report (:func:`load_trace`): its rows
    that break the format are left out here without a second warning."""
    summary = read_summary(summary_file(root, rank), rank, warnings)
    if summary is None:
        return None
    steps = schema.STEPS.empty_table()
    steps_path = root / f"{schema.rank_stem(rank)}{schema.STEPS_SUFFIX}"
    for version in sorted(schema.READABLE_VERSIONS, reverse=True):  # the file's own
        try:
            written = Stream(steps_path, schema.steps_schema(version)).read_all()
        except (TraceError, *DAMAGE):
            continue
        steps = (
            schema.upgrade_steps(written, version) if version != schema.SCHEMA_VERSION else written
        )
        break
    steps, _ = check_steps(steps, rank)
    steps, _ = check_step_order(steps)
    start = steps.column("start_ns").to_numpy()
    end = steps.column("end_ns").to_numpy()

    def col(name: str) -> np.ndarray:
        return np.asarray(summary.column(name).to_numpy(), dtype=np.int64)

    order = np.argsort(col("step"), kind="stable")
    return RankSeries(
        rank=rank,
        steps=np.asarray(steps.column("step").to_numpy(), dtype=np.int64),
        step_ns=np.asarray(end - start, dtype=np.int64),
        summary_steps=col("step")[order],
        calls=col("calls")[order],
        comm_ns=col("comm_ns")[order],
        blocked_ns=col("blocked_ns")[order],
        failed=col("failed")[order],
    )
