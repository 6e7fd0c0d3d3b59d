"""Chrome/Perfetto trace export: one process track per rank.

Iterations are complete ("X") slices on the rank's first thread. Collectives of one
rank overlap each other when issued asynchronously, which "X" slices on one thread
cannot show (they must nest), so each collective is an async slice ("b"/"e") on the
rank's track, named by op and size, with its group, sequence number, wait and transfer
in ``args``. Times are microseconds from the start of the run. Rows are encoded by
polars expressions, not a Python loop, so large traces export quickly.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from syncpace.analysis.collectives import match, usable_events
from syncpace.trace.reader import Trace


def perfetto_events(trace: Trace) -> list[str]:
    """The trace as JSON-encoded Chrome trace events (one string each)."""
    steps, events = trace.steps, trace.events
    origin = _origin(trace)
    us = 1e-3
    lines = [_json(m) for m in _metadata(trace)]
    if steps.height:
        frame = steps.filter(pl.col("end_ns") >= pl.col("start_ns"), pl.col("start_ns") >= 0)
        lines += (
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
    if events.height:
        lines += _collective_lines(events, origin)
    return lines


def _collective_lines(events: pl.DataFrame, origin: int) -> list[str]:
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
    ).with_row_index("id")
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
    ).struct.json_encode()
    finish = pl.struct(**common, ph=pl.lit("e"), ts=(end - origin) * 1e-3).struct.json_encode()
    encoded = frame.select(b=begin, e=finish)
    return encoded["b"].to_list() + encoded["e"].to_list()


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


def _metadata(trace: Trace) -> list[dict]:
    out = []
    for rank, meta in sorted(trace.meta.items()):
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


def write_perfetto(trace: Trace, out: str | Path) -> Path:
    """Write ``trace`` as a Chrome trace JSON file that Perfetto and chrome://tracing open."""
    path = Path(out)
    lines = perfetto_events(trace)
    with path.open("w") as f:
        f.write('{"displayTimeUnit":"ms","traceEvents":[\n')
        f.write(",\n".join(lines))
        f.write("\n]}\n")
    return path
