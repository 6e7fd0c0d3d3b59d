"""A trace rebuilt as a program the replay can run again.

Per rank the trace becomes a sequence of actions in the order the rank did them:

* ``POST`` — the rank issues its part of a collective instance (at ``enter_ns``);
* ``WAIT`` — it blocks on that work (at ``wait_ns``, or at once for a blocking call)
  and goes on when the instance has completed for it;
* ``JOIN`` — it needs the step's asynchronous works done before it goes on (how DDP's
  reducer treats the futures of its buckets: backward's end waits for all of them);
* ``END`` — the step ends (``end_ns``).

Between two actions a rank computes: the *gap* is how long it ran on its own after the
previous action returned (a WAIT returns when its work completed, the others at once).
A collective instance is a synchronisation of its members plus a transfer: it starts
when every member has posted it and one of its stream's slots is free (the backend's
measured concurrency, see ``collectives.with_queueing``), and it ends its measured
service time later; each member sees it end at its own offset (``delta``: ring
positions finish at different times).

Which calls the rank waited on comes from the trace: ``timing`` ``wait``/``call`` are
waits (an ``async_op`` work waited late only bounds its completion, see
``collectives.late_waited``); ``future`` works of a step are joined at the rank's first
action after the last of them completed; calls of other producers (simulator) are
waits when no rank ever issued a call before its previous one completed, joins
otherwise. A call that failed or was never observed
completing is not waited on: the time it took stays in the next gap.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import polars as pl

from syncpace.analysis import kernels
from syncpace.analysis.collectives import EventTimes, late_waited

POST, WAIT, JOIN, END = 0, 1, 2, 3
KINDS = ("post", "wait", "join", "end")
#: A future's completion callback runs late (it needs the GIL): an action this share of
#: the rank's step before the recorded completion may still be where it was joined.
JOIN_SLACK = 0.05
#: Replays are bounded: at most this many events (a contiguous block of steps).
MAX_EVENTS = 200_000


@dataclass(frozen=True, eq=False)
class Program:
    """Actions of every rank (sorted by replay batch, rank and program order), the
    instances they post, and the measured iteration times of the replayed steps.

    Times are float64 ns relative to ``base`` (the earliest start of a replayed step).
    """

    # per action
    rank: np.ndarray
    step: np.ndarray
    kind: np.ndarray
    inst: np.ndarray  # instance id (-1 for END)
    t: np.ndarray  # measured time of the action (JOIN: its step's end)
    gap: np.ndarray  # measured compute before it (0 for JOIN)
    delta: np.ndarray  # WAIT/JOIN: the rank's completion minus the instance's
    wait_on: np.ndarray  # WAIT/JOIN in force in the measured program
    position: np.ndarray  # index of the action among its rank's actions of that step
    first_post: np.ndarray  # the rank's first POST of the step (where pacing delays go)
    backward: np.ndarray  # when the action's step's first backward pass began (nan: unknown)
    # replay batches: batch b runs actions batch_ptr[b]:batch_ptr[b+1] (one segment per
    # rank, in order), then resolves instance batch_inst[b] (none for the last batch)
    batch_ptr: np.ndarray
    batch_inst: np.ndarray
    seg: np.ndarray  # per action: its segment (global index)
    seg_pos: np.ndarray  # per action: its position in the segment
    seg_ptr: np.ndarray  # per batch: its segments seg_ptr[b]:seg_ptr[b+1]
    seg_rank: np.ndarray  # per segment
    seg_last: np.ndarray  # per segment: its last action
    seg_width: np.ndarray  # per batch: the longest segment
    # per instance (by id)
    service: np.ndarray  # measured service time (nan: never completed)
    stream: np.ndarray
    concurrency: np.ndarray
    member_ptr: np.ndarray  # POST actions of instance k: member_action[member_ptr[k]:...]
    member_action: np.ndarray
    end_measured: np.ndarray  # measured completion (nan: unknown)
    # per rank (indexed by rank id)
    start: np.ndarray
    # per replayed step
    steps: np.ndarray
    measured: np.ndarray  # measured iteration time of each step
    base: int
    instances: pl.DataFrame  # the run's instance frame (row = instance id)
    #: actions whose measured time came before the return the model gives the action
    #: before it (clamped to a zero gap): places where the model does not fit the trace
    violations: int
    events: int

    @property
    def n_actions(self) -> int:
        return len(self.kind)

    @property
    def n_batches(self) -> int:
        return len(self.batch_inst)

    @property
    def ranks(self) -> np.ndarray:
        return np.unique(self.rank)


def replayable(meta: dict[int, dict]) -> bool:
    """Whether a run's times mean what the program needs: the tracer's (or the
    simulator's) host-side calls, waits and iteration boundaries. A trace imported from
    another tool (``import`` in its metadata) times other things — kernels on the
    device, profiler spans, iterations that are windows of wall time — so its findings
    rest on the measured rules, not on a replay."""
    return not any("import" in m for m in meta.values())


#: Program fields indexed by instance id, and those holding instance ids.
_PER_INSTANCE = ("service", "stream", "concurrency", "end_measured")
_INSTANCE_IDS = ("inst", "batch_inst")


def same_program(a: Program | None, b: Program | None) -> bool:
    """Whether two programs of one run are the same program: every action and
    instance equal, instances named by (group, pair, seq) rather than by their row in
    the run's frame (which differs between a run read whole and one read a window at a
    time)."""
    if a is None or b is None:
        return a is b
    ka, kb = _instance_keys(a), _instance_keys(b)
    for f in dataclasses.fields(Program):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "instances":
            continue
        if f.name in _INSTANCE_IDS:
            x, y = _named(x, ka), _named(y, kb)
        elif f.name in _PER_INSTANCE:
            x, y = x[np.argsort(ka)], y[np.argsort(kb)]
        elif f.name in ("member_ptr", "member_action"):
            continue  # compared as the members of each named instance below
        if isinstance(x, np.ndarray):
            if x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
                return False
        elif x != y:
            return False
    return _members(a, ka) == _members(b, kb)


def _instance_keys(p: Program) -> np.ndarray:
    """Per instance id: its rank among the run's instances by (group, pair, seq)."""
    canon = p.instances.select(pl.struct("group", "pair", "seq").rank("dense"))
    return canon.to_series().to_numpy().astype(np.int64)


