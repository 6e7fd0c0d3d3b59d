"""All metrics of one run, measured without judgement: frames for plots, numbers for JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from syncpace.analysis import (
    breakdown,
    collectives,
    hostcounters,
    iterations,
    kinds,
    limits,
    locality,
    overlap,
    parallelism,
    timebase,
)
from syncpace.analysis.hang.inputs import hang_input
from syncpace.analysis.hang.measure import analyze_hang
from syncpace.analysis.hang.points import HangAnalysis
from syncpace.analysis.parallelism import Parallelism
from syncpace.analysis.replay import Program, build_program, replayable
from syncpace.analysis.timebase import TimeBase
from syncpace.analysis.wholerun import WholeRun, whole_run
from syncpace.trace.reader import Trace
from syncpace.trace.summary import pacing_summary
from syncpace.trace.validate.completeness import completeness_lines


@dataclass(frozen=True)
class RunMetrics:
    """Measured quantities of one run (times in ns unless named otherwise).

    Frames: ``rank_steps`` (rank, step, step_ns), ``steps`` (global per-step time),
    ``instances`` (one row per matched collective), ``rank_step`` (per rank and step
    lateness and wait), ``last`` (last arriver per step), ``overlap`` (per rank and step
    transfer union and exposed time), ``per_rank``, ``placement``, ``by_node``,
    ``by_local_rank``.
    """

    run: str
    world_size: int
    source: str
    ranks: tuple[int, ...]
    missing_ranks: tuple[int, ...]
    warnings: tuple[str, ...]
    clock_uncertainty_ns: int | None
    rank_steps: pl.DataFrame
    steps: pl.DataFrame
    instances: pl.DataFrame
    rank_step: pl.DataFrame
    last: pl.DataFrame
    overlap: pl.DataFrame
    per_rank: pl.DataFrame
    placement: pl.DataFrame
    by_node: pl.DataFrame
    by_local_rank: pl.DataFrame
    iteration: dict[str, float]
    comm: dict[str, float]
    quality: dict[str, Any]
    group_nodes: dict[str, int]
    #: process group -> its global ranks in group-rank order
    group_ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    pacing: dict[str, Any] | None = None  # the pacer's account, when the run was paced
    #: calls after the last iteration boundary, kept out of every figure above
    trailing: dict[str, Any] = field(default_factory=dict)
    #: iterations of another kind than training (evaluation, checkpoint: a different
    #: mix of collectives), kept out of every figure above (analysis.kinds.describe)
    other_kinds: list[dict[str, Any]] = field(default_factory=list)
    #: what the groups' shape and the ops seen say of the job's parallelism
    parallelism: Parallelism = field(default_factory=Parallelism)
    #: iteration boundaries seen (step rows), before the warm-up was left out
    boundaries: int = 0
    program: Program | None = None  # the run as the replay runs it (analysis.replay)
    #: why the wait at each iteration's last collective is not measured (an import's
    #: estimated enters or windowed steps: collectives.arrivals_estimated), else None
    arrivals_estimated: str | None = None
    hang: HangAnalysis | None = None  # where each group stopped (whole run, no warm-up cut)
    hosts: hostcounters.HostMetrics | None = None  # host counters and topology, when sampled
    #: the whole run from its per-step summaries (always-on mode), else None
    whole_run: WholeRun | None = None
    #: which clock the figures are on (device where every call has device times)
    time_base: TimeBase = field(default_factory=TimeBase)
    #: the fastest host link's rate, when the fabric's or the hosts' counters give it
    link: limits.LinkRate | None = None
    #: values the physics forbids, left out of every figure (analysis.limits)
    unmeasurable: tuple[limits.Unmeasurable, ...] = ()

    @cached_property
    def breakdown(self) -> breakdown.Breakdown:
        """The per-operation table, the per-rank whole-run breakdown and the per-step
        parts (:mod:`syncpace.analysis.breakdown`), measured once: the terminal, the
        JSON and the report all read it."""
        return breakdown.measure(self.instances, self.overlap, self.rank_step)

    @property
    def iteration_ns(self) -> float:
        return float(self.iteration.get("mean", 0.0))

    def node_of(self) -> dict[int, str]:
        """Each placed rank's node (host)."""
        return _node_of(self.placement)

    def summary(self) -> dict[str, Any]:
        """The JSON view: numbers, not frames."""
        inst = self.instances
        skew = iterations.distribution(inst["skew_ns"]) if inst.height else {}
        transfer = iterations.distribution(inst["transfer_ns"]) if inst.height else {}
        return {
            "run": self.run,
            "world_size": self.world_size,
            "source": self.source,
            "iteration_ns": self.iteration,
            "throughput_steps_per_s": 1e9 / self.iteration_ns if self.iteration_ns else 0.0,
            "communication": self.comm,
            "collective_skew_ns": skew,
            "collective_transfer_ns": transfer,
            "per_rank": _records(self.per_rank),
            "by_node": _records(self.by_node),
            "by_local_rank": _records(self.by_local_rank),
            "collectives_by_op": _records(_by_op(inst)),
            "quality": self.quality,
            "pacing": self.pacing,
            "after_last_iteration": self.trailing,
            "other_iteration_kinds": self.other_kinds,
            "parallelism": self.parallelism.to_json(),
            "iteration_boundaries": self.boundaries,
            "hosts": self.hosts.to_json() if self.hosts is not None else None,
            "whole_run": self.whole_run.to_json() if self.whole_run is not None else None,
            "time_base": self._time_base_json(),
            "breakdown": self.breakdown.to_json(),
            "link_rate": self.link.to_json() if self.link is not None else None,
            "unmeasurable": [u.to_json() for u in self.unmeasurable],
        }

    def _time_base_json(self) -> dict[str, Any]:
        """The clock of the figures and, on the device clock, each rank's run-ahead."""
        out = self.time_base.to_json()
        if self.time_base.device and "run_ahead_p50_ns" in self.per_rank.columns:
            rows = self.per_rank.select(
                "rank", "run_ahead_p50_ns", "run_ahead_p90_ns", "host_lateness_p50_ns"
            )
            out["run_ahead_ns"] = {
                str(r["rank"]): {"p50": r["run_ahead_p50_ns"], "p90": r["run_ahead_p90_ns"]}
                for r in rows.iter_rows(named=True)
            }
            out["host_lateness_p50_ns"] = {
                str(r["rank"]): r["host_lateness_p50_ns"] for r in rows.iter_rows(named=True)
            }
        return out


