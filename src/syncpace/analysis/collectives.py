"""Collective instances: the same call matched across ranks by (group, sequence number).

Point-to-point calls count their sequence numbers per (group, peer, direction): the
k-th send from a to b and the k-th receive at b from a are one transfer, matched by
(group, directed pair a→b, seq); a two-way pipeline's sends and receives in the other
direction are other instances. Only ranks that have the event take part; an instance
with fewer members than expected is kept and flagged incomplete.

The matching runs on numpy arrays with a dense instance index (see ``kernels``): it is
the one pass over every event, so it has to be fast.

One module of ~600 lines: the matching and what is derived from matched instances
(gaps, queueing, concurrency, arrivals per step) work on the same arrays (the dense
instance index, :class:`EventTimes`) that the one pass builds; apart, each would take
those arrays through its every call.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from syncpace.analysis import kernels
from syncpace.trace.busbw import FACTORS

P2P_OPS = ("send", "recv")


def _factor_expr(op: pl.Expr, n: pl.Expr) -> pl.Expr:
    """nccl-tests' bus factor (:mod:`syncpace.trace.busbw`; it assumes a flat topology,
    see docs/analysis.md) as a polars expression: null for an op that moves no data."""
    n = n.cast(pl.Float64)
    a, b = ({k: v[i] for k, v in FACTORS.items()} for i in (0, 1))
    share = op.replace_strict(a, default=None, return_dtype=pl.Float64)
    unit = op.replace_strict(b, default=None, return_dtype=pl.Float64)
    return share * (n - 1) / n + unit


@dataclass(frozen=True)
class EventTimes:
    """Per-event arrays (int64) aligned with each other: who, when, which instance, and
    the dense (rank, step) index ``rs`` used by per-iteration reductions."""

    rank: np.ndarray
    step: np.ndarray
    instance: np.ndarray
    enter: np.ndarray
    exit: np.ndarray
    rs: np.ndarray
    rs_size: int
    first_enter: np.ndarray  # of the event's instance
    last_enter: np.ndarray  # of the event's instance
    tail_start: np.ndarray  # per rs: the enter of the rank's last collective of the step
    #: Under the device clock (``timebase``): the host's enqueue of each event, and how
    #: long after the first member's host enqueue of its instance it came. None on host.
    host_enter: np.ndarray | None = None
    host_late: np.ndarray | None = None


@dataclass(frozen=True)
class Matched:
    instances: pl.DataFrame  # row i describes instance id i
    events: EventTimes
    dropped: int  # events without a usable rank, step, sequence number or enter time
    #: ``events.rs`` as groups, laid out once for the per-(rank, step) reductions
    by_rank_step: kernels.Groups | None = None


def call_key() -> list[pl.Expr]:
    """Expressions naming one call across its ranks: its group and sequence number and,
    for point-to-point calls, the direction (source, destination) of the transfer."""
    send = pl.col("op") == "send"
    p2p = pl.col("op").is_in(P2P_OPS)
    src = pl.when(send).then(pl.col("rank")).otherwise(pl.col("peer"))
    dst = pl.when(send).then(pl.col("peer")).otherwise(pl.col("rank"))
    return [
        pl.col("group"),
        pl.col("seq"),
        pl.when(p2p).then(src).otherwise(-1).alias("_src"),
        pl.when(p2p).then(dst).otherwise(-1).alias("_dst"),
    ]


def call_steps(events: pl.DataFrame) -> pl.Expr:
    """Per event: the first step index any rank made its call in (a call one rank
    makes just before a boundary and another just after is one call, of one step)."""
    return pl.col("step").min().over(call_key())


def usable_events(events: pl.DataFrame) -> pl.DataFrame:
    """The events matching can use (a rank, step, sequence number and enter time), in
    their order: ``match`` numbers its per-event arrays over exactly these."""
    usable = (
        (pl.col("rank") >= 0)
        & (pl.col("step") >= 0)
        & (pl.col("seq") >= 0)
        & (pl.col("enter_ns") >= 0)
    )
    mask = events.select(usable.all()).item() if events.height else True
    return events if mask else events.filter(usable)  # filtering copies every column: skip it


def match(
    events: pl.DataFrame, *, previous_exit: np.ndarray | None = None, derived: bool = True
) -> Matched:
    """Match ``events`` (schema ``EVENTS``) into collective instances.

    ``previous_exit`` (indexed by rank, -1 for none): the exit of each rank's call just
    before the first of ``events``, when they are a window of a longer trace.
    ``derived``: with the instances' derived columns (:func:`derive`); a window of a
    longer trace leaves them to the run's instances, where queueing looks back across
    windows (without: :data:`BASE_COLUMNS` only, 5 ms less a window of 4,096 ranks)."""
    ev = usable_events(events)
    dropped = events.height - ev.height
    rank = ev["rank"].to_numpy()
    step = ev["step"].to_numpy()
    enter = ev["enter_ns"].to_numpy()
    exit_ = ev["exit_ns"].to_numpy()
    failed = (ev["status"] != "completed").to_numpy()
    if failed.any():  # a call that failed, timed out or never completed has no exit time
        exit_ = np.where(failed, -1, exit_)
    parts = [_group_codes(ev["group"])]
    pair = _pair(ev)
    if pair is not None:
        parts.append(np.unique(pair, return_inverse=True)[1].reshape(-1).astype(np.int64))
    parts.append(ev["seq"].to_numpy())
    raw, size = kernels.group_index(parts) if ev.height else (np.zeros(0, np.int64), 0)
    present = kernels.count(raw, size) > 0
    if present.all():
        inst = raw
    else:  # drop ids no event has (gaps in sequence numbers)
        inst = (np.cumsum(present) - 1)[raw]
        size = int(present.sum())
    rs, rs_size = kernels.group_index([rank, step]) if ev.height else (raw, 0)
    by_instance, by_rank_step = kernels.Groups(inst, size), kernels.Groups(rs, rs_size)
    first, last = by_instance.minimum(enter), by_instance.maximum(enter)
    host, host_late = _host_times(ev, inst, by_instance)
    times = EventTimes(
        rank,
        step,
        inst,
        enter,
        exit_,
        rs,
        rs_size,
        first_enter=first[inst],
        last_enter=last[inst],
        tail_start=by_rank_step.maximum(enter),
        host_enter=host,
        host_late=host_late,
    )
    frame = _instances(ev, times, by_instance, pair, first, last, previous_exit)
    return Matched(_derive(frame) if derived else frame, times, dropped, by_rank_step)


def _host_times(
    ev: pl.DataFrame, inst: np.ndarray, by_instance: kernels.Groups
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per event under the device clock (a ``host_enter_ns`` column): its host enqueue
    and its lateness by host enqueue within its instance; (None, None) on host time."""
    if "host_enter_ns" not in ev.columns:
        return None, None
    host = ev["host_enter_ns"].to_numpy()
    return host, host - by_instance.minimum(host)[inst]


