"""A few iterations in full detail: every rank's calls in the slowest and a typical one.

The metrics summarise every iteration; a timeline shows how one of them went — which
rank computed, which waited, when each collective transferred, where the pacer held a
rank back. :func:`sample_iterations` keeps the events of the chosen iterations (a few
thousand rows even at thousands of ranks) while the whole trace is still in memory, so
reports draw them without reading the trace again.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from syncpace.analysis import timebase
from syncpace.analysis.collectives import match
from syncpace.analysis.metrics import RunMetrics
from syncpace.trace.reader import Trace


@dataclass(frozen=True)
class IterationSample:
    """The chosen iterations of one run.

    ``picks``: (why, step) pairs, e.g. ``("slowest", 17)``, ``("typical", 9)``.
    ``steps``: rank, step, start_ns, end_ns, pacing_delay_ns of those iterations.
    ``events``: one row per call: rank, step, op, group, seq, bytes, enter_ns, exit_ns
    (-1 when it did not complete), last_enter_ns (the last member's enter: before it the
    rank waits, after it the collective transfers).
    """

    run: str
    picks: tuple[tuple[str, int], ...]
    steps: pl.DataFrame
    events: pl.DataFrame

    def step_time_ns(self, step: int) -> int:
        """The iteration's span over ranks: first start to last end."""
        s = self.steps.filter(pl.col("step") == step)
        if s.height == 0:
            return 0
        return int(s["end_ns"].max()) - int(s["start_ns"].min())  # type: ignore[arg-type]


def pick_iterations(steps: pl.DataFrame) -> tuple[tuple[str, int], ...]:
    """The slowest iteration and a typical one (closest to the median), from the
    per-step frame of the metrics (``step``, ``time_ns``)."""
    valid = steps.filter(pl.col("time_ns").is_not_null() & (pl.col("time_ns") > 0))
    if valid.height == 0:
        return ()
    slowest = int(valid.sort(["time_ns", "step"], descending=[True, False])["step"][0])
    median = float(valid["time_ns"].median())  # type: ignore[arg-type]
    typical = int(
        valid.with_columns(d=(pl.col("time_ns") - median).abs()).sort(["d", "step"])["step"][0]
    )
    picks = [("slowest", slowest)]
    if typical != slowest:
        picks.append(("typical", typical))
    return tuple(picks)


def sample_iterations(
    trace: Trace, metrics: RunMetrics, picks: tuple[tuple[str, int], ...] | None = None
) -> IterationSample:
    """The events and step boundaries of ``picks`` (default: :func:`pick_iterations`),
    on the clock of the run's figures (``metrics.time_base``: on the device clock, the
    device times and the boundaries the metrics moved to it)."""
    picks = pick_iterations(metrics.steps) if picks is None else picks
    wanted = [step for _, step in picks]
    device = metrics.time_base.device
    source = metrics.rank_steps if device else trace.steps
    steps = source.filter(pl.col("step").is_in(wanted)).select(
        "rank", "step", "start_ns", "end_ns", "pacing_delay_ns"
    )
    events = trace.events.filter(pl.col("step").is_in(wanted))
    if device:
        events = timebase.on_device(events)
    return IterationSample(metrics.run, picks, steps.sort("rank", "step"), _calls(events))


def _calls(events: pl.DataFrame) -> pl.DataFrame:
    schema = {
        "rank": pl.Int32,
        "step": pl.Int64,
        "op": pl.String,
        "group": pl.String,
        "seq": pl.Int64,
        "bytes": pl.Int64,
        "enter_ns": pl.Int64,
        "exit_ns": pl.Int64,
        "last_enter_ns": pl.Int64,
    }
    if events.height == 0:
        return pl.DataFrame(schema=schema)
    m = match(events)
    t = m.events
    frame = pl.DataFrame(
        {
            "rank": t.rank,
            "step": t.step,
            "instance": t.instance,
            "enter_ns": t.enter,
            "exit_ns": t.exit,
            "last_enter_ns": t.last_enter,
        }
    ).join(
        m.instances.select("op", "group", "seq", "bytes").with_row_index("instance"),
        on="instance",
        how="left",
    )
    return frame.select(list(schema)).cast(schema).sort("rank", "enter_ns")  # type: ignore[arg-type]