def compute_metrics(trace: Trace, *, warmup_steps: int = 1) -> RunMetrics:
    """Measure ``trace``. The first ``warmup_steps`` iterations (setup, first-call costs)
    are left out, unless nothing would be left."""
    hang = analyze_hang(hang_input(trace))
    boundaries = trace.steps.height
    steps, events = iterations.after_warmup(trace.steps, trace.events, warmup_steps)
    base = timebase.of_events(trace.meta, events)
    if base.device:
        events = timebase.on_device(events)
    events, trailing = iterations.split_trailing(events, steps)
    found, other_kinds = _kinds(events, steps, trace.meta)
    rank_steps = iterations.rank_steps(steps)
    matched = collectives.match(events)
    rank_step = collectives.rank_step_arrivals(matched)
    comm = overlap.rank_step_comm(matched)
    if found is not None:  # every figure is of the training iterations
        keep = pl.col("step").is_in(list(found.training))
        rank_steps, rank_step, comm = (f.filter(keep) for f in (rank_steps, rank_step, comm))
        matched = kinds.keep_instances(matched, found)
    if base.device:
        rank_steps = timebase.device_steps(rank_steps, rank_step)
    global_steps = iterations.global_steps(rank_steps)
    parallel = parallelism.infer(trace.meta, events, trace.world_size, global_steps.height)
    inst, dropped = matched.instances, matched.dropped
    program = (
        build_program(
            collectives.usable_events(events),
            matched.events,
            inst,
            rank_steps,
            global_steps,
            rank_step,
        )
        if replayable(trace.meta)
        else None
    )
    del matched, events, steps  # the per-event arrays are the largest objects: free them
    return from_parts(
        trace,
        rank_steps=rank_steps,
        instances=inst,
        dropped=dropped,
        rank_step=rank_step,
        comm=comm,
        events=trace.events.height,
        trailing=iterations.trailing_summary(trailing),
        other_kinds=other_kinds,
        parallel=parallel,
        boundaries=boundaries,
        hang=hang,
        program=program,
        time_base=base,
    )


