"""Which clock a run's figures are on: the device's where every call has device times,
else the host's.

On a GPU the host times of a call describe the CPU, not the device: ``enter_ns`` is
when the CPU enqueued it, and on NCCL ``exit_ns`` is about the same moment (the work's
``wait()`` and future complete at enqueue on the host). The CPU runs ahead of the
device by up to tens of milliseconds, so the rank whose host enqueues last need not be
the rank whose device arrives last. Version 3 traces carry ``device_enter_ns`` (the
device reached the call: the work queued before it was done) and ``device_exit_ns``
(the device finished it), and a rank that recorded them says so in its metadata
(``device_clock``: the source, the conversion's uncertainty, anchors, events resolved).

The rule, decided once per run over the calls the analysis measures (after the
warm-up): **device** when some rank's metadata declares a device clock and every
completed call has both device times; otherwise **host**. A run whose device times
cover only part of its calls is analysed on host time and says how many lacked them:
arrivals mixed from two clocks would compare a CPU with a GPU.

Under the device clock the analysis frame's ``enter_ns``/``exit_ns`` are the device
times (every figure built from them follows: arrivals, skew, waits, transfers,
busbw, overlap, the replay), the host's enqueue is kept beside them as
``host_enter_ns`` (the CPU run-ahead, host lateness), and a wait's time is moved by
the call's run-ahead. Without a declaration no device column is read at all: the
host-only path (every gloo run) carries nothing more than before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from syncpace.analysis.iterations import after_warmup
from syncpace.trace.reader import Trace

#: The device time columns of the events (``syncpace.trace.columns``).
DEVICE_COLUMNS = ("device_enter_ns", "device_exit_ns")
HOST, DEVICE = "host", "device"
#: How each device-clock source reads in a sentence.
_SOURCES = {"cuda_event": "CUDA events", "fake": "a simulated device clock"}


@dataclass(frozen=True)
class TimeBase:
    """The clock a run's figures are on, and why.

    ``clock``: ``"device"`` or ``"host"``. ``declared``: ranks whose metadata carries a
    device clock. ``source``/``uncertainty_ns``: their clock's source and its largest
    conversion uncertainty (None when none says). ``calls``/``lacking``: the completed
    calls the rule looked at and how many of them lacked a device time (counted only
    when some rank declares a device clock)."""

    clock: str = HOST
    declared: int = 0
    source: str | None = None
    uncertainty_ns: int | None = None
    calls: int = 0
    lacking: int = 0

    @property
    def device(self) -> bool:
        return self.clock == DEVICE

    @property
    def mixed(self) -> bool:
        """Some calls have device times and some do not: host time was used."""
        return self.declared > 0 and self.lacking > 0

    def label(self) -> str:
        """'device (CUDA events, ±12 µs)' or 'host'."""
        if not self.device:
            return HOST
        parts = [_SOURCES.get(self.source or "", self.source or "device events")]
        if self.uncertainty_ns is not None:
            parts.append(f"±{self.uncertainty_ns / 1e3:g} µs")
        return f"device ({', '.join(parts)})"

    def note(self) -> str | None:
        """Why host time was used where device times exist in part; None otherwise."""
        if not self.mixed:
            return None
        return (
            f"{self.lacking:,} of {self.calls:,} calls lacked device time: "
            "host time was used for every figure"
        )

    def figures(self) -> dict[str, str]:
        """Which clock each figure comes from."""
        clock = self.label()
        steps = f"{clock}: host boundaries moved by the run-ahead" if self.device else HOST
        out = {
            "arrivals, skew, waits, lateness": clock,
            "transfers, service time, busbw": clock,
            "overlap, exposed communication": clock,
            "replay and what-if": clock,
            "iteration boundaries": steps,
            "hang view": HOST,
        }
        if self.device:
            out["run-ahead, host lateness"] = "device enter − host enter"
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "clock": self.clock,
            "label": self.label(),
            "declared_ranks": self.declared,
            "source": self.source,
            "uncertainty_ns": self.uncertainty_ns,
            "calls": self.calls,
            "calls_without_device_time": self.lacking,
            "note": self.note(),
            "figures": self.figures(),
        }


def device_clocks(meta: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``device_clock`` of every rank whose metadata carries one (its keys are not
    validated by the reader: read defensively)."""
    return [m["device_clock"] for m in meta.values() if isinstance(m.get("device_clock"), dict)]


