"""Metrics of a run of any length: the trace read a window of steps at a time.

The per-event computations of the metrics are local to an iteration (a collective
instance belongs to one step; arrivals, lateness, waits and the transfer union are per
rank and step), so a run is measured in three stages that never hold all its events:

1. **scan** every rank (:func:`syncpace.trace.read.index.scan_rank`): validate its files to
   their end, keep its steps, its account and the index of its events;
2. **windows** of steps (:func:`window_partial`): read every rank's events of those
   steps (:func:`~syncpace.trace.read.window.read_window`), match them into instances and
   reduce them per (rank, step) — the same functions :func:`compute_metrics` runs;
   what a window looks back at (each rank's call before its first, for the own-gap
   share of lateness) comes from the scan;
3. **finish** (:func:`finish`): concatenate the small per-instance and per-(rank, step)
   results (ordered as the in-memory path orders them), derive what looks across
   windows (queueing behind the previous collective of a group), and compute the
   run-level aggregates with :func:`syncpace.analysis.metrics.from_parts`; the
   replay's program (:mod:`syncpace.analysis.replay`, a bounded block of steps) from
   those steps' events read once more.

The stages are plain functions over picklable values: :func:`stream_metrics` runs
them in this process, :mod:`syncpace.analysis.distributed` on a Dask cluster. Memory is
bounded by one window (about :data:`WINDOW_EVENTS` events) plus one record batch per
rank plus the results, which grow with ranks x steps and instances, not with events.
The result equals :func:`~syncpace.analysis.metrics.compute_metrics` on the loaded
trace (tests compare them exactly); see docs/streaming.md for the two assumptions
that makes on the input (a call's instance lies within one step; a rank's calls of
later steps do not enter before its calls of earlier ones).

One module of ~700 lines: the three stages share the picklable records that pass
between them (and between Dask workers), and the equality with ``compute_metrics`` is
easiest to keep when the stages are read together; the read path itself is in
:mod:`syncpace.trace.read`, the frames in :mod:`syncpace.analysis.frames`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from syncpace import allocators
from syncpace.analysis import (
    collectives,
    iterations,
    kernels,
    kinds,
    overlap,
    parallelism,
    timebase,
)
from syncpace.analysis.frames import ANALYSIS_COLUMNS, analysis_frame, carry
from syncpace.analysis.hang.inputs import hang_input
from syncpace.analysis.hang.measure import analyze_hang
from syncpace.analysis.metrics import RunMetrics, compute_metrics, from_parts
from syncpace.analysis.replay import (
    Program,
    build_program,
    replayable,
    replayed_steps,
    same_program,
)
from syncpace.analysis.timebase import TimeBase
from syncpace.analysis.timeline import IterationSample, pick_iterations, sample_iterations
from syncpace.trace import journal, schema
from syncpace.trace.read.index import RankScan, scan_rank
from syncpace.trace.read.meta import TraceMeta, read_metadata, segment_files
from syncpace.trace.read.sweep import CannotSweep, Sweep
from syncpace.trace.read.window import BatchCache, read_steps, read_window
from syncpace.trace.reader import Trace, assemble_trace, load_trace

#: Events read and matched together (a window of steps of every rank; at least one step).
WINDOW_EVENTS = 500_000
#: Events the replay's two iterations may hold when read again after the windows.
REPLAY_EVENTS = WINDOW_EVENTS


_NONE = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Context:
    """What a window's events are measured against, from the whole run's steps, and on
    which clock (:mod:`~syncpace.analysis.timebase`): ``read_device`` reads the device
    times and counts the calls lacking them (some rank declares a device clock);
    ``device`` measures on them. The run's rule needs every window's count, so a run is
    measured on the device clock first and again on the host's if some call lacked
    device time (a mixed run, rare: two passes)."""

    cut: int | None  # the warm-up: calls some rank made in an earlier step are left out
    last_step: np.ndarray  # per rank (by rank): its last iteration boundary, -1 for none
    read_device: bool = False
    device: bool = False

    @property
    def columns(self) -> tuple[str, ...]:
        """The event columns a window reads: the device times only where declared (the
        host-only path reads what it always read)."""
        return ANALYSIS_COLUMNS + timebase.DEVICE_COLUMNS if self.read_device else ANALYSIS_COLUMNS

    def on_host(self) -> Context:
        """The same context measuring on host time (still counting device times)."""
        return dataclasses.replace(self, device=False)

    @staticmethod
    def of(
        world_size: int, steps: list[pa.Table], warmup_steps: int, *, device: bool = False
    ) -> Context:
        """As :func:`~syncpace.analysis.metrics.compute_metrics` cuts the warm-up and
        finds the calls after each rank's last iteration; ``device``: some rank declares
        a device clock (its times are read, and measured on until a call lacks them)."""
        found = [t.column("step") for t in steps if t.num_rows]
        max_step = max((int(pc.max(c).as_py()) for c in found), default=0)
        cut = warmup_steps if warmup_steps and max_step >= warmup_steps else None
        last = np.full(world_size, -1, dtype=np.int64)
        for t in steps:
            if not t.num_rows:
                continue
            step = t.column("step").to_numpy()
            if cut is not None:
                step = step[step >= cut]
            if len(step):
                last[int(t.column("rank")[0].as_py())] = int(step.max())
        return Context(cut, last, device, device)


@dataclass(frozen=True)
class Plan:
    """The scanned run and its windows of steps ``[lo, hi)``."""

    index: TraceMeta
    scans: tuple[RankScan, ...]
    first: int  # the first step analysed (after the warm-up)
    windows: tuple[tuple[int, int], ...]
    #: What a window needs of the whole run (the warm-up cut, each rank's last step).
    context: Context = dataclasses.field(default_factory=lambda: Context(None, _NONE))

    @property
    def events(self) -> int:
        return sum(s.events for s in self.scans)

    def light(self) -> tuple[RankScan, ...]:
        """The scans without their steps: all a window needs, cheap to ship."""
        empty = schema.STEPS.empty_table()
        return tuple(dataclasses.replace(s, steps=empty) for s in self.scans)


@dataclass(frozen=True)
class Partial:
    """One window's results: instances (:data:`~syncpace.analysis.collectives.BASE_COLUMNS`),
    per (rank, step) arrivals and communication, events left out, events read."""

    instances: pl.DataFrame
    rank_step: pl.DataFrame
    comm: pl.DataFrame
    dropped: int
    events: int
    trailing: pl.DataFrame  # calls after every member's last iteration (kept apart)
    counts: pl.DataFrame  # events per (group, op, timing, rank), for the parallelism
    tail: tuple[np.ndarray, np.ndarray, np.ndarray]  # per rank: its last call's enter, exit
    #: completed calls and those lacking device time (counted where the context reads them)
    calls: int = 0
    lacking: int = 0
    #: per step, its calls' signature (analysis.kinds: iterations of other kinds)
    signatures: dict[int, kinds.Signature] = dataclasses.field(default_factory=dict)


def scan(
    path: str | Path,
    *,
    allow_missing_ranks: bool = True,
    mapper: Callable[..., Iterable[RankScan]] = map,
) -> tuple[TraceMeta, list[RankScan]]:
    """Validate the run directory and every rank's files (``mapper`` over ranks)."""
    index = read_metadata(path, allow_missing_ranks=allow_missing_ranks)
    ranks = index.ranks
    rotated = segment_files(index.path)
    return index, list(mapper(scan_rank, [index] * len(ranks), ranks, [rotated] * len(ranks)))