def _named(ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    return np.where(ids >= 0, keys[np.maximum(ids, 0)], -1)


def _members(p: Program, keys: np.ndarray) -> dict[int, tuple[int, ...]]:
    ptr, act = p.member_ptr, p.member_action
    return {
        int(keys[k]): tuple(act[ptr[k] : ptr[k + 1]].tolist())
        for k in range(len(ptr) - 1)
        if ptr[k + 1] > ptr[k]
    }


def build_program(
    events: pl.DataFrame,
    times: EventTimes,
    instances: pl.DataFrame,
    rank_steps: pl.DataFrame,
    global_steps: pl.DataFrame,
    rank_step: pl.DataFrame,
    *,
    max_events: int | None = None,
) -> Program | None:
    """The program of a run (``None`` when there is nothing to replay).

    ``events`` are the events ``times`` was matched from (``collectives.usable_events``,
    aligned row by row), at least those of the steps :func:`replayed_steps` picks;
    ``times.instance`` indexes rows of ``instances``, the run's instance frame. The
    iteration frames ``rank_steps``, ``global_steps`` and ``rank_step``
    (``analysis.iterations``, ``collectives.rank_step_arrivals``) are the whole run's.
    """
    if events.height != len(times.rank) or events.height == 0 or rank_steps.height == 0:
        return None
    steps = replayed_steps(rank_steps, rank_step, max_events)
    in_window = np.isin(times.step, steps)
    rank_steps = rank_steps.filter(pl.col("step").is_in(steps.tolist()))
    base = int(rank_steps["start_ns"].min())  # type: ignore[arg-type]
    ev = _event_table(events, times, instances, in_window, base)
    if ev.height == 0:
        return None
    acts, violations = _actions(ev, instances, rank_steps, base)
    return _assemble(acts, ev, instances, rank_steps, global_steps, steps, base, violations)


def replayed_steps(
    rank_steps: pl.DataFrame, rank_step: pl.DataFrame, max_events: int | None = None
) -> np.ndarray:
    """The steps a run's replay covers: the first contiguous block of its steps whose
    events (``rank_step``'s ``collectives`` per rank and step) fit in ``max_events``
    (:data:`MAX_EVENTS`), at least two. The same steps whether the run was read whole
    or a window at a time."""
    max_events = MAX_EVENTS if max_events is None else max_events
    steps = np.sort(rank_steps["step"].unique().to_numpy())
    if rank_step.height == 0 or int(rank_step["collectives"].sum()) <= max_events:
        return steps
    per = rank_step.group_by("step").agg(pl.col("collectives").sum())
    at = np.searchsorted(steps, per["step"].to_numpy()).clip(0, len(steps) - 1)
    counts = np.bincount(at, weights=per["collectives"].to_numpy(), minlength=len(steps))
    keep = int(np.searchsorted(np.cumsum(counts), max_events, side="right"))
    return steps[: max(keep, 2)]


def _event_table(
    events: pl.DataFrame,
    t: EventTimes,
    instances: pl.DataFrame,
    in_window: np.ndarray,
    base: int,
) -> pl.DataFrame:
    """One row per event of the window: who, when, which instance, how it was waited."""
    everything = bool(in_window.all())  # the usual case: no copies of 10M-row columns
    rows = slice(None) if everything else in_window
    ev = events if everything else events.filter(pl.Series(in_window))
    late = late_waited(events, t)[rows]
    ended = instances["exit"].fill_null(-1).to_numpy()
    inst = t.instance[rows]
    enter, exit_ = t.enter[rows], t.exit[rows]
    end_of = ended[inst]
    completed = (exit_ >= 0) & (ev["status"] == "completed").to_numpy()
    wait_ns = ev["wait_ns"].to_numpy() if "wait_ns" in ev.columns else np.full(len(inst), -1)
    frame = pl.DataFrame(
        {
            "rank": t.rank[rows],
            "step": t.step[rows],
            "inst": inst,
            "enter": (enter - base).astype(np.float64),
            "exit": np.where(completed, exit_ - base, np.nan).astype(np.float64),
            "inst_end": np.where(end_of >= 0, end_of - base, np.nan).astype(np.float64),
            "wait": (np.where(wait_ns >= enter, wait_ns, enter) - base).astype(np.float64),
            "timing": ev["timing"],
            "late": late,
            "completed": completed & (end_of >= 0),
        }
    )
    # Producers that do not say how a call was waited on (the simulator): when no rank
    # ever issued a call before its previous one completed, each call was waited on;
    # otherwise calls run asynchronously and are joined at the end of their step.
    frame = frame.sort("rank", "enter", maintain_order=True)
    prev_exit = pl.col("exit").shift(1).over("rank")
    overlapped = bool(frame.select((pl.col("enter") < prev_exit).any()).item())
    frame = frame.with_columns(overlapped=pl.lit(overlapped))
    explicit = pl.col("timing").is_in(["wait", "call"])
    other = ~explicit & (pl.col("timing") != "future")
    blocking = pl.col("completed") & (explicit | (other & ~pl.col("overlapped")))
    return frame.with_columns(blocking=blocking)


def _actions(
    ev: pl.DataFrame, instances: pl.DataFrame, rank_steps: pl.DataFrame, base: int
) -> tuple[pl.DataFrame, int]:
    """The sorted actions of every rank with their measured gaps. Ties (one rank's
    actions at the same time) go by the instance's (group, pair, seq), not its row in
    ``instances``: the order is the same however the run's frame was put together."""
    ends = rank_steps.select(
        "rank",
        "step",
        end=(pl.col("end_ns") - base).cast(pl.Float64),
        step_len=(pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64),
        pacing=pl.col("pacing_delay_ns").cast(pl.Float64),
    ).with_columns(pl.col("rank").cast(pl.Int64))
    ev = ev.with_columns(pl.col("rank").cast(pl.Int64)).join(ends, on=["rank", "step"], how="left")
    # the offset of this rank's completion from the instance's; a bound only (late wait)
    # is no later than the instance's own
    delta = pl.col("exit") - pl.col("inst_end")
    delta = pl.when(pl.col("late")).then(pl.min_horizontal(delta, 0.0)).otherwise(delta)
    posts = ev.select(
        "rank",
        "step",
        "inst",
        t="enter",
        kind=pl.lit(POST, pl.Int32),
        delta=pl.lit(0.0),
        on=pl.lit(False),
    )
    waits = ev.filter(pl.col("blocking")).select(
        "rank", "step", "inst", t="wait", kind=pl.lit(WAIT, pl.Int32), delta=delta, on=pl.lit(True)
    )
    joins = _joins(ev, pl.concat([posts, waits, ends_rows(ends)], how="vertical_relaxed"))
    parts = [p.with_columns(pl.col("inst").cast(pl.Int64)) for p in (posts, waits, joins)]
    acts = pl.concat([*parts, ends_rows(ends)], how="vertical_relaxed")
    # at equal times a JOIN comes first: it is the wait the action after it needed
    order = pl.col("kind").replace_strict({JOIN: 0, POST: 1, WAIT: 2, END: 3})
    canon = instances.select(pl.struct("group", "pair", "seq").rank("dense")).to_series()
    key = np.r_[-1, canon.to_numpy().astype(np.int64)]  # END (inst -1) first
    acts = acts.with_columns(_order=order, _key=pl.Series(key[acts["inst"].to_numpy() + 1]))
    acts = acts.sort("rank", "t", "_order", "_key").drop("_order", "_key")
    inst_end = ev.group_by("inst").agg(pl.col("inst_end").first())
    acts = acts.join(inst_end, on="inst", how="left", maintain_order="left")
    # measured returns: POST and END at once, WAIT when its work is done, JOIN when the
    # rank's previous return and its work are both done (a run of JOINs: a running max)
    x = pl.col("inst_end") + pl.col("delta")
    own = (
        pl.when(pl.col("kind") == WAIT)
        .then(pl.when(pl.col("on")).then(pl.max_horizontal("t", x)).otherwise("t"))
        .when(pl.col("kind") == JOIN)
        .then(pl.when(pl.col("on")).then(x).otherwise(float("-inf")))
        .otherwise("t")
    )
    acts = acts.with_columns(own=own)
    starts = rank_steps.group_by("rank").agg(
        first=(pl.col("start_ns").sort_by("step").first() - base).cast(pl.Float64)
    )
    acts = acts.join(starts.with_columns(pl.col("rank").cast(pl.Int64)), on="rank", how="left")
    acts = acts.join(_resumes(rank_steps, base), on=["rank", "step"], how="left")
    # sorted by rank: each rank's actions are one run of rows, each JOIN with the actions
    # before it back to the last other one (kernels: no hash of every row into a group)
    rank, kind = acts["rank"].to_numpy(), acts["kind"].to_numpy()
    rank_start = kernels.run_starts(rank)
    ret = kernels.run_cummax(acts["own"].to_numpy(), rank_start | (kind != JOIN))
    prev = np.r_[np.nan, ret[:-1]]
    prev = np.where(rank_start, acts["first"].to_numpy(), prev)
    # a step after one left out (another kind of iteration) starts at its own start:
    # the time between is not this step's compute
    step = acts["step"].to_numpy()
    new_step = np.r_[True, step[1:] != step[:-1]] & ~rank_start
    resume = acts["resume"].to_numpy().astype(np.float64)
    prev = np.where(new_step & ~np.isnan(resume), np.fmax(prev, resume), prev)
    raw = np.where(kind == JOIN, 0.0, acts["t"].to_numpy() - prev)
    violations = int((raw < -1_000).sum())
    position, order = kernels.grouped_position(rank, acts["step"].to_numpy())
    posts = (kind == POST).astype(np.int64)
    in_group = np.empty(len(order), dtype=np.int64)
    in_group[order] = kernels.run_cumsum(posts[order], position[order] == 0)
    return acts.with_columns(
        ret=pl.Series(ret, nan_to_null=True),
        gap=pl.Series(np.clip(raw, 0.0, None), nan_to_null=True),
        position=pl.Series(position, dtype=pl.Int64),
        first_post=pl.Series((kind == POST) & (in_group == 1)),
    ).drop("own", "first", "resume"), violations


def _resumes(rank_steps: pl.DataFrame, base: int) -> pl.DataFrame:
    """Per (rank, step) whose previous step is not in ``rank_steps``, but an earlier one
    is: the step's start (from ``base``); the replay's gaps restart there."""
    return (
        rank_steps.sort("rank", "step")
        .with_columns(_prev=pl.col("step").shift(1).over("rank"))
        .filter(pl.col("_prev").is_not_null() & (pl.col("_prev") != pl.col("step") - 1))
        .select(
            pl.col("rank").cast(pl.Int64),
            "step",
            resume=(pl.col("start_ns") - base).cast(pl.Float64),
        )
    )


def ends_rows(ends: pl.DataFrame) -> pl.DataFrame:
    return ends.select(
        "rank",
        "step",
        inst=pl.lit(-1, pl.Int64),
        t="end",
        kind=pl.lit(END, pl.Int32),
        delta=pl.lit(0.0),
        on=pl.lit(False),
    )


def _joins(ev: pl.DataFrame, actions: pl.DataFrame) -> pl.DataFrame:
    """JOIN rows. A step's asynchronous works (futures) are joined together at the
    rank's first action of the step after it posted the last of them and once all of
    them have completed (how DDP's reducer
    waits for its buckets at the end of backward; their callbacks may run a little
    late: ``JOIN_SLACK`` of the step). Blocking calls get a JOIN too, at the step's end
    and not in force: where ideal overlap would wait for them."""
    slack = JOIN_SLACK * pl.col("step_len")
    asyncj = ev.filter(pl.col("completed") & ~pl.col("blocking") & pl.col("end").is_not_null())
    latest = asyncj.group_by("rank", "step").agg(
        latest=pl.col("exit").max(),
        posted=pl.col("enter").max(),
        step_len=pl.col("step_len").first(),
    )
    at = (
        actions.select("rank", "step", "t")
        .join(latest, on=["rank", "step"])
        .filter(pl.col("t") >= pl.col("latest") - slack, pl.col("t") > pl.col("posted"))
        .group_by("rank", "step")
        .agg(at=pl.col("t").min())
    )
    asyncj = asyncj.join(at, on=["rank", "step"], how="inner")
    blocking = ev.filter(pl.col("blocking") & pl.col("end").is_not_null()).with_columns(
        at=pl.col("end")
    )
    rows = []
    for frame, on in ((asyncj, True), (blocking, False)):
        capped = pl.min_horizontal("exit", "at") - pl.col("inst_end")
        capped = pl.when(pl.col("late")).then(pl.min_horizontal(capped, 0.0)).otherwise(capped)
        rows.append(
            frame.select(
                "rank",
                "step",
                "inst",
                t="at",
                kind=pl.lit(JOIN, pl.Int32),
                delta=capped,
                on=pl.lit(on),
            )
        )
    return pl.concat(rows, how="vertical_relaxed")


def _assemble(
    acts: pl.DataFrame,
    ev: pl.DataFrame,
    instances: pl.DataFrame,
    rank_steps: pl.DataFrame,
    global_steps: pl.DataFrame,
    steps: np.ndarray,
    base: int,
    violations: int,
) -> Program:
    n_inst = instances.height
    marks = rank_steps.select(  # iterations.rank_steps: -1 where no backward was seen
        pl.col("rank").cast(acts.schema["rank"]),
        pl.col("step").cast(acts.schema["step"]),
        _backward=pl.when(pl.col("backward_ns") >= 0)
        .then((pl.col("backward_ns") - base).cast(pl.Float64))
        .otherwise(None),
    )
    acts = acts.join(marks, on=["rank", "step"], how="left", maintain_order="left")
    present = np.unique(ev["inst"].to_numpy())
    last = instances["last_enter"].to_numpy()[present]
    stream_all = (
        instances.select(pl.struct("group", "pair").rank("dense").cast(pl.Int64) - 1)
        .to_series()
        .to_numpy()
    )
    seqs = instances["seq"].to_numpy()[present]
    order = present[np.lexsort((seqs, stream_all[present], last))]
    proc = np.full(n_inst, -1, dtype=np.int64)
    proc[order] = np.arange(len(order))
    n_batches = len(order)
    # Batch of an action: the earliest-processed instance among the rank's POSTs at or
    # after it (its POST and everything the rank did before must be replayed first).
    kind = acts["kind"].to_numpy()
    inst = acts["inst"].to_numpy()
    key = np.where(kind == POST, proc[np.where(inst >= 0, inst, 0)], n_batches)
    acts = acts.with_columns(_key=pl.Series(key, dtype=pl.Int64))
    acts = acts.with_columns(batch=pl.col("_key").reverse().cum_min().reverse().over("rank"))
    acts = acts.with_row_index("_order").sort("batch", "rank", "_order")
    batch = acts["batch"].to_numpy()
    rank = acts["rank"].to_numpy().astype(np.int64)
    kind = acts["kind"].to_numpy().astype(np.int8)
    inst = acts["inst"].to_numpy().astype(np.int64)
    n = len(kind)
    batch_ptr = np.searchsorted(batch, np.arange(n_batches + 2)).astype(np.int64)
    new_seg = (
        np.r_[True, (batch[1:] != batch[:-1]) | (rank[1:] != rank[:-1])] if n else np.zeros(0, bool)
    )
    seg = np.cumsum(new_seg) - 1
    seg_start = np.flatnonzero(new_seg)
    seg_pos = np.arange(n) - seg_start[seg]
    seg_rank = rank[seg_start]
    seg_last = np.r_[seg_start[1:] - 1, n - 1] if n else np.zeros(0, np.int64)
    seg_batch = batch[seg_start]
    seg_ptr = np.searchsorted(seg_batch, np.arange(n_batches + 2)).astype(np.int64)
    seg_len = seg_last - seg_start + 1
    width = np.zeros(n_batches + 1, dtype=np.int64)
    if len(seg_len):
        np.maximum.at(width, np.minimum(seg_batch, n_batches), seg_len)
    # members of each instance: its POST actions
    post_rows = np.flatnonzero(kind == POST)
    by_inst = post_rows[np.argsort(inst[post_rows], kind="stable")]
    member_ptr = np.searchsorted(inst[by_inst], np.arange(n_inst + 1)).astype(np.int64)
    service = instances["service_ns"].cast(pl.Float64).fill_null(np.nan).to_numpy()
    ended = instances["exit"].cast(pl.Float64).fill_null(np.nan).to_numpy() - base
    starts = np.full(int(rank.max()) + 1, np.nan)
    first = rank_steps.group_by("rank").agg(pl.col("start_ns").sort_by("step").first())
    starts[first["rank"].to_numpy()] = first["start_ns"].to_numpy() - base
    measured = (
        (global_steps.filter(pl.col("step").is_in(steps.tolist())).sort("step")["time_ns"])
        .to_numpy()
        .astype(np.float64)
    )
    return Program(
        rank=rank,
        step=acts["step"].to_numpy().astype(np.int64),
        kind=kind,
        inst=inst,
        t=acts["t"].to_numpy(),
        gap=acts["gap"].to_numpy(),
        delta=acts["delta"].fill_null(0.0).to_numpy(),
        wait_on=acts["on"].to_numpy(),
        position=acts["position"].to_numpy().astype(np.int64),
        first_post=acts["first_post"].to_numpy(),
        backward=acts["_backward"].cast(pl.Float64).fill_null(np.nan).to_numpy(),
        batch_ptr=batch_ptr,
        batch_inst=order.astype(np.int64),
        seg=seg.astype(np.int64),
        seg_pos=seg_pos.astype(np.int64),
        seg_ptr=seg_ptr,
        seg_rank=seg_rank,
        seg_last=seg_last.astype(np.int64),
        seg_width=width,
        service=service,
        stream=stream_all,
        concurrency=instances["concurrency"].to_numpy().astype(np.int64),
        member_ptr=member_ptr,
        member_action=by_inst.astype(np.int64),
        end_measured=ended,
        start=starts,
        steps=steps,
        measured=measured,
        base=base,
        instances=instances,
        violations=violations,
        events=ev.height,
    )
