"""What the Perfetto export adds beside the ranks' slices: counter tracks of the
network counters the run directory holds, and flows joining one collective across
its ranks.

**Counter tracks** ("C" events). The host samplers' network series
(``host-*.counters.arrow``: NIC, queueing discipline, InfiniBand) become one process
per host, named ``host H: network counters``, a track per device and counter
(``eth0 tx_bytes``); the emulated fabric's link counters (``fabric-links.arrow``) one
process, ``fabric links``, a track per link direction and counter
(``uplink0 leaf0→spine bytes``). The values are the files' own, unconverted (cumulative
counters stay cumulative: Perfetto's counter tracks show them as a rate on demand);
unknown readings (-1) are left out. Times are microseconds from the same origin as
the slices: the counters are on rank 0's clock, as the trace is.

**Flows** (Perfetto's JSON flow events, version 2: ``bind_id`` with ``flow_out`` /
``flow_in`` on a slice's begin). One flow per collective instance — the same group
and sequence number on every rank — chaining its ranks' slices in the order they
entered the call: it leaves the first to arrive and ends at the last, the rank the
others waited for. A call made by one rank alone has no flow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa

from syncpace.trace import schema
from syncpace.trace.reader import load_host_files

#: Host counter sources that describe the network (schema.COUNTER_SOURCES).
NETWORK_SOURCES = ("nic", "qdisc", "ib", "ib_hw")
#: Counters of each fabric link direction, as the links file names them.
LINK_COUNTERS = ("bytes", "packets", "drops", "overlimits", "backlog_bytes", "rate_bps")
#: Process ids of the counter tracks: far above any rank's.
HOST_PID_BASE = 1 << 30
#: Process sort index of the counter tracks: after every rank.
SORT_AFTER_RANKS = 1 << 20

#: The fields a collective's begin event carries for its flow (see :func:`with_flows`).
FLOW_FIELDS = {
    "bind_id": pl.col("flow_id"),
    "flow_out": pl.col("flow_out"),
    "flow_in": pl.col("flow_in"),
}


def with_flows(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (one row per rank's call: ``instance``, ``enter``, ``id``, the slice id
    unique across the export) with ``flow_id``, ``flow_out`` and ``flow_in``: per
    instance of two ranks or more, the chain of its calls by entry (ties by slice id,
    the order the slices are written, so a viewer that keeps file order for equal
    times reads the chain as written)."""
    by = pl.col("instance")
    order = pl.struct("enter", "id").rank("ordinal").over(by) - 1
    n = pl.len().over(by)
    chained = n > 1
    return frame.with_columns(
        flow_id=pl.when(chained).then(pl.col("id").min().over(by)),
        flow_out=chained & (order < n - 1),
        flow_in=chained & (order > 0),
    )


@dataclass
class Tracks:
    """Counter events (JSON strings) and what was left out, with the reason."""

    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def counter_tracks(
    run_dir: str | Path, origin: int, counters: pl.DataFrame | None = None
) -> Tracks:
    """The counter tracks of ``run_dir``; ``counters``: its hosts' series when already
    read (a loaded trace's), else they are read here."""
    root = Path(run_dir)
    out = Tracks()
    if counters is None:
        counters, _ = load_host_files(root, out.warnings)
    hosts = sorted(counters["host"].unique().to_list()) if counters.height else []
    for i, host in enumerate(hosts):
        pid = HOST_PID_BASE + i
        series = counters.filter(pl.col("host") == host, pl.col("source").is_in(NETWORK_SOURCES))
        if series.height:
            out.lines += _process(pid, f"host {host}: network counters", i)
            out.lines += _host_lines(series, pid, origin)
    links = _read_links(root / schema.LINKS_FILE, out.warnings)
    if links is not None and links.height:
        pid = HOST_PID_BASE + len(hosts)
        out.lines += _process(pid, "fabric links", len(hosts))
        out.lines += _link_lines(links, pid, origin)
    return out


def _process(pid: int, name: str, index: int) -> list[str]:
    return [
        _json({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}),
        _json(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": pid,
                "args": {"sort_index": SORT_AFTER_RANKS + index},
            }
        ),
    ]


def _host_lines(series: pl.DataFrame, pid: int, origin: int) -> list[str]:
    """One "C" event per row: name = the device (or the source for host-wide series),
    the one argument = the counter, so each (device, counter) is a track."""
    keys = series.select("source", "device", "counter").unique()
    names = keys.with_columns(
        _name=pl.struct("source", "device").map_elements(
            lambda k: json.dumps(k["device"] or k["source"]), return_dtype=pl.String
        ),
        _key=pl.col("counter").map_elements(json.dumps, return_dtype=pl.String),
    )
    rows = series.filter(pl.col("value") >= 0).join(names, on=["source", "device", "counter"])
    args = pl.concat_str(pl.col("_key"), pl.lit(":"), pl.col("value").cast(pl.String))
    return _encode(rows, pid, origin, pl.col("_name"), args)


def _link_lines(links: pl.DataFrame, pid: int, origin: int) -> list[str]:
    """One "C" event per sample and direction: name = link and direction, an argument
    per known counter."""
    present = [c for c in LINK_COUNTERS if c in links.columns]
    names = (
        links.select("link", "src", "dst")
        .unique()
        .with_columns(
            _name=pl.struct("link", "src", "dst").map_elements(
                lambda k: json.dumps(f"{k['link']} {k['src']}→{k['dst']}"),
                return_dtype=pl.String,
            )
        )
    )
    rows = links.join(names, on=["link", "src", "dst"])
    args = pl.concat_str(
        [
            pl.when(pl.col(c) >= 0).then(pl.lit(f'"{c}":') + pl.col(c).cast(pl.String))
            for c in present
        ],
        separator=",",
        ignore_nulls=True,
    )
    return _encode(rows, pid, origin, pl.col("_name"), args)


def _encode(rows: pl.DataFrame, pid: int, origin: int, name: pl.Expr, args: pl.Expr) -> list[str]:
    if rows.height == 0:
        return []
    ts = (pl.col("time_ns") - origin).cast(pl.Float64) / 1e3
    # polars' format() reads braces as placeholders: the JSON is joined piece by piece
    line = pl.concat_str(
        pl.lit('{"name":'),
        name,
        pl.lit(f',"ph":"C","pid":{pid},"ts":'),
        ts.cast(pl.String),
        pl.lit(',"args":{'),
        args,
        pl.lit("}}"),
    )
    return rows.select(line.alias("line"))["line"].to_list()


def _read_links(path: Path, warnings: list[str]) -> pl.DataFrame | None:
    """The links file, or None (absent; damaged: with a warning naming it)."""
    if not path.exists():
        return None
    try:
        links = pl.read_ipc_stream(path)
    except (OSError, pa.ArrowInvalid, pl.exceptions.ComputeError) as exc:
        # the reader's message quotes its internals: the file and the problem suffice
        kind = "unreadable" if isinstance(exc, OSError) else "not an Arrow stream"
        warnings.append(f"{path}: not a readable link counters file ({kind}); no link tracks")
        return None
    needed = {"time_ns", "link", "src", "dst"}
    if not needed <= set(links.columns):
        missing = ", ".join(sorted(needed - set(links.columns)))
        warnings.append(f"{path}: no {missing} column; no link tracks")
        return None
    return links.filter(pl.col("time_ns") >= 0)


def _json(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"))
