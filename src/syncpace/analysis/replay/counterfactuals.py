"""Counterfactuals: the measured program with one cause removed.

Each builder returns a :class:`~.engine.Change` that only ever removes time (shorter
gaps, shorter transfers, earlier completions), so a cause's saving is never negative
and never more than the iteration. Pacing is the exception: it adds delays, and the
replay says what that costs or saves.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import polars as pl

from syncpace.analysis.collectives import concurrent_in_service, stream_order
from syncpace.analysis.replay.engine import Change, PacerFactory
from syncpace.analysis.replay.program import END, JOIN, POST, WAIT, Program
from syncpace.trace.busbw import bus_factor


def action_keys(prog: Program) -> np.ndarray:
    """Per action: the same id on every rank for the same thing done (posting, waiting
    on, joining instance k; ending step s), so ranks can be compared action by action."""
    n_inst = len(prog.service)
    step_index = np.searchsorted(prog.steps, prog.step)
    return np.where(prog.inst >= 0, prog.kind + 4 * prog.inst, END + 4 * (n_inst + step_index))


def _median_by(keys: np.ndarray, values: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Per action: the median of ``values`` over the ``source`` actions of the same key
    (nan where no source action has it)."""
    frame = pl.DataFrame({"key": keys[source], "value": values[source]})
    med = frame.group_by("key").agg(pl.col("value").median())
    lookup = pl.DataFrame({"key": keys}).join(med, on="key", how="left", maintain_order="left")
    return lookup["value"].fill_null(np.nan).to_numpy()


def instances_with(prog: Program, ranks: Iterable[int]) -> np.ndarray:
    """Per instance: whether any of ``ranks`` took part in it."""
    mine = np.isin(prog.rank, list(ranks)) & (prog.inst >= 0)
    out = np.zeros(len(prog.service), dtype=bool)
    out[prog.inst[mine]] = True
    return out


def compute_like_others(prog: Program, ranks: Iterable[int]) -> Change:
    """These ranks not slow: each of their compute gaps at the other ranks' median for
    the same action (never longer than their own)."""
    chosen = np.isin(prog.rank, list(ranks))
    typical = _median_by(action_keys(prog), prog.gap, ~chosen)
    gap = np.where(chosen & ~np.isnan(typical), np.minimum(prog.gap, typical), prog.gap)
    return Change(gap=gap)