def from_parts(
    trace: Trace,
    *,
    rank_steps: pl.DataFrame,
    instances: pl.DataFrame,
    dropped: int,
    rank_step: pl.DataFrame,
    comm: pl.DataFrame,
    events: int,
    trailing: dict[str, Any],
    parallel: parallelism.Parallelism,
    boundaries: int,
    hang: HangAnalysis | None = None,
    program: Program | None = None,
    time_base: TimeBase | None = None,
    other_kinds: list[dict[str, Any]] | None = None,
) -> RunMetrics:
    """The run's metrics from its per-event results (instances, per (rank, step)
    arrivals and communication) — computed on the whole trace at once, or window by
    window and concatenated (:mod:`syncpace.analysis.streaming`). ``trace`` supplies
    metadata, steps, warnings and host files; ``events``: how many it holds.
    ``time_base``: the clock of the per-event results (``rank_steps`` already on it)."""
    base = time_base or TimeBase()
    global_steps = iterations.global_steps(rank_steps)
    last = collectives.last_arrivers(rank_step)
    ovl = overlap.with_step_time(comm, rank_steps)
    per_rank = iterations.per_rank_summary(rank_steps, rank_step, last)
    if base.device and "run_ahead_ns" in rank_step.columns:
        per_rank = per_rank.join(timebase.run_ahead(rank_step), on="rank", how="left")
    place = locality.placement(trace.meta)
    uncertainty = _clock_uncertainty(trace, base)
    group_ranks = _group_ranks(trace.meta, place)
    group_nodes = _group_nodes(group_ranks, place)
    hosts = hostcounters.host_metrics(trace.counters, trace.hosts, trace.meta)
    link = limits.link_rate(Path(trace.path), hosts.nic if hosts is not None else None)
    inst, unmeasurable = limits.flag_instances(
        instances, uncertainty_ns=uncertainty, link=link, group_nodes=group_nodes
    )
    unmeasurable += limits.nic_notes(hosts.nic if hosts is not None else None)
    whole = whole_run(trace)
    warnings = trace.warnings
    if whole is not None:
        warnings += tuple(w for w in whole.warnings if w not in warnings)
    pacing = pacing_summary(trace)
    if pacing is not None:  # a damaged pacing setting: said with the reader's warnings
        warnings += tuple(w for w in pacing["warnings"] if w not in warnings)
    return RunMetrics(
        run=str(trace.path),
        world_size=trace.world_size,
        source=str(trace.meta[trace.ranks[0]].get("source", "unknown")),
        ranks=tuple(trace.ranks),
        missing_ranks=tuple(trace.missing_ranks),
        warnings=warnings,
        clock_uncertainty_ns=uncertainty,
        rank_steps=rank_steps,
        steps=global_steps,
        instances=inst,
        rank_step=rank_step,
        last=last,
        overlap=ovl,
        per_rank=per_rank,
        placement=place,
        by_node=locality.by_node(per_rank, place),
        by_local_rank=locality.by_local_rank(per_rank, place),
        iteration=iterations.distribution(global_steps["time_ns"]),
        comm=overlap.summary(ovl),
        quality=_quality(trace, inst, uncertainty, dropped, global_steps.height, events, warnings),
        group_nodes=group_nodes,
        group_ranks=group_ranks,
        pacing=pacing,
        trailing=trailing,
        other_kinds=other_kinds or [],
        parallelism=parallel,
        boundaries=boundaries,
        program=program,
        arrivals_estimated=collectives.arrivals_estimated(trace.meta),
        hang=hang,
        hosts=hosts,
        whole_run=whole,
        time_base=base,
        link=link,
        unmeasurable=tuple(unmeasurable),
    )


