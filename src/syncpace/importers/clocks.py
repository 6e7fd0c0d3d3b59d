"""Clock offsets between ranks, estimated from the trace itself.

A symmetric collective (all-reduce, all-gather, reduce-scatter, all-to-all, barrier)
completes on every member at nearly the same moment: no member can finish before the
last one has contributed, and the last step of the algorithm reaches everyone within a
hop. So on rank ``r`` the exit of instance ``i`` is ``T_i + o_r + e_ri``: a common end
``T_i``, the rank's clock offset ``o_r`` and a small completion spread ``e``.

The estimator alternates robust medians: ``T_i`` = median over members of
``exit - o_r``, then ``o_r`` = median over the rank's instances of ``exit - T_i``, and
re-anchors so that rank 0 (or the reference) has offset 0. Medians make it immune to the
odd instance that ended late on one rank (a preempted thread, a retransmission).

The uncertainty is the 90th percentile of the rank's ``|e|``: how far one collective's
ends lie apart beyond the offset. A systematic part (a rank that always finishes a bit
later, the end of a ring) cannot be told from an offset with these data and is as large
as that spread, so the uncertainty does not shrink with the number of instances.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

#: Ops whose instances end (nearly) together on all members.
SYMMETRIC_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")

#: Fewer shared instances than this and a rank's offset is not estimated.
MIN_INSTANCES = 3


@dataclass(frozen=True)
class OffsetEstimate:
    """Per rank: the offset to add to its timestamps to put them on the reference's
    clock, its uncertainty (ns) and how many instances it rests on."""

    offset_ns: dict[int, int]
    uncertainty_ns: dict[int, int]
    instances: dict[int, int]
    residual_p50_ns: dict[int, int] = field(default_factory=dict)
    reference: int = 0

    def sample(self, rank: int) -> dict[str, int] | None:
        if rank not in self.offset_ns:
            return None
        return {
            "offset_ns": self.offset_ns[rank],
            "uncertainty_ns": self.uncertainty_ns[rank],
            "instances": self.instances[rank],
            "residual_p50_ns": self.residual_p50_ns.get(rank, 0),
        }


def estimate_offsets(
    events: pl.DataFrame,
    *,
    reference: int = 0,
    resolution_ns: int = 1_000,
    rounds: int = 6,
) -> OffsetEstimate:
    """Offsets from ``events`` with columns ``instance`` (one id per matched collective),
    ``rank`` and ``exit_ns``, holding only completed symmetric collectives that every
    member of their group recorded."""
    ev = events.select(
        pl.col("instance").cast(pl.Int64),
        pl.col("rank").cast(pl.Int64),
        pl.col("exit_ns").cast(pl.Int64),
    )
    if ev.height == 0:
        return OffsetEstimate({}, {}, {}, reference=reference)
    # Work relative to the first exit so the medians stay within float precision.
    t0 = int(ev["exit_ns"].min())  # type: ignore[arg-type]
    ev = ev.with_columns(t=(pl.col("exit_ns") - t0).cast(pl.Float64))
    offsets = pl.DataFrame(
        {"rank": ev["rank"].unique().sort(), "o": 0.0}, schema={"rank": pl.Int64, "o": pl.Float64}
    )
    for _ in range(rounds):
        with_o = ev.join(offsets, on="rank")
        ends = with_o.group_by("instance").agg(T=(pl.col("t") - pl.col("o")).median())
        with_t = ev.join(ends, on="instance")
        offsets = with_t.group_by("rank").agg(o=(pl.col("t") - pl.col("T")).median())
        ref = offsets.filter(pl.col("rank") == reference)["o"]
        anchor = float(ref[0]) if ref.len() else float(offsets["o"].median() or 0.0)
        offsets = offsets.with_columns(pl.col("o") - anchor)
    final = ev.join(offsets, on="rank").join(ends, on="instance")
    final = final.with_columns(e=(pl.col("t") - pl.col("T") - pl.col("o")).abs())
    stats = final.group_by("rank").agg(
        n=pl.col("instance").n_unique(),
        p90=pl.col("e").quantile(0.9, "linear"),
        p50=pl.col("e").median(),
        o=pl.col("o").first(),
    )
    out_o, out_u, out_n, out_p50 = {}, {}, {}, {}
    for row in stats.iter_rows(named=True):
        rank, n = int(row["rank"]), int(row["n"])
        if n < MIN_INSTANCES and rank != reference:
            continue
        # The offset is what takes this rank's clock to the reference's: minus its drift.
        out_o[rank] = -int(round(row["o"]))
        out_u[rank] = max(int(resolution_ns), int(np.ceil(row["p90"] or 0.0)))
        out_n[rank] = n
        out_p50[rank] = int(round(row["p50"] or 0.0))
    if reference in out_o:
        out_o[reference] = 0
    return OffsetEstimate(out_o, out_u, out_n, out_p50, reference=reference)


def symmetric_instances(events: pl.DataFrame) -> pl.DataFrame:
    """The estimator's input from trace-schema events (after ``seq`` is known): completed
    symmetric collectives recorded by every member of their group, with an ``instance``
    id. Only timing sources that observe a completion take part."""
    usable = events.filter(
        pl.col("op").is_in(SYMMETRIC_OPS),
        pl.col("status") == "completed",
        pl.col("exit_ns") >= 0,
        pl.col("seq") >= 0,
        ~pl.col("timing").is_in(["profiler_call", "call"]),
    )
    if usable.height == 0:
        return usable.with_columns(instance=pl.lit(0, pl.Int64)).head(0)
    usable = usable.with_columns(
        instance=pl.struct("group", "seq").rank("dense").cast(pl.Int64),
        members=pl.len().over("group", "seq"),
    )
    return usable.filter(pl.col("members") == pl.col("group_size"))