def _group_codes(groups: pl.Series) -> np.ndarray:
    """Integer codes of the group names (hashing 10M strings is slow: skip it when there
    is only one group, the usual data-parallel case)."""
    if groups.dtype == pl.Categorical:  # codes already: compared as numbers
        codes = groups.to_physical().to_numpy()
        if len(codes) == 0 or codes.min() == codes.max():
            return np.zeros(len(codes), dtype=np.int64)
        return codes.astype(np.int64)
    if groups.len() == 0 or groups.min() == groups.max():
        return np.zeros(groups.len(), dtype=np.int64)
    return groups.cast(pl.Categorical).to_physical().cast(pl.Int64).to_numpy()


def _pair(ev: pl.DataFrame) -> np.ndarray | None:
    """The directed pair (source << 32 | destination) of each send/recv (-1 for
    collectives), or None when there are none. A send goes from its rank to its peer,
    a receive from its peer to its rank."""
    if ev.height == 0 or not ev["op"].is_in(P2P_OPS).any():
        return None
    rank, peer = pl.col("rank").cast(pl.Int64), pl.col("peer").cast(pl.Int64)
    send = pl.col("op") == "send"
    src = pl.when(send).then(rank).otherwise(peer)
    dst = pl.when(send).then(peer).otherwise(rank)
    is_p2p = pl.col("op").is_in(P2P_OPS) & (pl.col("peer") >= 0)
    return (
        ev.select(pl.when(is_p2p).then(src * (1 << 32) + dst).otherwise(-1)).to_series().to_numpy()
    )


