"""The analysis on device time: traces whose device and host times are planted
(``tests/device_traces.py``), so which rank is late, on which side, and every figure
are known by construction. The same run with its device columns at -1 is what the host
alone saw."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl
import pytest
from tests.device_traces import MS, US, DeviceRun, plant, write_device_run

from syncpace.analysis import Thresholds, analyze, timebase
from syncpace.analysis.frames import ANALYSIS_COLUMNS
from syncpace.analysis.metrics import RunMetrics, compute_metrics
from syncpace.analysis.streaming import Context, same_metrics, stream_metrics
from syncpace.errors import ConfigError
from syncpace.trace.reader import load_trace

#: Rank 1's GPU takes 30 ms more before each step's first call while its CPU runs 65 ms
#: ahead of it (20 ms ahead of its peers' enqueue); rank 3's CPU enqueues 10 ms after
#: its peers but runs 5 ms ahead of its device, which arrives on time.
SLOW_GPU = DeviceRun(device_delay={1: 30 * MS}, run_ahead={1: 65 * MS, 3: 5 * MS})
#: Rank 1 as above; rank 2's device waits 12 ms for its CPU, 50 µs behind it.
BOTH = DeviceRun(device_delay={1: 30 * MS, 2: 12 * MS}, run_ahead={1: 65 * MS, 2: 50 * US})


def host_only(run: DeviceRun) -> DeviceRun:
    """The same run as the host saw it: no device clock, every device time -1."""
    return dataclasses.replace(run, device_uncertainty_ns=None)


def metrics_of(tmp_path: Path, run: DeviceRun, name: str = "run") -> RunMetrics:
    return compute_metrics(load_trace(write_device_run(tmp_path / name, run)))


def stragglers(path: Path) -> dict[tuple[int, ...], dict]:
    """Straggler findings of a diagnosis: ranks -> evidence."""
    a = analyze([str(path)])
    return {f.ranks: f.evidence for f in a.findings if f.mode == "straggler"}


def test_a_slow_gpu_is_the_straggler_on_device_time_not_on_host_time(tmp_path: Path) -> None:
    device = write_device_run(tmp_path / "device", SLOW_GPU)
    host = write_device_run(tmp_path / "host", host_only(SLOW_GPU))
    on_device = compute_metrics(load_trace(device))
    on_host = compute_metrics(load_trace(host))
    assert on_device.time_base.device and not on_host.time_base.device

    last = {m.time_base.clock: m.last["last_rank"].unique().to_list() for m in (on_device, on_host)}
    assert last == {"device": [1], "host": [3]}  # every step: rank 1 on device, 3 on host
    found = stragglers(device)
    assert list(found) == [(1,)]
    assert found[(1,)]["compute_excess_ms"] == {1: 30.0}
    assert found[(1,)]["late_side"] == {1: "slow GPU"}
    # the host's arrivals alone: rank 1 enqueues first, rank 3 last; no straggler
    assert not any(1 in ranks for ranks in stragglers(host))
    assert stragglers(host) == {}


def test_run_ahead_per_rank_is_device_enter_minus_host_enter(tmp_path: Path) -> None:
    m = metrics_of(tmp_path, SLOW_GPU)
    ahead = dict(zip(m.per_rank["rank"], m.per_rank["run_ahead_p50_ns"], strict=True))
    p90 = dict(zip(m.per_rank["rank"], m.per_rank["run_ahead_p90_ns"], strict=True))
    want = {r: float(SLOW_GPU.ahead(r)) for r in range(SLOW_GPU.ranks)}
    assert ahead == want == p90 == {0: 15 * MS, 1: 65 * MS, 2: 15 * MS, 3: 5 * MS}
    summary = m.summary()["time_base"]
    assert summary["run_ahead_ns"]["1"] == {"p50": 65 * MS, "p90": 65 * MS}


def test_late_cpu_and_slow_gpu_are_told_apart(tmp_path: Path) -> None:
    found = stragglers(write_device_run(tmp_path / "run", BOTH))
    assert set(found) == {(1,), (2,)}  # 30 ms and 12 ms late: two levels of slowness
    gpu, cpu = found[(1,)], found[(2,)]
    assert gpu["late_side"] == {1: "slow GPU"}
    assert cpu["late_side"] == {2: "late CPU"}
    # Against the typical rank (ranks 0 and 3): rank 2's device is 12 ms late at call 0
    # and on time at call 1, 6 ms a call; its host enqueues 46.95 and 64.95 ms after
    # rank 1's (the first, 35 and 65 ms ahead), the typical rank's 20 and 50 ms after:
    # 20.95 ms later a call. Rank 1's host enqueues 35 ms before the typical rank's.
    assert cpu["device_late_p50_ms"] == {2: 6.0}
    assert cpu["host_late_p50_ms"] == {2: 20.95}
    assert cpu["run_ahead_p50_ms"] == {2: 0.05}
    assert gpu["device_late_p50_ms"] == {1: 15.0}
    assert gpu["host_late_p50_ms"] == {1: -35.0}
    assert gpu["run_ahead_p50_ms"] == {1: 65.0}
    assert gpu["typical_run_ahead_p50_ms"] == cpu["typical_run_ahead_p50_ms"] == 15.0


def test_the_thresholds_decide_what_late_and_waiting_are(tmp_path: Path) -> None:
    run = write_device_run(tmp_path / "run", BOTH)
    # rank 2's CPU, 0.05 ms ahead of its device, is further behind than the typical
    # rank's 15 ms whatever the slack: its device waits for it
    strict = analyze([str(run)], Thresholds(late_cpu_run_ahead_us=0.0))
    sides = {f.ranks: f.evidence["late_side"] for f in strict.findings if f.mode == "straggler"}
    assert sides == {(1,): {1: "slow GPU"}, (2,): {2: "late CPU"}}
    for bad in ({"late_cpu_share": 1.5}, {"late_cpu_run_ahead_us": -1.0}):
        with pytest.raises(ConfigError):
            Thresholds(**bad)


def test_device_figures_equal_the_planted_ones(tmp_path: Path) -> None:
    run = DeviceRun(device_delay={1: 30 * MS}, run_ahead={1: 65 * MS})
    m = metrics_of(tmp_path, run)
    inst = m.instances.sort("seq")
    first, second = inst.filter(pl.col("seq") % 2 == 0), inst.filter(pl.col("seq") % 2 == 1)
    # call 0: rank 1 reaches it 30 ms after the others; call 1: all at once
    assert first["skew_ns"].unique().to_list() == [30 * MS]
    assert second["skew_ns"].unique().to_list() == [0]
    assert first["last_rank"].unique().to_list() == [1]
    # ends 5 ms after the last member reached it: transfer, service and busbw from that
    assert inst["transfer_ns"].unique().to_list() == [5 * MS]
    assert inst["service_ns"].unique().to_list() == [5 * MS]
    busbw = (64 << 20) / (5 * MS) * 2 * 3 / 4  # bytes / ns x all-reduce's 2(n-1)/n
    assert inst["busbw_gbps"].unique().to_list() == [pytest.approx(busbw, rel=1e-12)]
    # two calls of 40 ms compute + 5 ms transfer, rank 1's 30 ms, 3 ms of optimizer
    assert m.iteration["mean"] == m.iteration["max"] == 123 * MS
    lateness = dict(zip(m.per_rank["rank"], m.per_rank["lateness_p50_ns"], strict=True))
    assert lateness == {0: 0.0, 1: 15 * MS, 2: 0.0, 3: 0.0}
    assert m.rank_step["wait_ns"].unique().to_list() == [0]  # the last call: no wait
    assert m.comm["network_share"] == pytest.approx(10 / 123)
    assert m.comm["exposed_share"] == pytest.approx(5 / 123)
    # the host saw something else: enqueue skews of 20 and 50 ms, 20 µs "transfers"
    h = metrics_of(tmp_path, host_only(run), "host").instances
    assert sorted(h["skew_ns"].unique().to_list()) == [20 * MS, 50 * MS]
    assert h["transfer_ns"].unique().to_list() == [20 * US]


def test_iteration_boundaries_move_to_the_device(tmp_path: Path) -> None:
    """The host's boundaries plus the run-ahead are the planted device boundaries."""
    m = metrics_of(tmp_path, SLOW_GPU)
    _, planted = plant(SLOW_GPU)
    want = pl.DataFrame(
        [(r, s, a, b) for r, rows in planted.items() for s, a, b in rows if s >= 1],
        schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    )
    got = m.rank_steps.select("rank", "step", "start_ns", "end_ns").sort("rank", "step")
    assert got.equals(want.sort("rank", "step"))
    assert m.program is not None and m.program.violations == 0


