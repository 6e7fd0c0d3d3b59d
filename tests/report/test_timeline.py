"""Swimlanes of one iteration: the slowest and a typical one, every rank's compute,
waits, transfers and pacing delays, checked against the raw trace files."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from syncpace.analysis import compute_metrics
from syncpace.analysis.timeline import IterationSample, pick_iterations, sample_iterations
from syncpace.report import format as fmt
from syncpace.report.timeline import MAX_LANES, iteration_figure, lanes
from syncpace.trace import load_trace

DATA = Path(__file__).resolve().parents[1] / "data"
DEMO = DATA / "demo" / "trace"
PACED = DATA / "demo" / "trace-paced"


def _raw(run: Path, table: str) -> list[dict]:
    rows = []
    for path in sorted(run.glob(f"rank-*.{table}.arrow")):
        rows += pa.ipc.open_stream(pa.memory_map(str(path))).read_all().to_pylist()
    return rows


def _step_times(run: Path, warmup: int = 1) -> dict[int, int]:
    """Per step: latest end over ranks minus the previous step's (the first kept step:
    from the earliest start)."""
    ends: dict[int, int] = defaultdict(int)
    starts: dict[int, int] = {}
    for s in _raw(run, "steps"):
        if s["step"] >= warmup:
            ends[s["step"]] = max(ends[s["step"]], s["end_ns"])
            starts[s["step"]] = min(starts.get(s["step"], s["start_ns"]), s["start_ns"])
    steps = sorted(ends)
    out = {steps[0]: ends[steps[0]] - starts[steps[0]]}
    out.update({b: ends[b] - ends[a] for a, b in zip(steps, steps[1:], strict=False)})
    return out


@pytest.fixture(scope="module")
def demo() -> tuple[IterationSample, object]:
    trace = load_trace(DEMO)
    metrics = compute_metrics(trace)
    return sample_iterations(trace, metrics), metrics


def test_the_slowest_and_a_typical_iteration_are_picked(demo):
    sample, _ = demo
    times = _step_times(DEMO)
    picks = dict(sample.picks)
    assert times[picks["slowest"]] == max(times.values())
    median = sorted(times.values())[len(times) // 2]
    spread = sorted(abs(t - median) for t in times.values())
    assert abs(times[picks["typical"]] - median) <= spread[1]  # among the two closest


def test_the_sample_holds_every_call_of_those_iterations(demo):
    sample, _ = demo
    wanted = {step for _, step in sample.picks}
    raw = [e for e in _raw(DEMO, "events") if e["step"] in wanted]
    assert sample.events.height == len(raw)
    last_enter: dict[tuple, int] = defaultdict(int)
    for e in raw:
        last_enter[(e["group"], e["seq"])] = max(last_enter[(e["group"], e["seq"])], e["enter_ns"])
    got = {(r["rank"], r["group"], r["seq"]): r for r in sample.events.iter_rows(named=True)}
    for e in raw:
        row = got[(e["rank"], e["group"], e["seq"])]
        assert (row["enter_ns"], row["exit_ns"]) == (e["enter_ns"], e["exit_ns"])
        assert row["last_enter_ns"] == last_enter[(e["group"], e["seq"])]


def _bars(fig) -> dict[str, list]:
    return {bar.name: bar for bar in fig.data}


def test_swimlanes_show_compute_waits_and_transfers(demo):
    sample, metrics = demo
    step = dict(sample.picks)["slowest"]
    places = fmt.Places.of(metrics.placement)
    fig = iteration_figure(sample, step, places, title="slowest")
    bars = _bars(fig)
    calls = [e for e in _raw(DEMO, "events") if e["step"] == step]
    last = defaultdict(int)
    for e in calls:
        last[e["seq"]] = max(last[e["seq"]], e["enter_ns"])
    transfer_ms = sum(e["exit_ns"] - max(e["enter_ns"], last[e["seq"]]) for e in calls) / 1e6
    wait_ms = sum(last[e["seq"]] - e["enter_ns"] for e in calls) / 1e6
    assert sum(bars["all_reduce"].x) == pytest.approx(transfer_ms, rel=1e-9)
    assert sum(bars["waiting for the last rank"].x) == pytest.approx(wait_ms, rel=1e-9)
    steps = [s for s in _raw(DEMO, "steps") if s["step"] == step]
    compute = bars["compute and other work"]
    assert sorted(compute.x) == pytest.approx(
        sorted((s["end_ns"] - s["start_ns"]) / 1e6 for s in steps)
    )
    assert list(fig.layout.yaxis.ticktext) == [places.short(r) for r in (3, 2, 1, 0)]
    # the straggler computes while the others wait: rank 2 has no wait in this step
    lane_of = {
        v: k for k, v in zip(fig.layout.yaxis.ticktext, fig.layout.yaxis.tickvals, strict=True)
    }
    waiting = {lane_of[round(y)] for y in bars["waiting for the last rank"].y}
    assert places.short(2) not in waiting and len(waiting) == 3


def test_a_pacing_delay_sits_before_the_ranks_first_collective():
    trace = load_trace(PACED)
    metrics = compute_metrics(trace)
    paced = trace.steps.filter(pl.col("pacing_delay_ns") > 0).sort("pacing_delay_ns")
    row = paced.row(-1, named=True)
    sample = sample_iterations(trace, metrics, picks=(("paced", row["step"]),))
    fig = iteration_figure(sample, row["step"], fmt.Places.of(metrics.placement), title="p")
    gold = _bars(fig)["pacing delay"]
    lane = dict(zip(fig.layout.yaxis.ticktext, fig.layout.yaxis.tickvals, strict=True))
    places = fmt.Places.of(metrics.placement)
    mine = [i for i, y in enumerate(gold.y) if y == lane[places.short(row["rank"])]]
    assert len(mine) == 1
    first = min(
        e["enter_ns"]
        for e in _raw(PACED, "events")
        if e["rank"] == row["rank"] and e["step"] == row["step"]
    )
    t0 = min(s["start_ns"] for s in _raw(PACED, "steps") if s["step"] == row["step"])
    (i,) = mine
    assert gold.x[i] == pytest.approx(row["pacing_delay_ns"] / 1e6, rel=1e-9)
    assert gold.base[i] + gold.x[i] == pytest.approx((first - t0) / 1e6, rel=1e-9)


def test_overlapping_calls_take_sub_rows():
    steps = pl.DataFrame(
        {"rank": [0], "step": [1], "start_ns": [0], "end_ns": [100], "pacing_delay_ns": [0]},
        schema={
            "rank": pl.Int32,
            "step": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "pacing_delay_ns": pl.Int64,
        },
    )
    calls = pl.DataFrame(
        {
            "rank": [0, 0, 0],
            "step": [1, 1, 1],
            "op": ["all_reduce", "all_gather", "all_reduce"],
            "group": ["0", "0", "0"],
            "seq": [0, 1, 2],
            "bytes": [1 << 20] * 3,
            "enter_ns": [10, 20, 70],
            "exit_ns": [60, 50, 90],
            "last_enter_ns": [10, 20, 70],
        },
        schema_overrides={"rank": pl.Int32},
    )
    sample = IterationSample("run", (("slowest", 1),), steps, calls)
    fig = iteration_figure(sample, 1, fmt.Places({0: "h"}, {0: 0}), title="t")
    bars = _bars(fig)
    reduce_rows = list(bars["all_reduce"].y)
    gather_rows = list(bars["all_gather"].y)
    assert reduce_rows[0] != gather_rows[0]  # in flight together: two sub-rows
    assert reduce_rows[1] == reduce_rows[0]  # the third starts after the first ended


def test_large_jobs_show_a_bounded_set_of_lanes_with_the_named_ranks():
    n = 256
    steps = pl.DataFrame(
        {
            "rank": list(range(n)),
            "step": [1] * n,
            "start_ns": [0] * n,
            "end_ns": [100] * n,
            "pacing_delay_ns": [0] * n,
        },
        schema_overrides={"rank": pl.Int32},
    )
    calls = pl.DataFrame(
        {
            "rank": list(range(n)),
            "step": [1] * n,
            "op": ["all_reduce"] * n,
            "group": ["0"] * n,
            "seq": [0] * n,
            "bytes": [8] * n,
            "enter_ns": [r % 50 for r in range(n)],
            "exit_ns": [99] * n,
            "last_enter_ns": [49] * n,
        },
        schema_overrides={"rank": pl.Int32},
    )
    shown = lanes(IterationSample("run", (("slowest", 1),), steps, calls), 1, named=[200, 201])
    assert len(shown) <= MAX_LANES and {200, 201} <= set(shown)
    last = {r for r in range(n) if r % 50 == 49}
    assert 0 in shown and last & set(shown)  # the first and a last to arrive


def test_picks_of_a_run_with_one_iteration():
    one = pl.DataFrame({"step": [3], "time_ns": [10]})
    assert pick_iterations(one) == (("slowest", 3),)
    assert pick_iterations(pl.DataFrame({"step": [], "time_ns": []})) == ()