def _kinds(
    events: pl.DataFrame, steps: pl.DataFrame, meta: dict[int, dict[str, Any]]
) -> tuple[kinds.Kinds | None, list[dict[str, Any]]]:
    """The run's kinds of iteration and what the other kinds were (their time measured
    here, over every step)."""
    signatures = kinds.step_signatures(events)
    found = kinds.split(signatures, steps, meta)
    if found is None:
        return None, []
    return found, kinds.describe(found, signatures, kinds.step_times(steps))


def _group_ranks(
    meta: dict[int, dict[str, Any]], place: pl.DataFrame
) -> dict[str, tuple[int, ...]]:
    """Process group -> its global ranks in group-rank order (from the metadata's
    ``groups``; the default group ``0``: every placed rank, where no rank lists it)."""
    out: dict[str, tuple[int, ...]] = {}
    for m in meta.values():
        groups = m.get("groups")
        if not isinstance(groups, dict):
            continue
        for name, spec in groups.items():
            ranks = spec.get("ranks") if isinstance(spec, dict) else None
            if isinstance(ranks, list) and str(name) not in out:
                out[str(name)] = tuple(r for r in ranks if isinstance(r, int))
    out.setdefault("0", tuple(sorted(place["rank"].to_list())))
    return out


def _node_of(place: pl.DataFrame) -> dict[int, str]:
    return dict(zip(place["rank"].to_list(), place["node"].to_list(), strict=True))


def _group_nodes(groups: dict[str, tuple[int, ...]], place: pl.DataFrame) -> dict[str, int]:
    """Process group -> how many nodes its ranks span."""
    node_of = _node_of(place)
    return {name: len({node_of.get(r) for r in ranks} - {None}) for name, ranks in groups.items()}


def _clock_uncertainty(trace: Trace, base: TimeBase | None = None) -> int | None:
    """The worst rank's clock uncertainty; ``None`` when any rank's offset is unknown
    (its skews against the others cannot be trusted, however well the rest align).
    On the device clock the device times' conversion to the host clock adds its own."""
    values = [(m.get("clock") or {}).get("uncertainty_ns") for r, m in trace.meta.items() if r != 0]
    known = [int(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not known or len(known) != len(values):
        return None
    extra = base.uncertainty_ns if base is not None and base.device else None
    return max(known) + (extra or 0)


def _quality(
    trace: Trace,
    inst: pl.DataFrame,
    uncertainty: int | None,
    dropped: int,
    steps: int,
    events: int,
    warnings: tuple[str, ...],
) -> dict[str, Any]:
    incomplete = inst.filter(~pl.col("complete")) if inst.height else inst
    # ranks of an all-to-all send what they route (uneven in MoE): only other ops must agree
    sized = pl.col("op") != "all_to_all"
    mismatched = inst.filter(sized, pl.col("bytes") != pl.col("bytes_min")) if inst.height else inst
    return {
        "missing_ranks": trace.missing_ranks,
        "instances": inst.height,
        "incomplete_instances": incomplete.height,
        # made by fewer than half their ranks: not a rank that died, a sequence out of step
        "minority_instances": incomplete.filter(pl.col("n") * 2 < pl.col("expected")).height
        if incomplete.height
        else 0,
        "size_mismatched_instances": mismatched.height,
        "unusable_events": dropped,
        "clock_uncertainty_ns": uncertainty,
        "median_skew_ns": float(inst["skew_ns"].median() or 0.0) if inst.height else 0.0,
        "warnings": list(warnings),
        "events": events,
        "steps": trace.steps.height,
        "steps_analyzed": steps,
        "completeness": {str(r): c.to_json() for r, c in sorted(trace.completeness.items())},
        "completeness_lines": completeness_lines(
            trace.completeness, trace.missing_ranks, trace.world_size
        ),
    }


def _by_op(inst: pl.DataFrame) -> pl.DataFrame:
    if inst.height == 0:
        return inst
    return (
        inst.group_by("op")
        .agg(
            count=pl.len(),
            bytes_mean=pl.col("bytes").mean(),
            transfer_ns_p50=pl.col("transfer_ns").median(),
            busbw_gbps_p50=pl.col("busbw_gbps").median(),
            busbw_gbps_max=pl.col("busbw_gbps").max(),
        )
        .sort("op")
    )


def _records(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dicts() if frame.height else []
