"""From per-rank collectives read out of another tool's files to a syncpace trace.

Every converter hands over, per rank, a :class:`~syncpace.importers.contract.RankFrame`:
the collectives it found (in the trace's columns, timestamps on that rank's own clock,
plus ``call_ns``: when the host issued the call) and how that rank's iterations are
delimited. What is common to all formats happens here (:func:`write_trace`), in this
order:

1. **steps**: each call gets the iteration it was issued in (by its own host clock);
2. **sequence numbers** where the source has none: per group (per peer pair for
   point-to-point), the k-th call of iteration N gets ``base(N) + k``, ``base`` counting
   the most calls any rank made in earlier iterations, so a call that is missing on one
   rank (the edge of a profiling window) shifts nothing beyond its own iteration;
3. **clocks**: offsets of ranks on other hosts (or all, on request) estimated from the
   ends of symmetric collectives (:mod:`~syncpace.importers.clocks`), applied, and
   recorded with their uncertainty; ranks whose offset cannot be known keep
   ``uncertainty_ns: null``, which the diagnosis reads as "skews not trustworthy";
4. the run directory in the trace schema, with an ``import`` block in each rank's
   metadata saying where the data came from and what the source could not tell, and
   the stall record of a rank that has one, moved with its clock.

Memory holds the collectives (a few columns each), never the source's other events.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from syncpace import __version__
from syncpace.errors import ConfigError, TraceError
from syncpace.importers import clocks
from syncpace.importers.config import ImportConfig
from syncpace.importers.contract import INPUT_COLUMNS, Conversion, RankFrame, Request
from syncpace.trace import schema
from syncpace.trace.stall import Call, StallRecord, stall_path, write_stall
from syncpace.trace.writer import write_table


@dataclass(frozen=True)
class ImportResult:
    """What a conversion wrote, and what it could not know."""

    out_dir: Path
    format: str
    world_size: int
    ranks: tuple[int, ...]
    events: int
    steps: int
    events_per_op: dict[str, int]
    groups: dict[str, int]
    timing: dict[str, int]
    step_source: str
    clock: dict[str, Any]
    missing: tuple[str, ...]
    warnings: tuple[str, ...]
    input_files: int
    input_bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "out_dir": str(self.out_dir),
            "format": self.format,
            "world_size": self.world_size,
            "ranks": list(self.ranks),
            "events": self.events,
            "steps": self.steps,
            "events_per_op": self.events_per_op,
            "groups": self.groups,
            "timing": self.timing,
            "step_source": self.step_source,
            "clock": self.clock,
            "missing": list(self.missing),
            "warnings": list(self.warnings),
            "input_files": self.input_files,
            "input_bytes": self.input_bytes,
        }


def empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=INPUT_COLUMNS)


def check_out_dir(out: str | os.PathLike[str], overwrite: bool) -> Path:
    """The output directory, refused before anything is read when it is not a directory
    or already holds a trace (unless ``overwrite``); nothing is changed yet."""
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir}: exists and is not a directory")
    existing = sorted(out_dir.glob("rank-*")) if out_dir.exists() else []
    if existing and not overwrite:
        raise ConfigError(
            f"{out_dir}: already holds a trace ({len(existing)} rank files); "
            "choose another --out or add --force to replace it"
        )
    return out_dir


def prepare_out_dir(out: str | os.PathLike[str], overwrite: bool) -> Path:
    """The output directory, created; an existing trace in it is refused or removed."""
    out_dir = check_out_dir(out, overwrite)
    for path in sorted(out_dir.glob("rank-*")) if out_dir.exists() else []:
        if path.suffix in (".json", ".arrow", ".tmp"):
            path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


_STEP_COLUMNS = {"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}

# Steps ---------------------------------------------------------------------------------


def _steps_of(r: RankFrame) -> tuple[np.ndarray, pl.DataFrame]:
    """Per event of ``r``: its step; and the rank's steps table."""
    call = r.events["call_ns"].to_numpy()
    steps = r.steps if r.steps is not None else pl.DataFrame()
    if r.step_rule == "spans" and steps.height:
        steps = steps.sort("start_ns")
        starts, ends = steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy()
        numbers = steps["step"].to_numpy()
        idx = np.searchsorted(starts, call, side="right") - 1
        step = numbers[np.clip(idx, 0, len(numbers) - 1)].copy()
        step[idx < 0] = max(int(numbers[0]) - 1, 0)
        after = (idx == len(numbers) - 1) & (call > ends[-1])
        step[after] = int(numbers[-1]) + 1
        return step.astype(np.int64), steps
    if r.step_rule == "ends" and steps.height:
        steps = steps.sort("end_ns")
        ends = steps["end_ns"].to_numpy()
        first = int(steps["step"][0])
        step = first + np.searchsorted(ends, call, side="left")
        return step.astype(np.int64), steps
    if r.step_rule == "windows":  # placed after the clocks are aligned (window_steps)
        return np.zeros(len(call), dtype=np.int64), pl.DataFrame()
    # "none": one iteration from the first call to the last completion
    step = np.zeros(len(call), dtype=np.int64)
    if len(call) == 0:
        return step, pl.DataFrame(schema=_STEP_COLUMNS)
    exits = r.events["exit_ns"].to_numpy()
    end = int(max(call.max(), exits.max()))
    table = pl.DataFrame({"step": [0], "start_ns": [int(call.min())], "end_ns": [end]})
    return step, table


