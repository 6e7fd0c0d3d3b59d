"""The emulated fabric's link counters (``fabric-links.arrow``) written for a
synthetic run: each direction's cumulative bytes at each sample, with its rate."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa

from syncpace.trace.schema import LINKS_FILE

#: (link, src, dst, kind, rate_bps)
Direction = tuple[str, str, str, str, int]


def star(
    hosts: Sequence[str], rate_bps: Callable[[str], int], switch: str = "sw"
) -> list[Direction]:
    """Both directions of each host's link to one switch, at ``rate_bps(host)``."""
    out = []
    for h in hosts:
        out += [(f"{h}-{switch}", h, switch, "host", rate_bps(h))]
        out += [(f"{h}-{switch}", switch, h, "host", rate_bps(h))]
    return out


def write_links(
    root: Path,
    directions: Sequence[Direction],
    times: Sequence[int],
    nbytes: Callable[[Direction, int], int] = lambda d, t: 0,
) -> None:
    """One row per direction and sample time; ``nbytes(direction, t)``: its cumulative
    bytes at ``t`` (ns)."""
    names = ("time_ns", "link", "src", "dst", "kind", "rate_bps", "bytes")
    rows = [
        dict(zip(names, (t, *d, int(nbytes(d, t))), strict=True)) for t in times for d in directions
    ]
    table = pa.Table.from_pylist(rows)
    for column in ("packets", "drops", "overlimits", "backlog_bytes"):
        table = table.append_column(column, pa.array([0] * len(rows), pa.int64()))
    with (
        pa.OSFile(str(root / LINKS_FILE), "wb") as sink,
        pa.ipc.new_stream(sink, table.schema) as out,
    ):
        out.write_table(table)