def plan(
    index: TraceMeta,
    scans: list[RankScan],
    *,
    warmup_steps: int = 1,
    window_events: int = WINDOW_EVENTS,
) -> Plan:
    """The windows of steps over ``scans``: about ``window_events`` events each,
    aligned to multiples of their length, after the warm-up (as
    :func:`~syncpace.analysis.metrics.compute_metrics` leaves it out)."""
    steps = [s.steps.column("step") for s in scans if s.steps.num_rows]
    max_step = max((int(pa.compute.max(c).as_py()) for c in steps), default=0)
    cut = warmup_steps if warmup_steps and max_step >= warmup_steps else None
    los = [int(f.lo.min()) for s in scans for f in s.files if len(f.lo)]
    his = [int(f.hi.max()) for s in scans for f in s.files if len(f.hi)]
    declared = timebase.declared(index.meta)
    context = Context.of(index.world_size, [s.steps for s in scans], warmup_steps, device=declared)
    if not los:
        return Plan(index, tuple(scans), cut or 0, (), context)
    start, end = min(los), max(his) + 1
    total = sum(s.events for s in scans)
    width = max(1, int(window_events * max(end - start, 1) / max(total, 1)))
    # No narrower than a typical batch's steps: a window reads every batch reaching
    # into it, so narrower windows would decode each batch several times.
    spans = [f.hi - f.lo + 1 for s in scans for f in s.files if len(f.lo)]
    if spans and window_events > 1:
        width = max(width, int(np.median(np.concatenate(spans))))
    # The warm-up is read with the first step after it: a call some rank made in it is
    # left out whole (compute_metrics' rule), so both must be in one window.
    head = max((start // width + 1) * width, (cut or 0) + 1)
    bounds = [start, *range(head, end, width), end]
    windows = tuple((a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a)
    return Plan(index, tuple(scans), cut or 0, windows, context)


def window_partial(
    scans: tuple[RankScan, ...],
    world_size: int,
    first: int,
    window: tuple[int, int],
    cache: BatchCache | None = None,
    context: Context | None = None,
    previous: np.ndarray | None = None,
) -> Partial:
    """Match and reduce the events of steps ``window`` of every rank (``previous``:
    each rank's call before the window, from the scans' tails when not given)."""
    lo, hi = window
    context = context or Context(None, _NONE)
    table = read_window(scans, lo, hi, cache=cache, columns=context.columns)
    if previous is None:
        if context.device:  # the scans keep each step's last call in host time only
            raise ValueError("on the device clock the call before a window must be given")
        previous = carry(list(scans), world_size, first, lo)
    return partial(table, previous, context)


def partial(table: pa.Table, previous: np.ndarray, context: Context) -> Partial:
    """One window's results from its events (``previous``: each rank's call before),
    by :func:`~syncpace.analysis.metrics.compute_metrics`' rules: the warm-up's calls
    and the calls after the last iteration left out, whole."""
    events, trailing, (calls, lacking) = _analysed(table, context, categorical=True)
    del table
    counts = _counts(events)
    signatures = kinds.step_signatures(events)
    m = collectives.match(events, previous_exit=previous, derived=False)
    n = events.height
    tail = _last_calls(m)
    del events
    return Partial(
        m.instances.select(collectives.BASE_COLUMNS),
        collectives.rank_step_arrivals(m),
        overlap.rank_step_comm(m),
        m.dropped,
        n,
        trailing.with_columns(pl.col(_NAMES).cast(pl.String)),
        counts,
        tail,
        calls,
        lacking,
        signatures,
    )


#: The names a window's events hold as categoricals (:func:`analysis_frame`).
_NAMES = ("group", "op", "status", "timing")
_DEVICE = list(timebase.DEVICE_COLUMNS)


def _counts(events: pl.DataFrame) -> pl.DataFrame:
    """The events per (group, op, timing, rank), ``n``, the names as strings: counted
    over the categoricals' codes and the ranks by a dense index (a group-by hashing
    the names cost 36 ns an event, a tenth of a window's analysis)."""
    keys = ("group", "op", "timing")
    if not events.height or any(events[k].dtype != pl.Categorical for k in keys):
        return events.group_by(*keys, "rank").agg(n=pl.len()).cast(dict.fromkeys(keys, pl.String))
    parts = [events[k].to_physical().to_numpy() for k in keys]
    parts.append(events["rank"].to_numpy())
    idx, size = kernels.group_index(parts)
    n = kernels.count(idx, size)
    row_of = np.empty(size, dtype=np.int64)  # a row of each: the last written wins
    row_of[idx] = np.arange(len(idx), dtype=np.int64)
    rows = pl.Series(row_of[n > 0])
    return pl.DataFrame(
        {
            **{k: events[k].gather(rows).cast(pl.String) for k in keys},
            "rank": events["rank"].gather(rows),
            "n": pl.Series(n[n > 0], dtype=pl.UInt32),
        }
    )


def _analysed(
    table: pa.Table, context: Context, *, categorical: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame, tuple[int, int]]:
    """A window's events the analysis measures on the context's clock, its trailing
    calls apart (``categorical``: their names as categoricals, see
    :func:`analysis_frame`), and (completed calls, those lacking device time) after
    the warm-up, where the context reads device times: the in-memory path's counts."""
    events = analysis_frame(table.select(list(context.columns)), categorical=categorical)
    cut = context.cut
    if cut is not None and events.height and int(events["step"].min()) < cut:  # type: ignore[arg-type]
        events = events.filter(collectives.call_steps(events) >= cut)
    counted = (0, 0)
    if context.read_device:
        counted = timebase.coverage(events)
        events = timebase.on_device(events) if context.device else events.drop(_DEVICE)
    trailing = events.clear()
    if events.height and len(context.last_step):
        rank, step = events["rank"].to_numpy(), events["step"].to_numpy()
        last = context.last_step[rank]
        if ((last >= 0) & (step > last)).any():
            marked = events.with_columns(_late=pl.Series((last >= 0) & (step > last)))
            marked = marked.with_columns(
                _trailing=pl.col("_late").all().over(collectives.call_key())
            )
            trailing = marked.filter(pl.col("_trailing")).drop("_late", "_trailing")
            events = marked.filter(~pl.col("_trailing")).drop("_late", "_trailing")
    return events, trailing, counted


def _program(
    p: Plan, inst: pl.DataFrame, rank_steps: pl.DataFrame, rank_step: pl.DataFrame
) -> Program | None:
    """The replay's program, as :func:`~syncpace.analysis.metrics.compute_metrics`
    builds it: the events of the steps it covers (at most ``replay.MAX_EVENTS``) read
    again from the start of their window (the warm-up is cut as there), their calls
    named by the run's instance frame ``inst``. None when the two iterations a replay
    needs at least hold more than :data:`REPLAY_EVENTS` (4,096 ranks of 100 calls an
    iteration hold 819,200): memory stays bounded."""
    if not p.windows or inst.height == 0 or rank_steps.height == 0:
        return None
    if not replayable(p.index.meta):
        return None
    steps = replayed_steps(rank_steps, rank_step)
    held = rank_step.filter(pl.col("step").is_in(steps.tolist()))["collectives"].sum()
    if held > REPLAY_EVENTS:  # its two iterations alone: more than may be held
        return None
    lo = max((a for a, _ in p.windows if a <= steps[0]), default=p.windows[0][0])
    table = read_window(list(p.scans), lo, int(steps[-1]) + 1, columns=p.context.columns)
    events, _, _ = _analysed(table, p.context)
    m = collectives.match(events)
    if m.instances.height == 0:
        return None
    ids = (
        m.instances.select("group", "pair", "seq")
        .join(
            inst.select("group", "pair", "seq").with_row_index("_id"),
            on=["group", "pair", "seq"],
            how="left",
            maintain_order="left",
        )["_id"]
        .fill_null(-1)
        .to_numpy()
        .astype(np.int64)
    )
    # calls of iterations of another kind (analysis.kinds) are not the run's instances;
    # the replay leaves their steps out
    if (ids[np.isin(m.instances["step"].to_numpy(), steps)] < 0).any():
        raise NeedsWholeRun("a call of the replayed steps is not among the run's instances")
    times = dataclasses.replace(m.events, instance=ids[m.events.instance])
    usable = collectives.usable_events(events)
    return build_program(
        usable, times, inst, rank_steps, iterations.global_steps(rank_steps), rank_step
    )


def _last_calls(m: collectives.Matched) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per rank with calls here: its last call (latest enter; ties: later step, later
    row) — rank, enter and exit (-1 when it did not complete)."""
    t = m.events
    if not len(t.rank):
        return _NONE, _NONE, _NONE
    top = kernels.Groups(t.rank, int(t.rank.max()) + 1).maximum(t.enter, np.iinfo(np.int64).min)
    cand = np.flatnonzero(t.enter == top[t.rank])
    cand = cand[np.lexsort((cand, t.step[cand], t.rank[cand]))]
    pick = cand[np.r_[t.rank[cand][1:] != t.rank[cand][:-1], True]]
    return t.rank[pick].astype(np.int64), t.enter[pick], t.exit[pick]


class _Carry:
    """Each rank's call before the next window, carried along a sequential reading."""

    def __init__(self, world_size: int) -> None:
        self.enter = np.full(world_size, np.iinfo(np.int64).min, dtype=np.int64)
        self.exit = np.full(world_size, -1, dtype=np.int64)

    def add(self, part: Partial) -> None:
        rank, enter, exit_ = part.tail
        later = enter >= self.enter[rank]  # on a tie the later window's call is later
        self.enter[rank[later]] = enter[later]
        self.exit[rank[later]] = exit_[later]


def on_clock(p: Plan, measure: Callable[[Plan], list[Partial]]) -> tuple[Plan, list[Partial]]:
    """The windows of ``p`` measured by ``measure`` on the run's clock: on the device's
    first where declared, again on the host's when the run is not on it after all (a
    call lacked device time, or none completed: the rule needs the whole run's count)."""
    parts = measure(p)
    if p.context.device and not time_base(p, parts).device:
        p = dataclasses.replace(p, context=p.context.on_host())
        parts = measure(p)
    return p, parts


def time_base(p: Plan, parts: list[Partial]) -> TimeBase:
    """The run's clock from its windows' counts (:func:`on_clock` made them agree)."""
    if not p.context.read_device:
        return TimeBase()
    return timebase.choose(p.index.meta, sum(q.calls for q in parts), sum(q.lacking for q in parts))


def windows(p: Plan) -> Iterator[Partial]:
    """Every window of ``p`` in order, in this process (each batch decoded once)."""
    cache = BatchCache()
    carried = _Carry(p.index.world_size)
    for window in p.windows:
        part = window_partial(
            p.scans, p.index.world_size, p.first, window, cache, p.context, carried.exit.copy()
        )
        carried.add(part)
        yield part


def base_trace(p: Plan, events: pl.DataFrame | None = None) -> Trace:
    """A :class:`Trace` of the scanned run with all its steps but only ``events``
    (none, or a few sampled iterations): what the aggregates and reports read."""
    warnings = list(p.index.warnings)
    for s in p.scans:
        warnings.extend(s.warnings)
    tables = [s.steps for s in p.scans]
    steps = pl.from_arrow(pa.concat_tables(tables) if tables else schema.STEPS.empty_table())
    if events is None:
        events = pl.from_arrow(schema.EVENTS.empty_table())  # type: ignore[assignment]
    assert isinstance(steps, pl.DataFrame) and isinstance(events, pl.DataFrame)
    return assemble_trace(
        p.index,
        events=events,
        steps=steps,
        warnings=warnings,
        completeness={s.rank: s.completeness for s in p.scans},
    )


def finish(
    p: Plan,
    partials: Iterable[Partial],
    trace: Trace | None = None,
    tail: pa.Table | None = None,
) -> RunMetrics:
    """The run's metrics from its windows' results (``tail``: the last window's events,
    every column, when the caller holds them; read again otherwise)."""
    trace = trace or base_trace(p)
    parts = list(partials)
    base = time_base(p, parts)
    if base.device != p.context.device:
        raise ValueError("the windows were measured on another clock than the run's")
    steps = trace.steps
    if p.first and steps.height and int(steps["step"].max()) >= p.first:  # type: ignore[arg-type]
        steps = steps.filter(pl.col("step") >= p.first)
    rank_steps = iterations.rank_steps(steps)
    if parts:
        inst = collectives.derive(_ordered([q.instances for q in parts], "group", "pair", "seq"))
        if inst.select(pl.struct("group", "pair", "seq").is_duplicated().any()).item():
            # a call whose ranks' events lie in two windows (one rank made it just before
            # an iteration boundary, another just after): only the whole run matches it
            raise NeedsWholeRun("a call spans two windows")
        rank_step = _ordered([q.rank_step for q in parts], "rank", "step")
        comm = _ordered([q.comm for q in parts], "rank", "step")
    else:
        empty = collectives.match(pl.from_arrow(schema.EVENTS.empty_table()))  # type: ignore[arg-type]
        inst, rank_step = empty.instances, collectives.rank_step_arrivals(empty)
        comm = overlap.rank_step_comm(empty)
    steps, inst, rank_step, comm, other_kinds = _training_only(
        trace.meta, parts, steps, inst, rank_step, comm
    )
    rank_steps = iterations.rank_steps(steps)
    if base.device:
        rank_steps = timebase.device_steps(rank_steps, rank_step)
    last = p.windows[-1] if p.windows else None  # where every group's last calls are
    if tail is None and last:
        tail = read_window(p.scans, last[0], last[1], columns=_ALL)
    tail_events = pl.from_arrow(tail) if tail is not None else None
    hang_trace = (
        dataclasses.replace(trace, events=tail_events) if tail_events is not None else trace
    )
    counts = [q.counts for q in parts if q.counts.height]
    trailing = [q.trailing for q in parts if q.trailing.height]
    global_steps = iterations.global_steps(rank_steps).height
    program = _program(p, inst, rank_steps, rank_step) if parts else None
    return from_parts(
        trace,
        hang=analyze_hang(hang_input(hang_trace)),  # type: ignore[arg-type]
        rank_steps=rank_steps,
        instances=inst,
        dropped=sum(q.dropped for q in parts),
        rank_step=rank_step,
        comm=comm,
        events=p.events,
        trailing=iterations.trailing_summary(pl.concat(trailing) if trailing else pl.DataFrame()),
        parallel=parallelism.infer_from_counts(
            trace.meta,
            pl.concat(counts) if counts else pl.DataFrame(),
            trace.world_size,
            global_steps,
        ),
        boundaries=trace.steps.height,
        program=program,
        time_base=base,
        other_kinds=other_kinds,
    )


def _training_only(
    meta: dict[int, dict[str, Any]],
    parts: list[Partial],
    steps: pl.DataFrame,
    inst: pl.DataFrame,
    rank_step: pl.DataFrame,
    comm: pl.DataFrame,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame, list[dict[str, Any]]]:
    """The windows' results of the training iterations only, and the other kinds
    (:mod:`syncpace.analysis.kinds`), as compute_metrics leaves them out."""
    signatures = {s: sig for q in parts for s, sig in q.signatures.items()}
    found = kinds.split(signatures, steps, meta)
    if found is None:
        return steps, inst, rank_step, comm, []
    described = kinds.describe(found, signatures, kinds.step_times(steps))
    keep = pl.col("step").is_in(list(found.training))
    return (
        steps.filter(keep),
        inst.filter(keep),
        rank_step.filter(keep),
        comm.filter(keep),
        described,
    )


def _ordered(frames: list[pl.DataFrame], *keys: str) -> pl.DataFrame:
    """``frames`` concatenated in the order of ``keys``, as the in-memory path orders its
    rows. A gather, not a sort: a sorted flag on the keys would switch later group-bys
    to another summation order, and their float means would differ in the last digit."""
    frame = pl.concat(frames, rechunk=True)
    columns = [frame[k] for k in reversed(keys)]
    codes = [c.rank("dense").to_numpy() if c.dtype == pl.String else c.to_numpy() for c in columns]
    return frame[pl.Series(np.lexsort(codes))]  # (a numpy index takes a slow path)


def sample(p: Plan, metrics: RunMetrics, trace: Trace | None = None) -> IterationSample:
    """The report's iterations in full (:func:`pick_iterations`), reading only them."""
    picks = pick_iterations(metrics.steps)
    # Rank by rank, as the files are read (the picks in their order within a rank), a
    # group of ranks at a time into polars: the Arrow copy of all never exists at once.
    parts = []
    steps = [step for _, step in picks]
    for at in range(0, len(p.scans) if steps else 0, _SAMPLE_RANKS):
        table = read_steps(list(p.scans[at : at + _SAMPLE_RANKS]), steps, columns=_ALL)
        parts.append(pl.from_arrow(table))
    events = pl.concat(parts, rechunk=False) if parts else None
    base = trace or base_trace(p)
    sampled = dataclasses.replace(base, events=events) if events is not None else base
    return sample_iterations(sampled, metrics, picks)  # type: ignore[arg-type]


_ALL = tuple(schema.EVENTS.names)
#: Ranks whose sampled iterations are read into polars together.
_SAMPLE_RANKS = 256


def stream_metrics(
    path: str | Path,
    *,
    warmup_steps: int = 1,
    window_events: int = WINDOW_EVENTS,
    progress: Callable[[int, int], Any] | None = None,
) -> tuple[RunMetrics, IterationSample]:
    """Measure the run directory ``path`` window by window in this process; also the
    sampled iterations for the report. ``progress(done, total)`` after each window.

    One pass (:class:`~syncpace.trace.read.sweep.Sweep`); a run whose files hold steps out
    of order (or with more ranks than files may be open) is read in two (:func:`scan`,
    then the windows from its index)."""
    index = read_metadata(path)
    try:
        if not needs_whole_run(index):
            if timebase.declared(index.meta):  # the one-pass sweep reads host columns only
                return _two_pass(path, warmup_steps, window_events, progress)
            try:
                return _swept(index, warmup_steps, window_events, progress)
            except CannotSweep:
                return _two_pass(path, warmup_steps, window_events, progress)
    except NeedsWholeRun:
        pass
    trace = load_trace(path)
    run = compute_metrics(trace, warmup_steps=warmup_steps)
    return run, sample_iterations(trace, run)


class NeedsWholeRun(Exception):
    """A run only the loader reads as the analysis needs it (see :func:`needs_whole_run`)."""


def needs_whole_run(index: TraceMeta) -> bool:
    """Whether the run holds what only :func:`~syncpace.trace.reader.load_trace` puts
    together: rotated segments (always-on mode: the steps some rank lost are left out
    of every rank, and the run's kept events are bounded by its disk budget) or a dead
    rank's crash journal (its tail and its calls in flight)."""
    if any(m.get("segments") for m in index.meta.values()) or segment_files(index.path):
        return True
    return any(
        not m.get("finished", False)
        and (index.path / f"{schema.rank_stem(r)}{journal.JOURNAL_SUFFIX}").exists()
        for r, m in index.meta.items()
    )


def _swept(
    index: TraceMeta,
    warmup_steps: int,
    window_events: int,
    progress: Callable[[int, int], Any] | None,
) -> tuple[RunMetrics, IterationSample]:
    sweep = Sweep(
        index, columns=ANALYSIS_COLUMNS, warmup_steps=warmup_steps, window_events=window_events
    )
    context = Context.of(index.world_size, sweep.steps_tables(), warmup_steps)
    carried = _Carry(index.world_size)
    parts = []
    for i, (_, table) in enumerate(sweep):
        part = partial(table, carried.exit.copy(), context)
        carried.add(part)
        parts.append(part)
        del table
        if progress is not None:
            progress(i + 1, max(sweep.estimate, i + 1))
    allocators.hand_back_freed_memory()  # the windows are done: the rest starts lower
    p = Plan(index, tuple(sweep.scans()), sweep.plan_first, tuple(sweep.windows), context)
    trace = base_trace(p)
    run = finish(p, parts, trace)
    return run, sample(p, run, trace)


def _two_pass(
    path: str | Path,
    warmup_steps: int,
    window_events: int,
    progress: Callable[[int, int], Any] | None,
) -> tuple[RunMetrics, IterationSample]:
    index, scans = scan(path)
    p = plan(index, scans, warmup_steps=warmup_steps, window_events=window_events)
    trace = base_trace(p)

    def counted(p: Plan) -> list[Partial]:
        parts = []
        for i, part in enumerate(windows(p)):
            if progress is not None:
                progress(i + 1, len(p.windows))
            parts.append(part)
        return parts

    p, parts = on_clock(p, counted)
    run = finish(p, parts, trace)
    return run, sample(p, run, trace)


def same_metrics(a: RunMetrics, b: RunMetrics) -> list[str]:
    """Where two measurements of one run differ (empty when identical): every frame
    (instances compared in one order) and every summary number."""
    out = []
    for f in dataclasses.fields(RunMetrics):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, pl.DataFrame):
            if f.name == "instances":
                x, y = x.sort(["group", "pair", "seq"]), y.sort(["group", "pair", "seq"])
            if not x.equals(y, null_equal=True) or x.schema != y.schema:
                out.append(f.name)
        elif f.name == "program":
            if not same_program(x, y):
                out.append(f.name)
        elif f.name == "hosts":
            if (x.to_json() if x else None) != (y.to_json() if y else None):
                out.append(f.name)
        elif _normal(x) != _normal(y):
            out.append(f.name)
    return out


def _normal(value: Any) -> Any:
    if isinstance(value, float) and np.isnan(value):
        return "nan"
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    return value