def window_steps(ev: pl.DataFrame, window_ns: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Steps as fixed windows of the common timeline, for sources that record no
    iterations: every member of an instance gets the window its earliest completion falls
    in (so an instance is never split across two steps). Returns the events and the
    windows (``step``, ``start_ns``, ``end_ns``)."""
    when = pl.when(pl.col("exit_ns") >= 0).then(pl.col("exit_ns")).otherwise(pl.col("enter_ns"))
    ev = ev.with_columns(_when=when.min().over("group", "pair", "seq"))
    t0 = int(ev["_when"].min()) if ev.height else 0  # type: ignore[arg-type]
    ev = ev.with_columns(step=((pl.col("_when") - t0) // window_ns).clip(lower_bound=0)).drop(
        "_when"
    )
    count = int(ev["step"].max()) + 1 if ev.height else 0  # type: ignore[arg-type]
    starts = t0 + np.arange(count, dtype=np.int64) * window_ns
    table = pl.DataFrame({"step": np.arange(count, dtype=np.int64), "start_ns": starts})
    return ev, table.with_columns(end_ns=pl.col("start_ns") + window_ns)


# Sequence numbers ----------------------------------------------------------------------


_P2P = ("send", "recv")


def _with_pair(ev: pl.DataFrame) -> pl.DataFrame:
    is_p2p = pl.col("op").is_in(_P2P) & (pl.col("peer") >= 0)
    lo = pl.min_horizontal("rank", "peer").cast(pl.Int64)
    hi = pl.max_horizontal("rank", "peer").cast(pl.Int64)
    return ev.with_columns(pair=pl.when(is_p2p).then(lo * (1 << 32) + hi).otherwise(-1))


def assign_seq(ev: pl.DataFrame) -> pl.DataFrame:
    """Fill ``seq`` where it is -1 (see the module docstring); ``ev`` has ``rank``,
    ``step``, ``call_ns`` and ``pair``."""
    todo = ev.filter(pl.col("seq") < 0)
    if todo.height == 0:
        return ev
    keys = ["group", "pair", "step"]
    todo = todo.sort("rank", "call_ns").with_columns(
        i=pl.int_range(pl.len(), dtype=pl.Int64).over("rank", *keys)
    )
    per_step = (
        todo.group_by("rank", *keys)
        .len()
        .group_by(keys)
        .agg(k=pl.col("len").max().cast(pl.Int64))
        .sort(keys)
        .with_columns(base=pl.col("k").cum_sum().over("group", "pair") - pl.col("k"))
    )
    todo = (
        todo.join(per_step.select(*keys, "base"), on=keys, how="left")
        .with_columns(seq=pl.col("base") + pl.col("i"))
        .drop("i", "base")
    )
    return pl.concat([ev.filter(pl.col("seq") >= 0), todo], how="vertical")


# Clocks --------------------------------------------------------------------------------


def _clock_plan(inputs: list[RankFrame], mode: str) -> dict[int, str]:
    """Per rank: ``reference``, ``same_host`` (trusted: one clock), ``trusted`` (as
    recorded, not measured) or ``estimate``."""
    reference = min(r.rank for r in inputs)
    host0 = next(r.host for r in inputs if r.rank == reference)
    plan = {}
    for r in inputs:
        if r.rank == reference:
            plan[r.rank] = "reference"
        elif mode == "estimate":
            plan[r.rank] = "estimate"
        elif host0 is not None and r.host == host0:
            plan[r.rank] = "same_host"
        elif mode == "trust":
            plan[r.rank] = "trusted"
        else:
            plan[r.rank] = "estimate"
    return plan


def _clock_meta(
    rank: int, plan: str, est: clocks.OffsetEstimate, resolution_ns: int
) -> dict[str, Any]:
    sample = est.sample(rank)
    # ``samples`` are the tracer's round trips (local time, RTT): none here. The estimate
    # from the collectives' ends is kept beside them, also where the clock is trusted.
    meta: dict[str, Any] = {"method": plan, "samples": [], "estimate": sample}
    if plan == "reference":
        meta.update(offset_ns=0, uncertainty_ns=resolution_ns)
    elif plan == "same_host":
        # One host, one system clock: the profiler's timestamps need no offset; the
        # estimate from the trace is kept in samples as a check.
        meta.update(offset_ns=0, uncertainty_ns=resolution_ns)
    elif plan == "common_end":
        # Every member of an instance was given the same end: skews come from durations
        # measured on each rank's own device, not from comparing clocks.
        meta.update(offset_ns=0, uncertainty_ns=resolution_ns)
    elif plan == "trusted":
        meta.update(offset_ns=0, uncertainty_ns=None)
        meta["error"] = "clocks of other hosts taken as recorded (not measured)"
    elif sample is not None:
        meta.update(offset_ns=sample["offset_ns"], uncertainty_ns=sample["uncertainty_ns"])
    else:
        meta.update(offset_ns=0, uncertainty_ns=None)
        meta["error"] = (
            f"too few complete symmetric collectives shared with other ranks "
            f"(need {clocks.MIN_INSTANCES}) to estimate this rank's clock offset"
        )
    return meta


# The whole conversion ------------------------------------------------------------------


@dataclass(frozen=True)
class _Timeline:
    """Every rank's events and steps on rank 0's clock, with each rank's clock metadata."""

    events: pl.DataFrame
    steps: dict[int, pl.DataFrame]
    clocks: dict[int, dict[str, Any]]

    @property
    def offsets(self) -> dict[int, int]:
        return {r: int(m["offset_ns"] or 0) for r, m in self.clocks.items()}


def write_trace(conversion: Conversion, request: Request, out_dir: Path) -> ImportResult:
    """Write what ``conversion`` read as a syncpace run directory in ``out_dir`` (see the
    module docstring)."""
    frames = _checked(conversion, out_dir)
    world = conversion.world_size or frames[-1].rank + 1
    line = _timeline(frames, conversion, request.config)
    missing = list(conversion.missing)
    reference = frames[0].rank
    if any(m["uncertainty_ns"] is None for r, m in line.clocks.items() if r != reference):
        missing.append("clock offsets of some ranks (their skews are not trustworthy)")
    written = _Written(
        out=prepare_out_dir(out_dir, request.config.overwrite),
        request=request,
        conversion=conversion,
        world=world,
        missing=tuple(missing),
    )
    for frame in frames:
        written.rank(frame, line)
    return written.result(frames, line)


def _checked(conversion: Conversion, out_dir: Path) -> list[RankFrame]:
    """The ranks in order, refused when there are none, two of one rank, or one beyond
    the world."""
    if not conversion.ranks:
        raise TraceError(out_dir, "nothing to write: no rank's data was found")
    frames = sorted(conversion.ranks, key=lambda r: r.rank)
    ranks = [r.rank for r in frames]
    if len(set(ranks)) != len(ranks):
        raise TraceError(out_dir, f"two sources claim the same rank: {ranks}")
    world = conversion.world_size or max(ranks) + 1
    if max(ranks) >= world:
        raise TraceError(out_dir, f"rank {max(ranks)} does not fit world size {world}")
    return frames


def _numbered(frames: list[RankFrame]) -> tuple[pl.DataFrame, dict[int, pl.DataFrame]]:
    """Every rank's events with its rank, step and sequence numbers; its steps table."""
    parts, tables = [], {}
    for r in frames:
        step, table = _steps_of(r)
        parts.append(
            r.events.with_columns(
                rank=pl.lit(r.rank, pl.Int32), step=pl.Series(step, dtype=pl.Int64)
            )
        )
        tables[r.rank] = table
    ev = pl.concat(parts, how="vertical") if parts else empty_events()
    return assign_seq(_with_pair(ev)), tables


def _timeline(frames: list[RankFrame], conversion: Conversion, config: ImportConfig) -> _Timeline:
    """Steps and sequence numbers, then the clocks estimated and applied, then the
    windows of sources that record no iterations (they need the common timeline)."""
    ev, tables = _numbered(frames)
    plan = _clock_plan(frames, config.clocks) | dict(conversion.clock_methods)
    res = conversion.resolution_ns
    est = clocks.estimate_offsets(
        clocks.symmetric_instances(ev), reference=frames[0].rank, resolution_ns=res
    )
    line = _Timeline(
        ev, tables, {r.rank: _clock_meta(r.rank, plan[r.rank], est, res) for r in frames}
    )
    line = _shifted(line)
    if any(r.step_rule == "windows" for r in frames):
        ev, windows = window_steps(line.events, int(config.window_ms * 1e6))
        tables = dict(line.steps)
        for r in frames:
            if r.step_rule == "windows":
                tables[r.rank] = windows
        line = _Timeline(ev, tables, line.clocks)
    return line


def _shifted(line: _Timeline) -> _Timeline:
    """``line`` moved onto rank 0's clock by each rank's offset."""
    offsets = line.offsets
    if not any(offsets.values()):
        return line
    shift = pl.col("rank").replace_strict(offsets, default=0, return_dtype=pl.Int64)
    ev = line.events.with_columns(
        [
            pl.when(pl.col(c) >= 0).then(pl.col(c) + shift).otherwise(pl.col(c))
            for c in ("enter_ns", "exit_ns", "wait_ns")
        ]
    )
    tables = dict(line.steps)
    for r, table in line.steps.items():
        if offsets[r] and table.height:
            tables[r] = table.with_columns(
                pl.col("start_ns") + offsets[r], pl.col("end_ns") + offsets[r]
            )
    return _Timeline(ev, tables, line.clocks)


@dataclass(frozen=True)
class _Written:
    """The run directory being written: what every rank's metadata shares."""

    out: Path
    request: Request
    conversion: Conversion
    world: int
    missing: tuple[str, ...]

    def rank(self, frame: RankFrame, line: _Timeline) -> None:
        """One rank's events, steps, metadata and stall record."""
        own = line.events.filter(pl.col("rank") == frame.rank).sort("enter_ns")
        steps = line.steps[frame.rank]
        stem = self.out / schema.rank_stem(frame.rank)
        write_table(Path(f"{stem}{schema.EVENTS_SUFFIX}"), _events_table(own))
        write_table(Path(f"{stem}{schema.STEPS_SUFFIX}"), _steps_table(frame.rank, steps))
        meta = self._meta(frame, own, steps, line.clocks[frame.rank])
        Path(f"{stem}{schema.META_SUFFIX}").write_text(_meta_text(meta))
        if frame.stall is not None:
            offset = line.offsets[frame.rank]
            write_stall(stall_path(self.out, frame.rank), shifted_stall(frame.stall, offset))

    def _meta(
        self, frame: RankFrame, own: pl.DataFrame, steps: pl.DataFrame, clock: dict[str, Any]
    ) -> dict[str, Any]:
        conversion, config = self.conversion, self.request.config
        return {
            "schema": schema.SCHEMA_NAME,
            "schema_version": schema.SCHEMA_VERSION,
            "tool_version": __version__,
            "world_size": self.world,
            "topology": {},
            "config": {"import": _config_json(config)},
            "finished": True,
            "dropped_events": 0,
            "source": conversion.source or self.request.format,
            "rank": frame.rank,
            "host": frame.host or "unknown",
            "node_rank": None,
            "local_rank": None,
            "local_world_size": None,
            "pid": frame.pid,
            "device": frame.device,
            "backend": frame.backend,
            "clock": clock,
            "groups": dict(frame.groups),
            "started_ns": int(steps["start_ns"].min()) if steps.height else None,  # type: ignore[arg-type]
            "events_written": own.height,
            "steps_written": steps.height,
            "import": {
                "format": self.request.format,
                "files": list(frame.files),
                "timing": _counts(own, "timing"),
                "steps_from": frame.step_rule,
                "missing": sorted(set(self.missing)),
                "warnings": list(conversion.warnings)[:50],
                **conversion.notes,
                **frame.notes,
            },
        }

    def result(self, frames: list[RankFrame], line: _Timeline) -> ImportResult:
        ev, clock_meta = line.events, line.clocks
        known = [
            m["uncertainty_ns"] for m in clock_meta.values() if m["uncertainty_ns"] is not None
        ]
        clock_summary = {
            "methods": {str(r): m["method"] for r, m in clock_meta.items()},
            "max_abs_offset_ns": max((abs(v) for v in line.offsets.values()), default=0),
            "max_uncertainty_ns": max(known) if known else None,
            "unaligned_ranks": [r for r, m in clock_meta.items() if m["uncertainty_ns"] is None],
        }
        return ImportResult(
            out_dir=self.out,
            format=self.request.format,
            world_size=self.world,
            ranks=tuple(r.rank for r in frames),
            events=ev.height,
            steps=max(t.height for t in line.steps.values()),
            events_per_op=_counts(ev, "op"),
            groups=_counts(ev, "group"),
            timing=_counts(ev, "timing"),
            step_source=frames[0].step_rule,
            clock=clock_summary,
            missing=tuple(sorted(set(self.missing))),
            warnings=tuple(self.conversion.warnings),
            input_files=sum(len(r.files) for r in frames),
            input_bytes=self.request.input_bytes,
        )


def _counts(ev: pl.DataFrame, column: str) -> dict[Any, int]:
    return dict(ev.group_by(column).len().sort(column).iter_rows())


def shifted_stall(record: StallRecord, offset_ns: int) -> StallRecord:
    """``record`` with its times moved by ``offset_ns`` (onto rank 0's clock)."""

    def t(ns: int) -> int:
        return ns + offset_ns if ns >= 0 else ns

    def call(c: Call) -> Call:
        return dataclasses.replace(c, enter_ns=t(c.enter_ns), exit_ns=t(c.exit_ns))

    return dataclasses.replace(
        record,
        since_ns=t(record.since_ns),
        written_ns=t(record.written_ns),
        in_flight=tuple(call(c) for c in record.in_flight),
        last_completed={g: call(c) for g, c in record.last_completed.items()},
    )


def _config_json(config: ImportConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in config.__slots__}  # type: ignore[attr-defined]


def _events_table(ev: pl.DataFrame) -> pa.Table:
    return schema.events_table(ev.to_arrow())


def _steps_table(rank: int, steps: pl.DataFrame) -> pa.Table:
    if steps.height == 0:
        return schema.STEPS.empty_table()
    cols = steps.select(
        pl.lit(rank, pl.Int32).alias("rank"),
        pl.col("step").cast(pl.Int64),
        pl.col("start_ns").cast(pl.Int64),
        pl.col("end_ns").cast(pl.Int64),
        pl.lit(0, pl.Int64).alias("pacing_delay_ns"),
    )
    return schema.steps_table(cols.to_arrow())


def _meta_text(meta: dict[str, Any]) -> str:
    """The metadata as strict JSON with its checksum, as the tracer writes it."""
    plain = json.loads(json.dumps(meta, default=str, allow_nan=False))
    plain[schema.CHECKSUM_KEY] = schema.meta_checksum(plain)
    return json.dumps(plain, indent=1, sort_keys=True) + "\n"