def _instances(
    ev: pl.DataFrame,
    t: EventTimes,
    by_instance: kernels.Groups,
    pair: np.ndarray | None,
    first_enter: np.ndarray,
    last_enter: np.ndarray,
    previous_exit: np.ndarray | None = None,
) -> pl.DataFrame:
    idx, size = t.instance, by_instance.size
    first_row = by_instance.first_row()  # a representative event each
    nbytes = ev["bytes"].to_numpy()
    exit_, bounded = instance_exits(ev, t, size, by_instance)
    hit = t.enter == t.last_enter
    last_rank = np.full(size, -1, dtype=np.int64)
    last_rank[idx[hit]] = t.rank[hit]
    # How much of the last arriver's lateness it spent on its own since its previous
    # call completed (compute, data loading) rather than inherited from a collective
    # that ended late for it: its own gap beyond the first arriver's.
    gap = _own_gap(t, previous_exit)
    first = t.enter == t.first_enter
    gap_first = np.full(size, -1, dtype=np.int64)
    gap_first[idx[first]] = gap[first]
    gap_last = np.full(size, -1, dtype=np.int64)
    gap_last[idx[hit]] = gap[hit]
    known = (gap_first >= 0) & (gap_last >= 0)
    late_own = np.where(known, np.maximum(gap_last - gap_first, 0), -1)
    frame = pl.DataFrame(
        {
            # strings, whether the events hold their names as strings or categoricals
            "group": ev["group"].gather(first_row).cast(pl.String),
            "seq": ev["seq"].gather(first_row),
            "pair": pair[first_row] if pair is not None else np.full(size, -1, np.int64),
            "op": ev["op"].gather(first_row).cast(pl.String),
            "step": by_instance.minimum(t.step),
            "group_size": by_instance.maximum(ev["group_size"].cast(pl.Int64).to_numpy()),
            "bytes": by_instance.maximum(nbytes),
            "bytes_min": by_instance.minimum(nbytes),
            "n": kernels.count(idx, size),
            "first_enter": first_enter,
            "last_enter": last_enter,
            "last_rank": last_rank,
            "late_own_ns": late_own,
            "exit": np.where(exit_ >= 0, exit_, np.iinfo(np.int64).min),
            "exit_bounded": bounded,
        }
    ).with_columns(
        exit=pl.when(pl.col("exit") >= 0).then(pl.col("exit")),
        late_own_ns=pl.when(pl.col("late_own_ns") >= 0).then(pl.col("late_own_ns")),
    )
    return frame


def _own_gap(t: EventTimes, previous_exit: np.ndarray | None = None) -> np.ndarray:
    """Per event: time since the same rank's previous call completed (-1 when unknown).
    ``previous_exit``: per rank, the exit of the call before the first one here."""
    gap = np.full(len(t.enter), -1, dtype=np.int64)
    if len(t.enter) >= 2:
        _gaps(t, gap)
    if previous_exit is not None and len(t.enter):
        _first_gaps(t, previous_exit, gap)
    return gap


def _gaps(t: EventTimes, gap: np.ndarray) -> None:
    d_rank, d_enter = np.diff(t.rank), np.diff(t.enter)
    # Traces come rank by rank in completion order, which is nearly always enter order:
    # checking that costs one pass, sorting 10M events several.
    if ((d_rank > 0) | ((d_rank == 0) & (d_enter >= 0))).all():
        rank, enter, exit_, where = t.rank, t.enter, t.exit, slice(1, None)
    else:
        order = np.lexsort((t.enter, t.rank))
        rank, enter, exit_, where = t.rank[order], t.enter[order], t.exit[order], order[1:]
    prev_exit = exit_[:-1]
    ok = (rank[1:] == rank[:-1]) & (prev_exit >= 0)
    own = np.where(ok, np.maximum(enter[1:] - prev_exit, 0), -1)
    gap[where] = own


