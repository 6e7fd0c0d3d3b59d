"""From per-rank collectives read out of another tool's files to a syncpace trace.

Every converter hands over, per rank, the collectives it found (in the trace's columns,
timestamps on that rank's own clock, plus ``call_ns``: when the host issued the call)
and how that rank's iterations are delimited. What is common to all formats happens
here, in this order:

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
   metadata saying where the data came from and what the source could not tell.

Memory holds the collectives (a few columns each), never the source's other events.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from syncpace import __version__
from syncpace.errors import ConfigError, TraceError
from syncpace.importers import clocks
from syncpace.importers.config import ImportConfig
from syncpace.trace import schema
from syncpace.trace.writer import write_table

#: How the converters mark a column they could not fill.
UNKNOWN = -1

#: Columns a converter hands over: the trace's events, minus ``rank``/``step`` and the
#: device times (a converted trace puts the source's own times in ``enter_ns`` and
#: ``exit_ns``, ``timing`` naming which), plus the host time of the call, which places
#: it in its iteration.
INPUT_COLUMNS: dict[str, Any] = {
    name: dtype
    for name, dtype in pl.from_arrow(schema.EVENTS.empty_table()).schema.items()  # type: ignore[union-attr]
    if name not in ("rank", "step") and not name.startswith("device_")
} | {"call_ns": pl.Int64}

#: How a rank's iterations are delimited.
STEP_RULES = (
    "spans",  # one span per iteration (ProfilerStep#N): a call belongs to the span it is in
    "ends",  # iteration ends (optimizer.step()): a call's step counts the ends before it
    "windows",  # fixed windows of the common timeline (sources that record no iterations)
    "none",  # nothing: the whole trace is one iteration
)


@dataclass
class RankInput:
    """What a converter read for one rank."""

    rank: int
    events: pl.DataFrame  # INPUT_COLUMNS
    #: step, start_ns, end_ns on the rank's clock (for "spans" and "ends")
    steps: pl.DataFrame | None = None
    step_rule: str = "none"
    host: str | None = None
    pid: int | None = None
    device: str = "cpu"
    backend: str = "unknown"
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    extra_meta: dict[str, Any] = field(default_factory=dict)


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


def prepare_out_dir(out: str | os.PathLike[str], overwrite: bool) -> Path:
    """The output directory, created; an existing trace in it is refused or removed."""
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir}: exists and is not a directory")
    existing = sorted(out_dir.glob("rank-*")) if out_dir.exists() else []
    if existing and not overwrite:
        raise ConfigError(
            f"{out_dir}: already holds a trace ({len(existing)} rank files); "
            "choose another --out or add --force"
        )
    for path in existing:
        if path.suffix in (".json", ".arrow", ".tmp"):
            path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


_STEP_COLUMNS = {"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}

# Steps ---------------------------------------------------------------------------------


def _steps_of(r: RankInput) -> tuple[np.ndarray, pl.DataFrame]:
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


def _clock_plan(inputs: list[RankInput], mode: str) -> dict[int, str]:
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


def write_trace(
    inputs: list[RankInput],
    out_dir: str | os.PathLike[str],
    *,
    fmt: str,
    source: str,
    config: ImportConfig,
    world_size: int | None = None,
    resolution_ns: int = 1_000,
    missing: list[str] | None = None,
    warnings: list[str] | None = None,
    notes: dict[str, Any] | None = None,
    input_bytes: int = 0,
    clock_methods: dict[int, str] | None = None,
) -> ImportResult:
    """Write ``inputs`` as a syncpace run directory (see the module docstring)."""
    if not inputs:
        raise TraceError(out_dir, "nothing to write: no rank's data was found")
    inputs = sorted(inputs, key=lambda r: r.rank)
    ranks = [r.rank for r in inputs]
    if len(set(ranks)) != len(ranks):
        raise TraceError(out_dir, f"two sources claim the same rank: {ranks}")
    world = world_size or max(ranks) + 1
    if max(ranks) >= world:
        raise TraceError(out_dir, f"rank {max(ranks)} does not fit world size {world}")
    warnings = list(warnings or [])
    missing = list(missing or [])
    frames, step_tables = [], {}
    for r in inputs:
        step, table = _steps_of(r)
        frames.append(
            r.events.with_columns(
                rank=pl.lit(r.rank, pl.Int32), step=pl.Series(step, dtype=pl.Int64)
            )
        )
        step_tables[r.rank] = table
    ev = pl.concat(frames, how="vertical") if frames else empty_events()
    ev = assign_seq(_with_pair(ev))

    plan = _clock_plan(inputs, config.clocks)
    plan.update(clock_methods or {})
    sym = clocks.symmetric_instances(ev)
    est = clocks.estimate_offsets(sym, reference=ranks[0], resolution_ns=resolution_ns)
    clock_meta = {r: _clock_meta(r, plan[r], est, resolution_ns) for r in ranks}
    offsets = {r: int(m["offset_ns"] or 0) for r, m in clock_meta.items()}
    if any(offsets.values()):
        shift = pl.col("rank").replace_strict(offsets, default=0, return_dtype=pl.Int64)
        ev = ev.with_columns(
            [
                pl.when(pl.col(c) >= 0).then(pl.col(c) + shift).otherwise(pl.col(c))
                for c in ("enter_ns", "exit_ns", "wait_ns")
            ]
        )
        for r in ranks:
            table = step_tables[r]
            if offsets[r] and table.height:
                step_tables[r] = table.with_columns(
                    pl.col("start_ns") + offsets[r], pl.col("end_ns") + offsets[r]
                )
    if any(r.step_rule == "windows" for r in inputs):
        ev, windows = window_steps(ev, int(config.window_ms * 1e6))
        for r in inputs:
            if r.step_rule == "windows":
                step_tables[r.rank] = windows
    if any(m["uncertainty_ns"] is None for r, m in clock_meta.items() if r != ranks[0]):
        missing.append("clock offsets of some ranks (their skews are not trustworthy)")

    out = prepare_out_dir(out_dir, config.overwrite)
    timing_counts = dict(ev.group_by("timing").len().sort("timing").iter_rows())
    base_meta = {
        "schema": schema.SCHEMA_NAME,
        "schema_version": schema.SCHEMA_VERSION,
        "tool_version": __version__,
        "world_size": world,
        "topology": {},
        "config": {"import": _config_json(config)},
        "finished": True,
        "dropped_events": 0,
        "source": source,
    }
    step_source = inputs[0].step_rule
    total_steps = 0
    for r in inputs:
        own = ev.filter(pl.col("rank") == r.rank).sort("enter_ns")
        steps = step_tables[r.rank]
        stem = out / schema.rank_stem(r.rank)
        write_table(Path(f"{stem}{schema.EVENTS_SUFFIX}"), _events_table(own))
        write_table(Path(f"{stem}{schema.STEPS_SUFFIX}"), _steps_table(r.rank, steps))
        total_steps = max(total_steps, steps.height)
        meta = dict(base_meta)
        meta.update(
            rank=r.rank,
            host=r.host or "unknown",
            node_rank=None,
            local_rank=None,
            local_world_size=None,
            pid=r.pid,
            device=r.device,
            backend=r.backend,
            clock=clock_meta[r.rank],
            groups=r.groups,
            started_ns=int(steps["start_ns"].min()) if steps.height else None,  # type: ignore[arg-type]
            events_written=own.height,
            steps_written=steps.height,
        )
        meta["import"] = {
            "format": fmt,
            "files": r.files,
            "timing": dict(own.group_by("timing").len().sort("timing").iter_rows()),
            "steps_from": r.step_rule,
            "missing": sorted(set(missing + r.extra_meta.pop("missing", []))),
            "warnings": warnings[:50],
            **(notes or {}),
            **r.extra_meta,
        }
        Path(f"{stem}{schema.META_SUFFIX}").write_text(_meta_text(meta))
    per_op = dict(ev.group_by("op").len().sort("op").iter_rows())
    per_group = dict(ev.group_by("group").len().sort("group").iter_rows())
    known = [m["uncertainty_ns"] for m in clock_meta.values() if m["uncertainty_ns"] is not None]
    clock_summary = {
        "methods": {str(r): m["method"] for r, m in clock_meta.items()},
        "max_abs_offset_ns": max((abs(v) for v in offsets.values()), default=0),
        "max_uncertainty_ns": max(known) if known else None,
        "unaligned_ranks": [r for r, m in clock_meta.items() if m["uncertainty_ns"] is None],
    }
    return ImportResult(
        out_dir=out,
        format=fmt,
        world_size=world,
        ranks=tuple(ranks),
        events=ev.height,
        steps=total_steps,
        events_per_op=per_op,
        groups=per_group,
        timing=timing_counts,
        step_source=step_source,
        clock=clock_summary,
        missing=tuple(sorted(set(missing))),
        warnings=tuple(warnings),
        input_files=sum(len(r.files) for r in inputs),
        input_bytes=input_bytes,
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