def without_wait(prog: Program, waits: dict[int, float]) -> Change:
    """These ranks without the time they waited for a CPU: rank ``r``'s gaps shorter
    by ``waits[r]`` ns per iteration on average (its waiting beyond the other ranks'),
    none shorter than the other ranks' median for the same action (or than it was).

    The sampler measures the waiting over the run, not step by step; it is put where
    the rank's extra time is: each step takes its share of the run's waiting in
    proportion to the rank's extra time in it (its gaps beyond those floors), and
    within the step each gap in proportion to its own. Waiting comes in bursts (a CPU
    limit throttles a period at a time, another process takes turns): a step that
    waited twice as long is twice as late, and a flat share per step would leave the
    bursts' steps late and cut nothing from the others, which are at their floor.
    At most the rank's extra time goes: what it computes stays."""
    chosen = np.isin(prog.rank, list(waits))
    if not chosen.any():
        return Change(gap=prog.gap)
    typical = _median_by(action_keys(prog), prog.gap, ~chosen)
    floor = np.where(np.isnan(typical), prog.gap, np.minimum(prog.gap, typical))
    extra = np.where(chosen, prog.gap - floor, 0.0)
    # each rank's mean extra time per step, over the steps it ran
    per_rank = (
        pl.DataFrame({"rank": prog.rank, "step": prog.step, "extra": extra})
        .group_by("rank")
        .agg(mean=pl.col("extra").sum() / pl.col("step").n_unique())
    )
    size = int(max(prog.rank.max(), max(waits))) + 1
    waited, mean = np.zeros(size), np.zeros(size)
    waited[list(waits)] = list(waits.values())
    mean[per_rank["rank"].to_numpy()] = per_rank["mean"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        # the share of its extra time the rank waited: the same in every step
        share = np.where(mean > 0, np.clip(waited / mean, 0.0, 1.0), 0.0)[prog.rank]
    gap = np.where(chosen, prog.gap - share * extra, prog.gap)
    return Change(gap=gap.astype(prog.gap.dtype))


def without_excess(
    prog: Program, ranks: Iterable[int], steps: Iterable[int] | None = None
) -> Change:
    """These ranks without their persistent extra time, their variation kept: each of
    their gaps shorter by how much their median at that point of the step exceeds the
    other ranks' median there. Their jitter is the jitter finding's to remove; taking
    it too (as :func:`compute_like_others` does) would count it twice. With ``steps``,
    only those steps, their medians taken over them alone (a rank late in part of the
    run is late by what it was then)."""
    chosen = np.isin(prog.rank, list(ranks))
    within = np.ones(len(chosen), dtype=bool) if steps is None else np.isin(prog.step, list(steps))
    key, point = _position_keys(prog)
    own = _median_by(key, prog.gap, within)
    others = _median_by(point, prog.gap, ~chosen & within)
    with np.errstate(invalid="ignore"):
        excess = np.nan_to_num(np.clip(own - others, 0, None))
    gap = np.where(chosen & within, np.clip(prog.gap - excess, 0, None), prog.gap)
    return Change(gap=gap.astype(prog.gap.dtype))


def _position_keys(prog: Program) -> tuple[np.ndarray, np.ndarray]:
    """Per action: its point of the step (kind and position, the same on every rank),
    and that point on its rank. Kinds are int8: widened before they multiply."""
    width = int(prog.position.max()) + 1
    point = prog.kind.astype(np.int64) * width + prog.position
    return prog.rank.astype(np.int64) * 4 * width + point, point


def position_medians(prog: Program) -> np.ndarray:
    """Per action: the median over steps of the same rank's gap at the same position of
    the step (the rank's steady compute, without its step-to-step variation)."""
    key, _ = _position_keys(prog)
    return _median_by(key, prog.gap, np.ones(len(key), dtype=bool))


def calm_gaps(prog: Program) -> np.ndarray:
    """Per action: its rank's compute at that point of the step without jitter.

    Where the gaps spread evenly about their median (noise both ways), the median. Where
    they spread to the slow side (interference, OS noise, a busy neighbour: jitter that
    only adds time), the compute without it is near the fastest steps: towards the 10th
    percentile, as far as the skew goes, reached when the upper spread (90th percentile
    over the median) is three times the lower one (median over the 10th percentile).
    Measured on planted heavy-tailed jitter (extra compute drawn from a Lomax law,
    median 15 % of it): at the median, the replay left that median in and predicted
    6-9 % above the same job without jitter; this way within 1 %."""
    key, point = _position_keys(prog)
    frame = pl.DataFrame({"key": key, "point": point, "value": prog.gap})
    stats = frame.group_by("key").agg(
        pl.col("point").first(),
        lo=pl.col("value").quantile(0.1, "linear"),
        mid=pl.col("value").median(),
        hi=pl.col("value").quantile(0.9, "linear"),
    )
    # The shape of the jitter is the machine's: judged over the ranks at each point of
    # the step (one rank's few steps can look even by chance).
    stats = stats.with_columns(
        skew=((pl.col("hi") - pl.col("mid")) / (pl.col("mid") - pl.col("lo")))
        .fill_nan(None)
        .median()
        .over("point")
    )
    lookup = pl.DataFrame({"key": key}).join(stats, on="key", how="left", maintain_order="left")
    lo, mid = (lookup[c].fill_null(np.nan).to_numpy() for c in ("lo", "mid"))
    skew = lookup["skew"].fill_null(np.nan).to_numpy()
    with np.errstate(invalid="ignore"):
        toward = np.clip(np.nan_to_num((skew - 1) / (SKEWED - 1), nan=0.0, posinf=1.0), 0, 1)
    return mid - toward * np.nan_to_num(mid - lo)


#: Upper over lower spread of a rank's gaps at which jitter is taken as one-sided.
SKEWED = 3.0


def without_jitter(prog: Program) -> Change:
    """No compute jitter: every gap at its rank's calm value for that point of the step
    (:func:`calm_gaps`; persistent differences between ranks stay: that is a
    straggler's cost)."""
    calm = calm_gaps(prog)
    return Change(gap=np.minimum(prog.gap, np.where(np.isnan(calm), prog.gap, calm)))


def without_gaps(prog: Program, actions: np.ndarray) -> Change:
    """The given actions' gaps at their steady value (one-off stalls removed)."""
    typical = position_medians(prog)
    steady = np.minimum(prog.gap, np.where(np.isnan(typical), prog.gap, typical))
    return Change(gap=np.where(actions, steady, prog.gap))


def excess_gaps(prog: Program) -> tuple[np.ndarray, np.ndarray]:
    """Per action: gap minus its steady value, and the robust spread (1.4826 x MAD) of
    that excess over the steps at the same rank and point of the step."""
    typical = position_medians(prog)
    with np.errstate(invalid="ignore"):  # a damaged trace's absurd times stay absurd
        excess = np.nan_to_num(prog.gap - np.where(np.isnan(typical), prog.gap, typical))
    return excess, spread_over(prog, excess, np.ones(len(excess), dtype=bool))


def spread_over(prog: Program, excess: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Per action: the robust spread (1.4826 x MAD) of ``excess`` over the ``source``
    actions at the same rank and point of the step (0 where none is)."""
    key, _ = _position_keys(prog)
    return np.nan_to_num(_median_by(key, np.abs(excess), source) * 1.4826)


def _factor(prog: Program) -> np.ndarray:
    inst = prog.instances
    ops, ns = inst["op"].to_list(), inst["n"].to_list()
    return np.array([bus_factor(o, int(n)) or 0.0 for o, n in zip(ops, ns, strict=True)])


def transfers_at_rate(
    prog: Program, rate_gbps: float, alpha_ns: float = 0.0, which: np.ndarray | None = None
) -> Change:
    """Links at ``rate_gbps`` of bus bandwidth (a benchmark's β): each transfer takes
    at most α + its bytes at that rate, times the collectives it would share the link
    with at that speed (:func:`shared_model`)."""
    inst = prog.instances
    volume = inst["bytes"].to_numpy().astype(np.float64) * _factor(prog) / rate_gbps
    return transfers_within(prog, volume, alpha_ns, which)


def transfers_within(
    prog: Program, volume_ns: np.ndarray, alpha_ns: float = 0.0, which: np.ndarray | None = None
) -> Change:
    """Each transfer at most α + ``volume_ns`` (per instance: its bytes' time alone at
    some rate; nan leaves it as measured), times the collectives it would share the
    link with at that speed (:func:`shared_model`)."""
    return _cap_service(prog, shared_model(prog, alpha_ns, volume_ns), which)


#: Rounds of re-estimating how transfers at a new speed share the link.
_SHARING_ROUNDS = 4


def shared_model(prog: Program, fixed_ns: float, alone_ns: np.ndarray) -> np.ndarray:
    """Per instance: ``fixed_ns`` + ``alone_ns`` times the collectives of its stream it
    would be in service beside (as the measured ``concurrent``) at that speed, from its
    measured start, at most as many as measured. Sharing lengthens each transfer, which
    adds to the overlap: re-estimated a few rounds. Transfers slowed by the cause
    overlap because they are slow: two DDP buckets of 6 ms, issued 10 ms apart, each
    shared the link with the other for most of its 300 ms on a host starved of CPU."""
    inst, key = stream_order(prog.instances)
    start = (inst["last_enter"] + inst["queued_ns"].fill_null(0)).to_numpy()
    rows = inst["_row"].to_numpy()
    conc = inst["concurrency"].to_numpy()
    alone = np.asarray(alone_ns, dtype=np.float64)[rows]
    known = ~np.isnan(alone) & (inst["exit"].fill_null(-1).to_numpy() >= 0)
    measured = prog.instances["concurrent"].to_numpy()
    together = np.ones(len(rows))
    for _ in range(_SHARING_ROUNDS):
        length = fixed_ns + together[rows] * np.nan_to_num(alone)
        exit_ = np.where(known, start + length, -1).astype(np.int64)
        together[rows] = concurrent_in_service(key, start, exit_, conc)
        together = np.minimum(together, measured)
    return fixed_ns + together * np.asarray(alone_ns, dtype=np.float64)


#: A transfer's size class (a power of two) and its time alone on the link.
_SIZE_CLASS = pl.col("bytes").clip(lower_bound=1).log(2).floor().cast(pl.Int32)
_ALONE = pl.col("service_ns") / pl.col("concurrent")


def transfers_at_best(prog: Program, which: np.ndarray | None = None) -> Change:
    """Links at the run's own best: each transfer of a size class (power of two), op
    and locality no slower than the class's 5th percentile, per collective sharing."""
    inst = prog.instances.with_columns(size_class=_SIZE_CLASS, alone=_ALONE)
    best = inst.with_columns(
        best=pl.col("alone").quantile(0.05, "lower").over("op", "n", "size_class", "group")
    )["best"]
    alone = best.fill_null(np.nan).to_numpy()
    return _cap_service(prog, shared_model(prog, 0.0, alone), which)


def _cap_service(prog: Program, model: np.ndarray, which: np.ndarray | None) -> Change:
    service = prog.service.copy()
    ok = ~np.isnan(model) & ~np.isnan(service)
    if which is not None:
        ok &= which
    service[ok] = np.minimum(service[ok], model[ok])
    return Change(service=service)


def transfers_scaled(
    prog: Program, factor: float, which: np.ndarray, fixed_ns: float = 0.0
) -> Change:
    """The given transfers move ``factor`` of their bytes (0: free; 0.5: half, as BF16
    communication would): the part of each service time beyond ``fixed_ns`` (a
    collective's latency, which fewer bytes do not shorten) scales by ``factor``."""
    service = prog.service.copy()
    fixed = np.minimum(service[which], max(fixed_ns, 0.0))
    service[which] = fixed + (service[which] - fixed) * factor
    return Change(service=service)


#: Sizes the run's own latency is fitted over must span at least this ratio.
_FIT_SPAN = 2.0


def own_latency(prog: Program, which: np.ndarray) -> float | None:
    """The fixed part of a transfer (ns), from the run's own sizes: per op, group size
    and size class (power of two), the fastest transfers (10th percentile, each alone
    on the link) fitted as α + bytes x c over the classes. None when the chosen
    transfers hold too few sizes (less than a factor of two apart) to tell α from c."""
    inst = prog.instances.with_columns(alone=_ALONE, size_class=_SIZE_CLASS)
    usable = pl.col("alone").is_not_nan() & pl.col("alone").is_not_null()
    inst = inst.filter(pl.Series(which) & usable)
    if inst.height == 0:
        return None
    classes = inst.group_by("op", "n", "size_class").agg(
        x=pl.col("bytes").median(), t=pl.col("alone").quantile(0.1, "lower")
    )
    best: tuple[float, float] | None = None  # (span, alpha) of the op with the widest span
    for _, group in classes.group_by("op", "n"):
        x, t = group["x"].to_numpy().astype(float), group["t"].to_numpy().astype(float)
        if len(x) < 2 or x.max() < _FIT_SPAN * x.min():
            continue
        slope, alpha = np.polyfit(x, t, 1)
        if slope <= 0:
            continue
        alpha = float(np.clip(alpha, 0.0, t.min()))
        span = float(x.max() / x.min())
        if best is None or span > best[0]:
            best = (span, alpha)
    return None if best is None else best[1]


def small_coalesced(
    prog: Program, which: np.ndarray, alpha_ns: float, bytes_ns: np.ndarray
) -> Change:
    """The ``which`` collectives bucketed: those of a group in a step pay one latency
    (``alpha_ns``) between them, each its bytes' time (``bytes_ns``, per instance) on
    top, except that an asynchronous call after which a member computed more than one
    latency before the next stays apart from it: bucketed together, it would wait across
    that compute and lose the overlap it had (a DDP job's buckets during backward are
    not one burst); a blocking call had none to lose.
    Issuing them costs once, not once per call: a gap shorter than one latency right
    after a small blocking call returned (issue overhead, no compute in between) is
    gone, and so is the whole of a small call's own host time, from its issue to its
    wait straight after (a blocking call's dispatch, the tracer, the hand-off to the
    backend's thread, and whatever preempted the rank in between: on a busy host, a
    pause of milliseconds now and then, in proportion to the calls made). A call is
    never made longer than measured."""
    inst = prog.instances.with_row_index("_id").filter(pl.Series(which))
    if inst.height == 0:
        return Change()
    order = np.lexsort((prog.position, prog.step, prog.rank))
    same = (prog.rank[order][1:] == prog.rank[order][:-1]) & (
        prog.step[order][1:] == prog.step[order][:-1]
    )
    # a WAIT straight after its own POST: a blocking call (no compute beside its transfer)
    own_post = np.zeros(prog.n_actions, dtype=bool)
    own_post[order[1:]] = (
        same & (prog.kind[order][:-1] == POST) & (prog.inst[order][:-1] == prog.inst[order][1:])
    )
    blocking = np.zeros(len(prog.service), dtype=bool)
    waited = (prog.kind == WAIT) & own_post
    blocking[prog.inst[waited]] = True
    small = inst.sort("group", "step", "seq")
    ids = small["_id"].to_numpy()
    # per instance, the most any member computed before posting it
    posts = prog.kind == POST
    before = np.zeros(len(prog.service))
    np.maximum.at(before, prog.inst[posts], prog.gap[posts])
    computed = before[ids]
    first = small.select(
        (pl.col("group") != pl.col("group").shift(1)) | (pl.col("step") != pl.col("step").shift(1))
    ).to_series()
    # the previous call's transfer overlapped the compute before this one: bucketed
    # together, it would wait for that compute
    overlapped = np.r_[False, ~blocking[ids[:-1]]] & (computed > max(alpha_ns, 0.0))
    burst = np.cumsum(first.fill_null(True).to_numpy() | overlapped)
    m = np.bincount(burst)[burst].astype(np.float64)
    model = alpha_ns / m + np.nan_to_num(bytes_ns[ids], nan=0.0)
    service = prog.service.copy()
    service[ids] = np.minimum(service[ids], model)
    # issue overhead: a short gap right after a small blocking call returned
    is_small = np.zeros(len(prog.service), dtype=bool)
    is_small[ids] = True
    small_wait = (prog.kind == WAIT) & (prog.inst >= 0)
    small_wait &= is_small[np.where(prog.inst >= 0, prog.inst, 0)]
    follows = np.zeros(prog.n_actions, dtype=bool)
    follows[order[1:]] = same & small_wait[order[:-1]]
    overhead = (follows | small_wait) & (prog.gap < max(alpha_ns, 0.0)) | (small_wait & own_post)
    gap = np.where(overhead, 0.0, prog.gap)
    return Change(gap=gap, service=service)


def exits_aligned(prog: Program, ranks: Iterable[int]) -> Change:
    """These ranks' transfers end with the others': each instance ends when its other
    members saw it end, and the named ranks see it end then too (a slow link next to
    them no longer holds the ring's last step back)."""
    chosen = np.isin(prog.rank, list(ranks))
    waits = (prog.kind == WAIT) | (prog.kind == JOIN)
    others = waits & ~chosen
    inst = np.where(waits, prog.inst, 0)
    shift = np.full(len(prog.service), np.nan)
    if others.any():
        frame = pl.DataFrame({"inst": inst[others], "delta": prog.delta[others]})
        latest = frame.group_by("inst").agg(pl.col("delta").max())
        shift[latest["inst"].to_numpy()] = latest["delta"].to_numpy()
    shift = np.minimum(np.nan_to_num(shift, nan=0.0), 0.0)
    service = prog.service + shift
    delta = np.where(waits, prog.delta - shift[inst], prog.delta)
    delta = np.where(waits & chosen, np.minimum(delta, 0.0), delta)
    return Change(service=service, delta=delta)


def bursts(prog: Program) -> list[np.ndarray]:
    """Per rank and step, the calls issued in a burst after the step's longest compute:
    action indices, the POST after that compute first, then the POSTs that follow it
    with little compute between them (under a tenth of it), up to the step's first
    JOIN or END. One burst (of one call or more) per rank and step that posted any."""
    out: list[np.ndarray] = []
    order = np.lexsort((prog.position, prog.step, prog.rank))
    kind, g = prog.kind[order], prog.gap[order]
    rank, step = prog.rank[order], prog.step[order]
    bounds = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (step[1:] != step[:-1]), True])
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        posts = np.flatnonzero(kind[lo:hi] == POST) + lo
        if len(posts) == 0:
            continue
        longest = posts[np.argmax(g[posts])]
        big = g[longest]
        if big <= 0:
            continue
        burst = [longest]
        for a in range(longest + 1, hi):
            if kind[a] in (JOIN, END) or g[a] > 0.1 * big:
                break
            if kind[a] == POST:
                burst.append(a)
        out.append(order[np.asarray(burst)])
    return out


def ideal_overlap(prog: Program) -> Change:
    """Communication overlapped as well as the step's compute allows: every call is
    waited on only at the end of its step (as DDP joins its buckets), and calls issued
    in a burst after the step's longest compute (:func:`bursts`) are spread evenly over
    it (as if each bucket's gradients were ready at an even pace): over the part of it
    after the step's first backward pass began, where the trace marks one (gradients
    exist only from then on), else over all of it (an upper bound: forward's compute
    makes no gradient). A burst of one call has nothing to spread: re-bucketing it is
    :func:`syncpace.analysis.replay.rebucket.rebucketed`'s.

    Transfers issued together share the link (measured: gloo runs two at once). Spread,
    each shares it with as many as its spacing keeps in flight: its time alone (its
    measured service over the collectives it shared the link with) times its time alone
    over the spacing, at least once and at most as many as it measured beside it.
    Spaced beyond their time alone they run alone; closer, the link stays as busy as the
    bytes need, never faster than it measured (a transfer taking its time alone while
    others ran would carry more than the link)."""
    wait_on = prog.kind == JOIN
    gap = prog.gap.copy()
    together = prog.instances["concurrent"].to_numpy().astype(np.float64)
    alone = prog.service / np.maximum(together, 1.0)
    service = prog.service.copy()
    for burst in bursts(prog):
        if len(burst) < 2:
            continue
        first = burst[0]
        window = prog.gap[first]
        if np.isfinite(prog.backward[first]):
            window = float(np.clip(prog.t[first] - prog.backward[first], 0.0, window))
        share = window / len(burst)
        gap[first] = prog.gap[first] - window + share
        gap[burst[1:]] += share
        k = prog.inst[burst]
        k = k[(k >= 0) & ~np.isnan(alone[k]) & (alone[k] > 0)]
        in_flight = np.maximum(1.0, alone[k] / share) if share > 0 else together[k]
        service[k] = np.minimum(prog.service[k], alone[k] * in_flight)
    return Change(gap=gap, wait_on=wait_on, service=service)


def paced(factory: PacerFactory) -> Change:
    """Pacing on with the given pacer (policy, lag, A/B guard), run live in the replay."""
    return Change(pacer=factory)


def combine(changes: Sequence[Change]) -> Change:
    """Several causes removed at once: the shortest gap and transfer any of them gives,
    each completion offset as early as any makes it, joins as the first that sets them."""

    def pick(name: str) -> list[np.ndarray]:
        return [getattr(c, name) for c in changes if getattr(c, name) is not None]

    gaps, services, deltas, waits = pick("gap"), pick("service"), pick("delta"), pick("wait_on")
    return Change(
        gap=np.minimum.reduce(gaps) if gaps else None,
        service=np.fmin.reduce(services) if services else None,
        delta=np.minimum.reduce(deltas) if deltas else None,
        wait_on=waits[0] if waits else None,
    )