def test_the_replay_runs_on_device_time(tmp_path: Path) -> None:
    """The plain replay gives back the device's iterations; removing rank 1's 30 ms
    saves them all."""
    a = analyze([str(write_device_run(tmp_path / "run", SLOW_GPU))])
    table = a.what_if[0]
    assert table is not None
    assert table.base.measured_ns == pytest.approx(123 * MS)
    assert table.base.replayed_ns == pytest.approx(123 * MS)
    row = table.row("straggler:1")
    assert row is not None and row.iteration_ns == pytest.approx(93 * MS)


@pytest.mark.parametrize(
    ("lacking", "clock"),
    [
        (frozenset({(3, 5)}), "host"),  # one rank's calls of one step: a mixed run
        (frozenset((r, 0) for r in range(4)), "device"),  # only in the warm-up
    ],
)
def test_a_mixed_run_falls_back_to_host_and_says_so(
    tmp_path: Path, lacking: frozenset, clock: str
) -> None:
    mixed = metrics_of(tmp_path, dataclasses.replace(SLOW_GPU, lacking=lacking), "mixed")
    base = mixed.time_base
    assert base.clock == clock
    if clock == "device":
        assert (base.calls, base.lacking, base.note()) == (88, 0, None)
        return
    # 11 steps after the warm-up x 2 calls x 4 ranks; rank 3's 2 calls of step 5
    assert (base.calls, base.lacking) == (88, 2)
    assert base.note() == "2 of 88 calls lacked device time: host time was used for every figure"
    assert mixed.summary()["time_base"]["calls_without_device_time"] == 2
    assert "run_ahead_p50_ns" not in mixed.per_rank.columns
    # every figure is the host's: the same as the run without device times (but for
    # the directory's name, which the hang view carries too)
    host = metrics_of(tmp_path, host_only(SLOW_GPU), "host")
    assert set(same_metrics(host, mixed)) == {"run", "hang", "time_base"}
    assert dataclasses.replace(mixed.hang, run=host.hang.run) == host.hang


