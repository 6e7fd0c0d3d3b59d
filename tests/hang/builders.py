"""Traces built by hand for the hang tests: what a 4-rank job leaves, events (the trace
schema) and stall records. Times are seconds after T0 on a common clock."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from syncpace.trace import schema
from syncpace.trace.reader import Trace
from syncpace.trace.stall import Call, Frame, StallRecord, ThreadStack

S = 1_000_000_000
T0 = 1_764_590_000 * S  # an afternoon in December, as ns since the epoch
WORLD = 4
USER = Frame("/job/train.py", 88, "train_step", "batch = next(loader)")
LOADER = Frame("/env/site-packages/torch/utils/data/dataloader.py", 733, "__next__", "")


def ev(
    rank,
    seq,
    t,
    status="completed",
    op="all_reduce",
    nbytes=4096,
    step=None,
    group="0",
    error=None,
    dtype="float32",
):
    enter = T0 + int(t * S)
    exit_ns = {"completed": enter + S // 100, "pending": -1}.get(status, enter + 3 * S)
    step = seq if step is None else step
    return (
        rank,
        step,
        group,
        WORLD,
        seq,
        op,
        nbytes,
        dtype,
        -1,
        enter,
        exit_ns,
        "wait",
        status,
        error,
        -1,
    )


def frame(rows: list[tuple]) -> pl.DataFrame:
    written = schema.events_schema(2)  # these runs declare schema version 2
    data = {c: [r[i] for r in rows] for i, c in enumerate(written.names)}
    table = pl.from_arrow(written.empty_table())
    return pl.concat([table, pl.DataFrame(data, schema=table.schema)]) if rows else table


def meta(rank: int, finished: bool = False, host: str = "") -> dict:
    return {
        "schema": schema.SCHEMA_NAME,
        "schema_version": 2,
        "rank": rank,
        "world_size": WORLD,
        "host": host or f"h{rank // 2}",
        "finished": finished,
        "source": "torch",
        "groups": {"0": {"ranks": list(range(WORLD))}},
    }


def stall(
    rank,
    kind="in_collective",
    state="stalled",
    in_flight=(),
    frames=(USER,),
    written=10.0,
    since=5.0,
):
    return StallRecord(
        rank=rank,
        world_size=WORLD,
        state=state,
        kind=kind,
        since_ns=T0 + int(since * S),
        written_ns=T0 + int(written * S),
        host=f"h{rank // 2}",
        threshold_s=1.0,
        in_flight=tuple(in_flight),
        threads=(ThreadStack("MainThread", 1, tuple(frames), main=True),),
    )


def inflight(seq, t, op="all_reduce", nbytes=4096, group="0"):
    return Call(group, seq, op, nbytes, "float32", enter_ns=T0 + int(t * S))


def trace(events, stalls=None, ranks=range(WORLD), finished=(), path="run") -> Trace:
    steps = pl.from_arrow(schema.STEPS.empty_table())
    return Trace(
        path=Path(path),
        world_size=WORLD,
        meta={r: meta(r, r in finished) for r in ranks},
        events=frame(events),
        steps=steps,
        stalls=dict(stalls or {}),
    )


def healthy_prefix(n=5, ranks=range(WORLD)):
    return [ev(r, s, s * 0.1) for r in ranks for s in range(n)]