def declared(meta: dict[int, dict[str, Any]]) -> bool:
    """Whether some rank recorded device times: only then are their columns read."""
    return bool(device_clocks(meta))


def coverage(events: pl.DataFrame) -> tuple[int, int]:
    """(completed calls, those of them without both device times) of ``events``,
    which must hold the device columns."""
    if events.height == 0:
        return 0, 0
    done = pl.col("status") == "completed"
    lacks = (pl.col("device_enter_ns") < 0) | (pl.col("device_exit_ns") < 0)
    row = events.select(calls=done.sum(), lacking=(done & lacks).sum()).row(0)
    return int(row[0]), int(row[1])


def choose(meta: dict[int, dict[str, Any]], calls: int, lacking: int) -> TimeBase:
    """The run's time base from its metadata and the counts of :func:`coverage` over
    the calls the analysis measures (see the module's rule)."""
    clocks = device_clocks(meta)
    if not clocks:
        return TimeBase()
    sources = sorted({str(c.get("source")) for c in clocks if isinstance(c.get("source"), str)})
    values = [c.get("uncertainty_ns") for c in clocks]
    known = [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    use = DEVICE if calls > 0 and lacking == 0 else HOST
    return TimeBase(
        clock=use,
        declared=len(clocks),
        source="+".join(sources) if sources else None,
        uncertainty_ns=max(known) if known and len(known) == len(values) else None,
        calls=calls,
        lacking=lacking,
    )


def of_events(meta: dict[int, dict[str, Any]], events: pl.DataFrame) -> TimeBase:
    """The clock of a run whose analysed events (after the warm-up) are ``events``:
    their device times are looked at only when some rank declares a device clock."""
    if not declared(meta):
        return TimeBase()
    return choose(meta, *coverage(events))


def of_trace(trace: Trace, *, warmup_steps: int = 1) -> tuple[TimeBase, pl.DataFrame]:
    """The clock the analysis of ``trace`` uses (its warm-up left out as the analysis
    leaves it) and, on the device clock, per rank ``run_ahead_p50_ns`` and
    ``run_ahead_p90_ns`` over the steps' mean run-ahead of every completed call past
    the warm-up (``syncpace diagnose`` takes the calls of the iterations only)."""
    _, events = after_warmup(trace.steps, trace.events, warmup_steps)
    base = of_events(trace.meta, events)
    if not base.device:
        return base, pl.DataFrame()
    ahead = (
        events.filter(pl.col("status") == "completed")
        .group_by("rank", "step")
        .agg(run_ahead_ns=(pl.col("device_enter_ns") - pl.col("enter_ns")).mean())
    )
    per_rank = ahead.group_by("rank").agg(
        run_ahead_p50_ns=pl.col("run_ahead_ns").median(),
        run_ahead_p90_ns=pl.col("run_ahead_ns").quantile(0.9, "linear"),
    )
    return base, per_rank.sort("rank")


def on_device(events: pl.DataFrame) -> pl.DataFrame:
    """``events`` with the device times as ``enter_ns``/``exit_ns`` and the host's
    enqueue kept as ``host_enter_ns`` (last). A wait recorded on the host is moved by
    the call's run-ahead: the device's stream reaches the wait about as far behind the
    host as it reached the call (the late-wait rule then compares like with like)."""
    enter, device = pl.col("enter_ns"), pl.col("device_enter_ns")
    waited = (pl.col("wait_ns") >= 0) & (device >= 0)
    return events.with_columns(
        enter_ns=device,
        exit_ns=pl.col("device_exit_ns"),
        wait_ns=pl.when(waited).then(pl.col("wait_ns") + device - enter).otherwise(-1),
        host_enter_ns=enter,
    ).drop(DEVICE_COLUMNS)


#: Per (rank, step) columns :func:`~syncpace.analysis.collectives.rank_step_arrivals`
#: adds under the device clock.
DEVICE_RANK_STEP = (
    "host_lateness_ns",
    "run_ahead_ns",
    "tail_run_ahead_ns",
    "first_enter_ns",
    "last_exit_ns",
)


def device_steps(rank_steps: pl.DataFrame, rank_step: pl.DataFrame) -> pl.DataFrame:
    """The iteration boundaries on the device clock. A rank's boundary is a host time
    (the end of ``optimizer.step()``); its device reaches it later, by about the
    run-ahead of the rank's last call of the step. So the boundary moves to the host's
    plus that run-ahead, no later than the rank's first call of the next step reached
    the device and no earlier than its last call of the step completed there (the
    step's work includes its collectives), never before the previous boundary. A
    step's start moves with the previous boundary (it is that boundary); a rank's
    first step by its own shift. Rows keep their order."""
    if rank_steps.height == 0 or "tail_run_ahead_ns" not in rank_step.columns:
        return rank_steps
    cols = ["rank", "step", "tail_run_ahead_ns", "first_enter_ns", "last_exit_ns"]
    per = rank_step.select(cols).with_columns(pl.col("rank").cast(rank_steps["rank"].dtype))
    frame = (
        rank_steps.with_row_index("_row")
        .join(per, on=["rank", "step"], how="left")
        .sort("rank", "step")
    )
    # the host's boundary plus the run-ahead at the rank's last call (carried over a
    # step without calls), within [its last completion, its next step's first arrival]
    ahead = pl.col("tail_run_ahead_ns").forward_fill().over("rank")
    moved = (pl.col("end_ns") + ahead).fill_null(pl.col("end_ns"))
    following = pl.col("first_enter_ns").shift(-1).over("rank")
    moved = pl.min_horizontal(moved, following.fill_null(moved))
    end = pl.max_horizontal(moved, pl.col("last_exit_ns").fill_null(-1))
    frame = frame.with_columns(_end=end).with_columns(_end=pl.col("_end").cum_max().over("rank"))
    # a step starts at the previous boundary: it moves as that boundary moved
    shift = pl.col("_end") - pl.col("end_ns")
    start_shift = shift.shift(1).over("rank").fill_null(shift)
    start = pl.min_horizontal(pl.col("start_ns") + start_shift, pl.col("_end"))
    frame = frame.with_columns(start_ns=start, end_ns=pl.col("_end"))
    if "backward_ns" in frame.columns:  # a host time: no place on the device's timeline
        frame = frame.with_columns(backward_ns=pl.lit(-1, pl.Int64))
    return (
        frame.sort("_row")
        .with_columns(step_ns=pl.col("end_ns") - pl.col("start_ns"))
        .select(rank_steps.columns)
        .cast(dict(rank_steps.schema))  # type: ignore[arg-type]
    )


def run_ahead(rank_step: pl.DataFrame) -> pl.DataFrame:
    """Per rank under the device clock: ``run_ahead_p50_ns``/``run_ahead_p90_ns`` (how
    far its CPU ran ahead of its device: device enter − host enter, the mean over a
    step's calls, its median and 90th percentile over the steps) and
    ``host_lateness_p50_ns`` (its lateness by host enqueue against its peers')."""
    return rank_step.group_by("rank").agg(
        run_ahead_p50_ns=pl.col("run_ahead_ns").median(),
        run_ahead_p90_ns=pl.col("run_ahead_ns").quantile(0.9, "linear"),
        host_lateness_p50_ns=pl.col("host_lateness_ns").median(),
    )