def _first_gaps(t: EventTimes, previous_exit: np.ndarray, gap: np.ndarray) -> None:
    """The gap of each rank's first call (by enter) since its call before the window."""
    # The first row of each rank among those with its smallest enter (a stable sort's
    # first), by two scatters instead of a sort of the whole window.
    size = len(previous_exit)
    low = kernels.Groups(t.rank, size).minimum(t.enter)
    cand = np.flatnonzero(t.enter == low[t.rank])
    row = kernels.minimum(t.rank[cand], cand, size)
    head = row[row < len(t.enter)]
    prev = previous_exit[t.rank[head]]
    ok = prev >= 0
    gap[head[ok]] = np.maximum(t.enter[head[ok]] - prev[ok], 0)


#: The columns of an instance that :func:`derive` computes the others from.
BASE_COLUMNS = (
    "group", "seq", "pair", "op", "step", "group_size", "bytes", "bytes_min", "n",
    "first_enter", "last_enter", "last_rank", "late_own_ns", "exit", "exit_bounded",
)  # fmt: skip


def derive(instances: pl.DataFrame) -> pl.DataFrame:
    """The derived columns of instances from :data:`BASE_COLUMNS` (windows of a run
    concatenated: queueing looks back across them)."""
    return _derive(instances.select(BASE_COLUMNS))


def _derive(inst: pl.DataFrame) -> pl.DataFrame:
    """Skew, transfer, queueing, service time and bandwidths of each instance.

    A backend runs a bounded number of collectives of one group at once (gloo: one per
    worker thread, two by default; NCCL: one per stream in use). That number is measured
    from the trace (:func:`measured_concurrency`); an instance queues until one of the
    earlier ones ends, and its service time (transfer minus queueing) is what bandwidth
    is computed on. ``concurrent`` is how many of the group's instances were in service
    beside it on average, itself included: two buckets that share a link each get about
    half of it. An instance whose every exit is only an upper bound (``exit_bounded``:
    async work waited on late) has no trusted bandwidth.
    """
    expected = pl.when(pl.col("pair") >= 0).then(2).otherwise(pl.col("group_size"))
    transfer = (pl.col("exit") - pl.col("last_enter")).clip(lower_bound=0)
    inst = inst.with_columns(
        expected=expected,
        skew_ns=pl.col("last_enter") - pl.col("first_enter"),
        transfer_ns=transfer,
    )
    inst = with_queueing(inst)
    service = pl.col("service_ns").cast(pl.Float64)
    trusted = (pl.col("service_ns") > 0) & ~pl.col("exit_bounded")
    algbw = pl.when(trusted).then(pl.col("bytes") / service)  # B/ns = GB/s
    return inst.with_columns(
        complete=pl.col("n") == pl.col("expected"),
        algbw_gbps=algbw,
        busbw_gbps=algbw * _factor_expr(pl.col("op"), pl.col("n")),
    )


#: Concurrency tried when measuring it: beyond this a group is taken as unbounded.
MAX_CONCURRENCY = 8
#: A wait that began this long after its call (and returned at once) found the work done.
LATE_WAIT_NS = 100_000


def late_waited(ev: pl.DataFrame, t: EventTimes) -> np.ndarray:
    """Per event: its exit is only an upper bound of the completion. An ``async_op``
    work waited on long after it was issued, whose wait returned at once, was done at
    some point before the wait began; when is not known."""
    if "wait_ns" not in ev.columns or ev.height == 0:
        return np.zeros(ev.height, dtype=bool)
    wait = ev["wait_ns"].to_numpy()
    waited = wait >= 0
    if not waited.any():  # no wait recorded (synchronous calls): one pass, not five
        return waited
    by_wait = (ev["timing"] == "wait").to_numpy()
    late = wait - t.enter
    quick = t.exit - wait
    return by_wait & waited & (t.exit >= 0) & (late > LATE_WAIT_NS) & (10 * quick < late)