@pytest.mark.parametrize("run", [SLOW_GPU, BOTH, dataclasses.replace(BOTH, lacking={(2, 7)})])
@pytest.mark.parametrize("window_events", [1, 1_000_000])
def test_streaming_equals_the_loaded_analysis_on_device_time(
    tmp_path: Path, run: DeviceRun, window_events: int
) -> None:
    path = write_device_run(tmp_path / "run", run)
    trace = load_trace(path)
    expected = compute_metrics(trace)
    got, sample = stream_metrics(path, window_events=window_events)
    assert same_metrics(expected, got) == []
    assert got.time_base == expected.time_base
    assert got.time_base.device == (not run.lacking)
    if got.time_base.device:  # the report's iterations on the device clock too
        assert sample.events["enter_ns"].min() >= run.start_ns


def test_the_host_only_path_reads_and_carries_nothing_more(tmp_path: Path) -> None:
    m = metrics_of(tmp_path, host_only(SLOW_GPU))
    assert m.time_base == timebase.TimeBase()
    assert not set(timebase.DEVICE_RANK_STEP) & set(m.rank_step.columns)
    assert "run_ahead_p50_ns" not in m.per_rank.columns
    assert Context(None, pl.Series([], dtype=pl.Int64).to_numpy()).columns == ANALYSIS_COLUMNS


def test_on_device_moves_a_wait_by_the_call_s_run_ahead() -> None:
    events = pl.DataFrame(
        {
            "enter_ns": [100, 200],
            "exit_ns": [120, 220],
            "wait_ns": [110, -1],
            "device_enter_ns": [1_100, 5_200],
            "device_exit_ns": [1_900, 5_900],
        }
    )
    got = timebase.on_device(events)
    assert got.columns == ["enter_ns", "exit_ns", "wait_ns", "host_enter_ns"]
    assert got.rows() == [(1_100, 1_900, 1_110, 100), (5_200, 5_900, -1, 200)]


def test_labels_say_which_clock() -> None:
    meta = {0: {"device_clock": {"source": "cuda_event", "uncertainty_ns": 12_000}}, 1: {}}
    assert timebase.choose(meta, 10, 0).label() == "device (CUDA events, ±12 µs)"
    assert timebase.choose(meta, 10, 3).label() == "host"
    assert timebase.choose({0: {}}, 10, 0) == timebase.TimeBase()
    assert timebase.choose(meta, 0, 0).clock == "host"  # no completed call: nothing to read


def test_a_boundary_stays_between_its_last_completion_and_the_next_arrival() -> None:
    steps = pl.DataFrame(
        {
            "rank": [0, 0, 0],
            "step": [1, 2, 3],
            "start_ns": [0, 100, 200],
            "end_ns": [100, 200, 300],
            "pacing_delay_ns": [0, 0, 0],
            "step_ns": [100, 100, 100],
        },
        schema_overrides={"rank": pl.Int32},
    )
    per = pl.DataFrame(
        {
            "rank": [0, 0, 0],
            "step": [1, 2, 3],
            "tail_run_ahead_ns": [50, 50, 50],
            "first_enter_ns": [40, 130, 230],
            "last_exit_ns": [170, 220, 290],
        },
        schema_overrides={"rank": pl.Int32},
    )
    got = timebase.device_steps(steps, per)
    # step 1: 100 + 50 is before its last completion (170); step 2: 200 + 50 is after
    # step 3's first arrival (230); step 3: 300 + 50. Starts follow the boundary before.
    assert got.select("start_ns", "end_ns", "step_ns").rows() == [
        (70, 170, 100),
        (170, 230, 60),
        (230, 350, 120),
    ]
