"""The hang measurement's input: every collective call each rank recorded plus what the
stall records add (:class:`HangInput`), from a loaded trace or Flight Recorder dumps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from syncpace.trace.reader import Trace
from syncpace.trace.stall import Call, StallRecord

#: Columns of :attr:`HangInput.calls` (collective calls only; point-to-point calls
#: have their own sequence numbers per peer pair and are left out).
CALL_COLUMNS = (
    "rank",
    "group",
    "seq",
    "op",
    "bytes",
    "dtype",
    "step",
    "enter_ns",
    "exit_ns",
    "status",
    "error",
    "stalled",
)
_SCHEMA = {
    "rank": pl.Int64,
    "group": pl.Utf8,
    "seq": pl.Int64,
    "op": pl.Utf8,
    "bytes": pl.Int64,
    "dtype": pl.Utf8,
    "step": pl.Int64,
    "enter_ns": pl.Int64,
    "exit_ns": pl.Int64,
    "status": pl.Utf8,
    "error": pl.Utf8,
    "stalled": pl.Boolean,
}


@dataclass(frozen=True)
class HangInput:
    run: str
    world_size: int
    calls: pl.DataFrame
    stalls: dict[int, StallRecord]
    meta: dict[int, dict[str, Any]]
    groups: dict[str, tuple[int, ...]]
    source: str = "trace"

    def host(self, rank: int) -> str:
        meta = self.meta.get(rank) or {}
        stall = self.stalls.get(rank)
        return str(meta.get("host") or (stall.host if stall else "") or "")

    @property
    def present(self) -> set[int]:
        return set(self.meta) | set(self.stalls)


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=_SCHEMA) if rows else pl.DataFrame(schema=_SCHEMA)


def _call_row(rank: int, c: Call, stalled: bool) -> dict[str, Any]:
    return {
        "rank": rank,
        "group": c.group,
        "seq": c.seq,
        "op": c.op,
        "bytes": c.bytes,
        "dtype": c.dtype,
        "step": c.step,
        "enter_ns": c.enter_ns,
        "exit_ns": c.exit_ns,
        "status": c.status,
        "error": c.error,
        "stalled": stalled,
    }


def stall_calls(stalls: dict[int, StallRecord]) -> pl.DataFrame:
    """The calls the stall records know of: in flight, failed, last completed."""
    rows = []
    for rank, rec in stalls.items():
        stalled = rec.state in ("stalled", "failed")
        for c in rec.in_flight:
            if c.peer < 0:
                rows.append(_call_row(rank, c, stalled))
        if rec.failed is not None and rec.failed.peer < 0:
            rows.append(_call_row(rank, rec.failed, False))
        for c in rec.last_completed.values():
            if c.peer < 0:
                rows.append(_call_row(rank, c, False))
    return _frame(rows)


def hang_input(trace: Trace) -> HangInput:
    """The hang diagnosis' input from a loaded trace and its stall records."""
    sources = {str(m.get("source", "")) for m in trace.meta.values()}
    source = "flight_recorder" if sources == {"flight_recorder"} else "trace"
    events = trace.events
    recorded = (
        events.filter((pl.col("peer") < 0) & (pl.col("seq") >= 0))
        .select(*CALL_COLUMNS[:-1], pl.lit(False).alias("stalled"))
        .cast(_SCHEMA)  # type: ignore[arg-type]
        if events.height
        else _frame([])
    )
    stalls = dict(trace.stalls)
    if not stalls:  # the common case: a run that never stalled
        return HangInput(
            run=str(trace.path),
            world_size=trace.world_size,
            calls=recorded,
            stalls={},
            meta=dict(trace.meta),
            groups=group_members(trace.meta, trace.world_size),
            source=source,
        )
    known = stall_calls(stalls)
    # A recorded event is final; a stall record's view of the same call fills in the
    # calls still in flight when the trace was read, and says which ones were stuck.
    keys = ["rank", "group", "seq"]
    stuck = known.filter(pl.col("stalled")).select(keys).unique().with_columns(_s=pl.lit(True))
    recorded = (
        recorded.join(stuck, on=keys, how="left")
        .with_columns(pl.col("stalled") | pl.col("_s").fill_null(False))
        .drop("_s")
    )
    calls = pl.concat([recorded, known], how="vertical").unique(
        subset=keys, keep="first", maintain_order=True
    )
    return HangInput(
        run=str(trace.path),
        world_size=trace.world_size,
        calls=calls,
        stalls=stalls,
        meta=dict(trace.meta),
        groups=group_members(trace.meta, trace.world_size),
        source=source,
    )


def group_members(meta: dict[int, dict[str, Any]], world_size: int) -> dict[str, tuple[int, ...]]:
    """Process group -> its global ranks, from the metadata (``"0"`` is everyone)."""
    groups: dict[str, tuple[int, ...]] = {"0": tuple(range(world_size))}
    for m in meta.values():
        for name, spec in (m.get("groups") or {}).items():
            ranks = spec.get("ranks") if isinstance(spec, dict) else None
            if isinstance(ranks, list) and ranks and str(name) not in groups:
                groups[str(name)] = tuple(int(r) for r in ranks if isinstance(r, int))
    return groups