def instance_exits(
    ev: pl.DataFrame, t: EventTimes, size: int, by_instance: kernels.Groups | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per instance: its completion (the latest exact exit of its members) and whether
    that is only an upper bound (no member observed it exactly: then the earliest of the
    bounds, since every member's work ended together)."""
    groups = by_instance or kernels.Groups(t.instance, size)
    bounded = late_waited(ev, t)
    if not bounded.any():
        return groups.maximum(t.exit), np.zeros(size, dtype=bool)
    exact = groups.maximum(np.where(bounded, -1, t.exit))
    upper = groups.minimum(np.where(bounded, t.exit, np.iinfo(np.int64).max))
    only_upper = (exact < 0) & (upper < np.iinfo(np.int64).max)
    return np.where(only_upper, upper, exact), only_upper


def with_queueing(inst: pl.DataFrame) -> pl.DataFrame:
    """``concurrency`` (of the instance's group, measured), ``queued_ns``, ``service_ns``
    and ``concurrent`` of every instance (see :func:`_derive`)."""
    if inst.height == 0:
        return inst.with_columns(
            concurrency=pl.lit(1, pl.Int64),
            queued_ns=pl.lit(0, pl.Int64),
            service_ns=pl.col("transfer_ns"),
            concurrent=pl.lit(1.0),
        )
    order, key = stream_order(inst)
    last = order["last_enter"].to_numpy()
    exit_ = order["exit"].fill_null(-1).to_numpy()
    nbytes = order["bytes"].to_numpy()
    group = order["group"].to_numpy()
    conc = np.ones(len(key), dtype=np.int64)
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        conc[rows] = measured_concurrency(key[rows], last[rows], exit_[rows], nbytes[rows])
    free = slot_free(key, exit_, conc)
    start = np.maximum(last, free)
    known = exit_ >= 0
    queued = np.where(known, np.clip(np.minimum(free, exit_) - last, 0, None), 0)
    service = np.where(known, np.clip(exit_ - start, 0, None), 0)
    together = concurrent_in_service(key, start, exit_, conc)
    back = np.empty(len(key), dtype=np.int64)
    back[order["_row"].to_numpy()] = np.arange(len(key))
    transfer = inst["transfer_ns"]
    return inst.with_columns(
        concurrency=pl.Series(conc[back]),
        queued_ns=pl.Series(queued[back]),
        service_ns=pl.when(transfer.is_not_null()).then(pl.Series(service[back])),
        concurrent=pl.Series(together[back]),
    )


def stream_order(inst: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray]:
    """The instances by stream (group, pair) and sequence, their row in ``inst`` as
    ``_row``, and each one's stream as a dense id: the order the queueing functions
    below take their rows in."""
    order = inst.with_row_index("_row").sort("group", "pair", "seq")
    key = order.select(pl.struct("group", "pair").rank("dense").cast(pl.Int64)).to_series()
    return order, key.to_numpy()


def slot_free(key: np.ndarray, exit_: np.ndarray, conc: np.ndarray) -> np.ndarray:
    """Per row (rows sorted by stream ``key``, then sequence): when a slot of its stream
    was free, i.e. the ``conc``-th latest exit among the earlier rows of the stream (-1
    while fewer than ``conc`` earlier rows have one). FIFO service with ``conc`` servers:
    a collective starts once at most ``conc - 1`` earlier ones are still running."""
    out = np.full(len(key), -1, dtype=np.int64)
    if len(key) == 0:
        return out
    boundary = np.r_[True, key[1:] != key[:-1]]
    if (conc == 1).all():  # the usual one-at-a-time case, vectorised
        prior = pl.DataFrame({"key": key, "exit": np.r_[-1, exit_[:-1]]})
        prior = prior.with_columns(exit=pl.when(pl.Series(boundary)).then(-1).otherwise("exit"))
        return prior.select(pl.col("exit").cum_max().over("key")).to_series().to_numpy()
    heap: list[int] = []
    for i in range(len(key)):
        if boundary[i]:
            heap = []
        c = int(conc[i])
        if len(heap) >= c:
            out[i] = heap[0]
        if exit_[i] >= 0:
            if len(heap) < c:
                heapq.heappush(heap, int(exit_[i]))
            elif exit_[i] > heap[0]:
                heapq.heapreplace(heap, int(exit_[i]))
    return out


def measured_concurrency(
    key: np.ndarray, last: np.ndarray, exit_: np.ndarray, nbytes: np.ndarray
) -> int:
    """How many collectives of one group the backend ran at once, from the trace.

    Under too small a concurrency, collectives that really ran side by side look queued
    behind each other and their service time shrinks to the gap between their exits:
    shorter than the same size ever takes alone. The measure is the smallest number of
    slots under which (almost) no queued collective is served faster than half the
    quickest time instances of its size (power of two) took when they started alone.
    Without any overlap of the group's collectives it is 1: queueing never arose.
    """
    known = exit_ >= 0
    cls = np.floor(np.log2(np.maximum(nbytes, 1))).astype(np.int64)
    alone_free = slot_free(key, exit_, np.ones(len(key), dtype=np.int64))
    alone = known & (alone_free <= last)
    if alone.all() or not alone.any():
        return 1
    took = exit_ - last
    ref = {int(c): float(np.quantile(took[alone & (cls == c)], 0.1)) for c in np.unique(cls[alone])}
    nearest = {
        int(c): ref.get(int(c), ref.get(int(c) - 1, ref.get(int(c) + 1, np.nan)))
        for c in np.unique(cls)
    }
    quick = np.array([nearest[int(c)] for c in cls], dtype=np.float64)
    for c in range(1, MAX_CONCURRENCY + 1):
        free = slot_free(key, exit_, np.full(len(key), c, dtype=np.int64))
        queued = known & (free > last) & ~np.isnan(quick)
        if not queued.any():
            return c
        served = exit_[queued] - free[queued]
        too_fast = int((served < 0.5 * quick[queued]).sum())
        if too_fast <= max(1, 0.05 * queued.sum()):
            return c
    return MAX_CONCURRENCY


def concurrent_in_service(
    key: np.ndarray, start: np.ndarray, exit_: np.ndarray, conc: np.ndarray
) -> np.ndarray:
    """Per row: 1 + the time-weighted number of other collectives of its stream in
    service beside it (rows sorted by stream and sequence; neighbours within twice the
    stream's concurrency are compared, FIFO service keeps the others apart)."""
    n = len(key)
    length = np.where(exit_ >= 0, exit_ - start, 0).astype(np.float64)
    shared = np.zeros(n)
    reach = min(int(2 * conc.max()), n - 1) if n else 0
    for o in range(1, reach + 1):
        a, b = slice(0, n - o), slice(o, n)
        same = (key[a] == key[b]) & (exit_[a] >= 0) & (exit_[b] >= 0)
        ov = np.minimum(exit_[a], exit_[b]) - np.maximum(start[a], start[b])
        ov = np.where(same, np.clip(ov, 0, None), 0).astype(np.float64)
        shared[a] += ov
        shared[b] += ov
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(length > 0, 1.0 + shared / length, 1.0)


def rank_step_arrivals(m: Matched) -> pl.DataFrame:
    """Per (rank, step): ``lateness_ns``, ``wait_ns``, ``longest_wait_ns``,
    ``tail_start``, ``collectives``.

    Lateness of a rank in an iteration is the mean, over the collectives it joined, of how
    long after the first arriver it entered; the rank with the largest value "arrived
    last". ``wait_ns`` is the wait (last enter of the instance - own enter) at the rank's
    last collective of the iteration: after it the rank has nothing left to overlap, so
    that wait is idle time even when collectives are asynchronous. ``longest_wait_ns`` is
    its longest wait at any of its collectives of the iteration (what a late rank holds
    it up by where the tail's wait is not measured: :func:`arrivals_estimated`).
    ``tail_start`` is that last collective's enter.
    """
    t = m.events
    if len(t.rs) == 0:
        return pl.DataFrame(
            schema={
                "rank": pl.Int32,
                "step": pl.Int64,
                "lateness_ns": pl.Float64,
                "wait_ns": pl.Int64,
                "longest_wait_ns": pl.Int64,
                "tail_start": pl.Int64,
                "collectives": pl.Int64,
            }
        )
    size = t.rs_size
    n = kernels.count(t.rs, size)
    keep = n > 0
    late_sum = kernels.total(t.rs, t.enter - t.first_enter, size)
    wait = np.full(size, -1, dtype=np.int64)
    hit = t.enter == t.tail_start[t.rs]
    wait[t.rs[hit]] = t.last_enter[hit] - t.enter[hit]
    longest = kernels.maximum(t.rs, t.last_enter - t.enter, size)
    groups = m.by_rank_step or kernels.Groups(t.rs, size)
    rows = groups.first_row()
    frame = pl.DataFrame(
        {
            "rank": t.rank[rows[keep]].astype(np.int32),
            "step": t.step[rows[keep]],
            "lateness_ns": late_sum[keep] / n[keep],
            "wait_ns": wait[keep],
            "longest_wait_ns": longest[keep],
            "tail_start": t.tail_start[keep],
            "collectives": n[keep],
        }
    )
    if t.host_enter is None or t.host_late is None:
        return frame
    return frame.with_columns(**_device_rank_step(t, groups, hit, n, keep))


def _device_rank_step(
    t: EventTimes, groups: kernels.Groups, hit: np.ndarray, n: np.ndarray, keep: np.ndarray
) -> dict[str, np.ndarray]:
    """Per (rank, step) under the device clock (``timebase.DEVICE_RANK_STEP``): mean
    host lateness and run-ahead (device enter - host enter) over its calls, the
    run-ahead of its last call, its first device enter and its last device exit
    (-1 when none completed): what moves its iteration boundary to the device."""
    assert t.host_enter is not None and t.host_late is not None
    size = t.rs_size
    ahead = t.enter - t.host_enter
    tail = np.zeros(size, dtype=np.int64)
    tail[t.rs[hit]] = ahead[hit]
    return {
        "host_lateness_ns": kernels.total(t.rs, t.host_late, size)[keep] / n[keep],
        "run_ahead_ns": kernels.total(t.rs, ahead, size)[keep] / n[keep],
        "tail_run_ahead_ns": tail[keep],
        "first_enter_ns": groups.minimum(t.enter)[keep],
        "last_exit_ns": groups.maximum(t.exit)[keep],
    }


def last_arrivers(rank_step: pl.DataFrame) -> pl.DataFrame:
    """Per step: the rank that arrived last (largest mean lateness)."""
    return (
        rank_step.group_by("step")
        .agg(last_rank=pl.col("rank").get(pl.col("lateness_ns").arg_max()))
        .sort("step")
    )


def arrivals_estimated(meta: dict[int, dict[str, Any]]) -> str | None:
    """Why the wait at a rank's last collective of an iteration is not measured in a
    trace with this metadata, or None when it is. A log that records when each call
    ended and how long its kernel ran, not when it was called, gives the kernel's start
    for an enter: kernels queued on a stream start when the one before ends, so every
    wait shows at the first kernel of a queue and none at its tail. Steps an importer
    cut as windows of time end wherever a window ends, not after an iteration's last
    call."""
    for m in meta.values():
        imported = m.get("import") or {}
        if imported.get("enter_from"):
            return f"the log records no call times (enters are {imported['enter_from']})"
    if windowed(meta):
        return "the log records no iterations (steps are windows of time)"
    return None


def windowed(meta: dict[int, dict[str, Any]]) -> bool:
    """Whether the trace's steps are fixed windows of time an importer cut (a log that
    records no iterations), not iterations."""
    return any((m.get("import") or {}).get("steps_from") == "windows" for m in meta.values())
