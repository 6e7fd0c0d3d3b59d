"""Where ranks ran: node and local-rank tables from the metadata, and metrics grouped by them."""

from __future__ import annotations

from typing import Any

import polars as pl


def placement(meta: dict[int, dict[str, Any]]) -> pl.DataFrame:
    """Per rank: ``node`` (host name), ``local_rank`` (from the metadata, or the rank's
    position among the ranks of its host when the metadata lacks it)."""
    rows = []
    position: dict[str, int] = {}
    for rank in sorted(meta):
        m = meta[rank]
        node = str(m.get("host", "?"))
        fallback = position.get(node, 0)
        position[node] = fallback + 1
        local = m.get("local_rank")
        rows.append(
            {
                "rank": rank,
                "node": node,
                "local_rank": int(local) if isinstance(local, int) and local >= 0 else fallback,
            }
        )
    return pl.DataFrame(
        rows, schema={"rank": pl.Int32, "node": pl.String, "local_rank": pl.Int64}, orient="row"
    )


def by_node(per_rank: pl.DataFrame, place: pl.DataFrame) -> pl.DataFrame:
    return _grouped(per_rank, place, "node")


def by_local_rank(per_rank: pl.DataFrame, place: pl.DataFrame) -> pl.DataFrame:
    return _grouped(per_rank, place, "local_rank")


def _grouped(per_rank: pl.DataFrame, place: pl.DataFrame, key: str) -> pl.DataFrame:
    joined = per_rank.join(place, on="rank", how="inner")
    return (
        joined.group_by(key)
        .agg(
            ranks=pl.col("rank").sort(),
            step_mean_ns=pl.col("step_mean_ns").mean(),
            lateness_mean_ns=pl.col("lateness_mean_ns").mean(),
            lateness_p50_ns=pl.col("lateness_p50_ns").mean(),
            wait_mean_ns=pl.col("wait_mean_ns").mean(),
            last_share=pl.col("last_share").sum(),
        )
        .sort(key)
    )
