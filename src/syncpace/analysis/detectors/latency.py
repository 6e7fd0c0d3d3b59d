"""Latency-bound collectives: calls below their latency knee, priced bucketed.

Apart from ``network`` because what bucketing would cost is measured on the run itself
(:func:`small_model`): the latency from its smallest calls, the bytes' time from its
largest or, for one size of calls, from the links' known capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from syncpace.analysis import costs
from syncpace.analysis.detectors import advice, counted, cpu, nominal
from syncpace.analysis.detectors.context import Context, confidence_of
from syncpace.analysis.detectors.network import lagging_ranks
from syncpace.analysis.findings import Finding
from syncpace.analysis.replay import counterfactuals as cf

#: The run's largest calls measure its rate only where they are this many times the
#: size of its smallest (whose time is taken as the latency): closer, the two times
#: are mostly the same latency and their ratio says nothing of the bytes.
SIZE_SPAN = 8.0


@dataclass(frozen=True)
class SmallModel:
    """What the run's small calls would cost bucketed, from the run's own calls: the
    latency a bucket pays once (``alpha_ns``, the median time of its smallest calls,
    each alone on the links) and per instance its bytes' time (``bytes_ns``) at the
    rate its largest calls moved bytes at (each alone, its latency in: a floor of the
    rate). ``which``: the calls whose bytes take less than that latency (the
    latency-bound ones), the ones bucketed; ``knee_bytes``: where the two meet."""

    alpha_ns: float
    bytes_ns: np.ndarray
    which: np.ndarray
    rate: str
    knee_bytes: int


def small_model(ctx: Context) -> SmallModel | None:
    """The bucketing model measured on the run; for one size of calls (within
    :data:`SIZE_SPAN`) from the links' known capacity (:func:`_one_size`); ``None``
    where neither tells the calls' latency from their bytes' time."""
    inst = ctx.metrics.instances
    th = ctx.thresholds
    timed = pl.col("complete") & pl.col("service_ns").is_not_null() & (pl.col("service_ns") > 0)
    frame = inst.select(pl.col("bytes").cast(pl.Float64), ok=timed)
    # each call's time alone on the links: calls in flight together share them (two
    # buckets at once each take about twice their own)
    sized = (
        inst.with_row_index("_id")
        .filter(timed)
        .with_columns(
            alone=pl.col("service_ns") / pl.col("concurrent").fill_null(1).clip(lower_bound=1)
        )
    )
    if sized.height == 0:
        return None
    least = max(float(sized["bytes"].min()), 1.0)  # type: ignore[arg-type]
    smallest = sized.filter(pl.col("bytes") <= 2 * least)
    alpha = float(smallest["alone"].median() or 0.0)  # type: ignore[arg-type]
    most = float(sized["bytes"].max())  # type: ignore[arg-type]
    nbytes = frame["bytes"].to_numpy()
    if most < SIZE_SPAN * least:
        return _one_size(ctx, sized, frame["ok"].to_numpy())
    largest = sized.filter(pl.col("bytes") >= most / 2)
    gbps = float((largest["bytes"] / largest["alone"]).median())  # type: ignore[arg-type]
    bytes_ns = nbytes / gbps
    rate = f"the rate its largest calls moved bytes at ({gbps:.3g} GB/s)"
    latency_bound = (bytes_ns < alpha) & (nbytes < th.latency_knee_bytes)
    which = latency_bound & frame["ok"].to_numpy()
    return SmallModel(alpha, bytes_ns, which, rate, int(alpha * gbps))


#: With one size of calls, how far below their latency their bytes' time at the links'
#: capacity must stay for the calls to count as latency-bound. Under load gloo moves
#: bytes at a fraction of the capacity and a call's whole time reads as latency: in a
#: clean phase of a drawn fabric job on a loaded machine its own 16 KiB buckets took
#: 23.6 ms, 9.3 ms of "latency" beside 0.67 ms of bytes at 196 Mbit/s (14x); 64 B calls
#: stand 1000x below their latency.
ONE_SIZE_MARGIN = 64.0


def _one_size(ctx: Context, sized: pl.DataFrame, ok: np.ndarray) -> SmallModel | None:
    """One size of calls: their bytes at the links' known capacity (set, benchmarked,
    or the hosts' line rate), the latency each call's time alone less that; ``None``
    without a capacity, or where a slow link or a starved host may explain the calls'
    time (a CPU-capped host makes 16 KiB calls take 8 ms: its threads', not latency).
    The capacity is a ceiling the calls need not reach, so a call is bucketed only where
    its bytes would stay below the latency even at ``1 / ONE_SIZE_MARGIN`` of it."""
    rate = nominal.nominal(ctx)
    prog = ctx.program
    if rate is None or prog is None or _calls_slowed(ctx):
        return None
    bytes_ns = nominal.volume_ns(ctx, prog, rate)
    ids = sized["_id"].to_numpy()
    latency = sized["alone"].to_numpy() - bytes_ns[ids]
    latency = latency[~np.isnan(latency)]
    if len(latency) == 0:
        return None  # no call crosses the links the capacity is of
    alpha = max(float(np.median(latency)), 0.0)
    nbytes = ctx.metrics.instances["bytes"].to_numpy().astype(np.float64)
    which = (ONE_SIZE_MARGIN * bytes_ns < alpha) & (nbytes < ctx.thresholds.latency_knee_bytes)
    which &= ok
    per_byte = float(np.nanmedian(bytes_ns[ids] / np.maximum(nbytes[ids], 1.0)))
    knee = int(alpha / per_byte) if per_byte > 0 else 0
    words = f"{rate.words} (one size of calls: their latency is their time less that)"
    return SmallModel(alpha, np.nan_to_num(bytes_ns), which, words, knee)


def _calls_slowed(ctx: Context) -> bool:
    """Whether something other than latency may slow every call alike: ranks lagging
    next to a slow link, a host link the fabric's counters show set slow, or a host
    whose CPU limit throttles the job or whose ranks wait for a CPU beyond the others'."""
    th = ctx.thresholds
    if lagging_ranks(ctx):
        return True
    if counted.slower_links(ctx, counted.link_rates(ctx, None)):
        return True
    hosts = sorted(set(ctx.metrics.placement["node"].to_list()))
    starved = cpu.starved_hosts(ctx, hosts)
    return any(
        (info.get("throttled_share") or 0.0) >= th.cpu_throttle_share
        or cpu.stands_out(ctx, host, hosts)
        for host, info in starved.items()
    )


def latency_bound(ctx: Context) -> list[Finding]:
    """Many small calls, or few whose bucketing the replay finds worth the reporting
    threshold. Where the run measures what bucketing would cost
    (:func:`small_model`), the calls bucketed are those whose bytes take less than
    their latency, at one latency and their bytes' time; where it cannot (one size of
    calls without a known capacity, or beside a slow link or a starved host), every
    call below ``latency_knee_bytes`` at the median latency with its
    bytes free, and only ``latency_min_per_step`` of them a step or more are named
    (their bytes' time is unknown: free bytes overstate the saving of bucketing a few
    buckets of one size)."""
    m, th = ctx.metrics, ctx.thresholds
    inst = m.instances
    if inst.height == 0 or ctx.iteration_ns <= 0:
        return []
    model = small_model(ctx)
    if model is not None:
        chosen = model.which
    else:
        chosen = (inst["bytes"] < th.latency_knee_bytes).to_numpy()
    small = inst.filter(pl.Series(chosen))
    if small.height == 0:
        return []
    steps = max(m.steps.height, 1)
    # calls per rank and iteration: each instance counts once for each member rank
    per_rank_step = float(small["n"].sum()) / (steps * max(len(m.ranks), 1))
    share = float(small["service_ns"].sum()) / steps / ctx.iteration_ns
    many = per_rank_step >= th.latency_min_per_step
    if share < th.latency_min_share or (model is None and not many):
        return []
    if model is not None:
        alpha, bytes_ns, basis = model.alpha_ns, model.bytes_ns, model.rate
    else:
        alpha = float(small["service_ns"].median() or 0.0)  # type: ignore[arg-type]
        bytes_ns = np.zeros(inst.height)
        basis = "their bytes taken as free (one size of calls)"
    replay = ctx.counterfactual(
        "coalesced",
        "small collectives bucketed",
        lambda p: cf.small_coalesced(p, chosen, alpha, bytes_ns),
        cause="latency_bound",
        # a bucket pays one latency for its calls, which a floor of a latency per call
        # (the links' capacity, call by call) would forbid; its time is the run's own
        bytes_kept=False,
    )
    worth = replay is not None and costs.reported(replay.saving, replay.error, th)
    if not many and not worth:
        return []  # a few calls whose bucketing saves less than the threshold
    cost = replay.saving if replay is not None else share
    confidence = confidence_of(per_rank_step, th.latency_min_per_step)
    if worth:
        confidence = max(confidence, confidence_of(cost, th.warning_cost))
    return [
        ctx.finding(
            "latency_bound",
            share,
            confidence,
            f"{per_rank_step:.0f} collectives per iteration below their latency knee, each "
            f"~{alpha / 1e3:.0f} us of latency; bucketed, each iteration would be "
            f"{cost:.1%} shorter",
            replay=replay,
            evidence={
                "small_per_iteration": round(per_rank_step, 2),
                "small_bytes_p50": int(small["bytes"].median() or 0),  # type: ignore[arg-type]
                "small_service_us_p50": round(
                    float(small["service_ns"].median() or 0.0) / 1e3,  # type: ignore[arg-type]
                    2,
                ),
                "latency_us": round(alpha / 1e3, 2),
                "bytes_at": basis,
                "share_of_iteration": round(share, 4),
                "knee_bytes_threshold": th.latency_knee_bytes,
                "estimated_knee_bytes": model.knee_bytes if model is not None else None,
            },
            actions=advice.latency_bound(m.parallelism),
        )
    ]
