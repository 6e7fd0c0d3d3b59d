"""A late rank told apart by its own waiting for a CPU: where the host sampler measured
every rank on its own (each registers its process), a rank late step after step whose
main thread waited no longer than the others' is a straggler, weak or beside jitter;
one whose main thread waited for its lateness is its host's CPU, not a node to exclude.

Traces are written with the real writer (``tests/planted.py``); the host counters by
the real sampler over a fake host tree (``tests/sysfs_trees.py``) holding each rank's
main thread's ``schedstat``, with the registration files the ranks write. The truth is
the plant: which rank computes more, and which rank's threads waited."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planted import Planted, generate
from syncpace.analysis.api import analyze
from syncpace.analysis.thresholds import Thresholds
from syncpace.trace import load_trace, schema
from sysfs_trees import (
    JOB_PID,
    sample_host,
    switch_host,
    write_cpu,
    write_netdev,
    write_netstat,
    write_snmp,
)

#: One host, four ranks, 10 % compute jitter on every rank, 40 steps.
JITTERY = {"nodes": 1, "gpus_per_node": 4, "steps": 40, "jitter": 0.1}
#: Rank 1 computes 5 % more every step: under this jitter not late by the margin in
#: both halves, so the stability rule alone names no straggler.
WEAK = Planted(name="weak", slow_ranks=((1, 1.05),), **JITTERY)
HEALTHY = Planted(name="healthy", **JITTERY)
#: Rank 1 computes 25 % more every step: a straggler by any rule.
STRONG = Planted(name="strong", slow_ranks=((1, 1.25),), **JITTERY)
TICK_NS = 100_000_000
PID0 = 5000


def _host(
    run: Path,
    root: Path,
    main_wait: dict[int, float],
    host_wait: float = 0.6,
    ticks: int = 6,
    later: tuple[int, dict[int, float]] | None = None,
) -> None:
    """node0's sampler, ``ticks`` samples 100 ms apart from the run's first step on,
    over a host whose sampled rank's threads wait ``host_wait`` of the time they could
    run and whose rank ``r``'s main thread waits for a CPU ``main_wait[r]`` ns per ns
    (from tick ``later[0]`` on, ``later[1][r]``); every rank registered as the tracer
    registers it."""
    tree = switch_host(root)
    write_netdev(tree, {"eth0": {}})
    write_snmp(tree, {})
    write_netstat(tree, {})
    for rank in main_wait:
        (run / schema.rank_pid_name("node0", rank)).write_text(str(PID0 + rank))

    def script(tick: int) -> None:
        ns = TICK_NS * tick
        write_cpu(
            tree,
            job_run_ns=int((1 - host_wait) * ns),
            job_wait_ns=int(host_wait * ns),
        )
        for rank, wait in main_wait.items():
            waited = wait * ns
            if later is not None and tick > later[0]:
                waited = wait * TICK_NS * later[0] + later[1][rank] * TICK_NS * (tick - later[0])
            pid = PID0 + rank
            task = tree.root / f"proc/{pid}/task/{pid}"
            task.mkdir(parents=True, exist_ok=True)
            (task / "schedstat").write_text(f"{int(0.2 * ns)} {int(waited)} 10\n")

    sample_host(run, "node0", tree, ticks, script, job_pid=JOB_PID, use_nvml=False)


def _analyze(tmp_path: Path, scenario: Planted, main_wait: dict[int, float] | None):
    run = generate(scenario, tmp_path / "run")
    if main_wait is not None:
        _host(run, tmp_path / "host", main_wait)
    return analyze(run)


def _named(analysis, mode: str) -> list[tuple[int, ...]]:
    return [f.ranks for f in analysis.findings if f.mode == mode]


ALIKE = {0: 0.1, 1: 0.1, 2: 0.1, 3: 0.1}


def test_without_each_rank_measured_the_weak_straggler_is_not_named(tmp_path):
    """The rule it extends: the host's counters alone (the sampled rank's threads
    waiting 60 %), the weak rank not late by the margin in each half, is no straggler."""
    run = generate(WEAK, tmp_path / "run")
    tree = switch_host(tmp_path / "host")
    write_netdev(tree, {"eth0": {}})
    write_snmp(tree, {})
    write_netstat(tree, {})

    def script(tick: int) -> None:
        ns = TICK_NS * tick
        write_cpu(tree, job_run_ns=int(0.4 * ns), job_wait_ns=int(0.6 * ns))

    sample_host(run, "node0", tree, 6, script, job_pid=JOB_PID, use_nvml=False)
    analysis = analyze(run)
    assert (1,) not in _named(analysis, "straggler")


def test_a_weak_straggler_whose_threads_waited_like_the_others_is_named(tmp_path):
    """Rank 1 computes 5 % more every step under 10 % jitter, on a loaded host where
    every rank's main thread waited alike: rank 1 is a straggler (step after step,
    its waiting no explanation), at rank 1 only; not CPU starvation of rank 1."""
    analysis = _analyze(tmp_path, WEAK, ALIKE)
    for f in analysis.findings:
        print(f.mode, round(f.cost, 4), f.ranks, f.summary)
    (found,) = [f for f in analysis.findings if f.mode == "straggler" and f.ranks]
    assert found.ranks == (1,)
    assert found.evidence["stable"] is False
    above, steps = found.evidence["steps_above_median"][1]
    assert steps == 39 and above > steps / 2
    assert found.evidence["steady_t"][1] >= Thresholds().straggler_steady_t
    assert found.evidence["cpu_extra_wait_ms"] == {1: pytest.approx(0.0, abs=0.01)}
    assert "its main thread's waiting for a CPU does not explain it" in found.summary
    assert all(1 not in f.ranks for f in analysis.findings if f.mode == "cpu_starvation")
    # its cost against the truth from outside the analysis: the same job (same seed,
    # same jitter) rerun without the slow rank
    rerun = _analyze(tmp_path / "rerun", HEALTHY, ALIKE)
    truth = 1 - rerun.runs[0].iteration_ns / analysis.runs[0].iteration_ns
    print(f"cost {found.cost:.4f}, rerun {truth:.4f}")
    assert truth > 0.01
    assert found.cost == pytest.approx(truth, abs=0.01)


def test_the_same_lateness_with_the_rank_waiting_for_it_is_cpu_starvation(tmp_path):
    """The same trace, rank 1's main thread waiting for a CPU 10 % of the time more
    than the others' (more than its lateness per iteration): CPU starvation of node0,
    rank 1 late by it; rank 1 is not named a straggler."""
    analysis = _analyze(tmp_path, WEAK, {**ALIKE, 1: 0.2})
    for f in analysis.findings:
        print(f.mode, round(f.cost, 4), f.ranks, f.summary)
    assert (1,) not in _named(analysis, "straggler")
    (found,) = [f for f in analysis.findings if f.mode == "cpu_starvation"]
    assert found.nodes == ("node0",)
    assert 1 in found.evidence["late_ranks"]
    waited = found.evidence["cpu_extra_wait_ms_by_rank"]["node0"][1]
    iteration_ms = found.evidence["iteration_ms"]
    assert waited == pytest.approx(0.1 * iteration_ms, rel=0.01)
    assert f"rank 1 {waited:.1f} ms" in found.summary
    assert not any("Exclude or replace" in a for a in found.actions)


def test_a_strong_straggler_waiting_for_its_lateness_is_its_hosts_cpu(tmp_path):
    """Rank 1 computes 25 % more every step: named a straggler by the stability rule
    when every rank waited alike; CPU starvation when its own main thread waited for
    a CPU longer than its extra compute, so no node is advised to be replaced."""
    alike = _analyze(tmp_path / "a", STRONG, ALIKE)
    assert (1,) in _named(alike, "straggler")
    (straggler,) = [f for f in alike.findings if f.mode == "straggler" and f.ranks]
    assert straggler.evidence["stable"] is True
    assert "late in both halves of the run" in straggler.summary
    waiting = _analyze(tmp_path / "b", STRONG, {**ALIKE, 1: 0.45})
    for f in waiting.findings:
        print(f.mode, round(f.cost, 4), f.ranks, f.summary)
    assert (1,) not in _named(waiting, "straggler")
    assert waiting.findings[0].mode == "cpu_starvation"
    assert 1 in waiting.findings[0].evidence["late_ranks"]
    assert not any("Exclude or replace" in a for a in waiting.findings[0].actions)


def test_waiting_outside_the_iterations_explains_no_straggler(tmp_path):
    """The sampler runs for the job's whole life; the trace holds its iterations (a
    window of them, or a job that exports, evaluates or shuts down after). Rank 1
    computes 25 % more every step while every rank's main thread waits alike; after the
    last step, rank 1's waits for a CPU 90 % of the time (over the whole sampled span,
    more than its lateness per iteration). What it waited outside the iterations
    explains nothing in them: rank 1 is a straggler, not its host's CPU."""
    run = generate(STRONG, tmp_path / "run")
    last = load_trace(run).steps["end_ns"].max()
    # the sampler's first tick is at the first step's start (1 s), 100 ms apart
    end_tick = -(-(last - 1_000_000_000) // TICK_NS)
    _host(run, tmp_path / "host", ALIKE, ticks=2 * end_tick, later=(end_tick, {**ALIKE, 1: 0.9}))
    analysis = analyze(run)
    for f in analysis.findings:
        print(f.mode, round(f.cost, 4), f.ranks, f.summary)
    (straggler,) = [f for f in analysis.findings if f.mode == "straggler" and f.ranks]
    assert straggler.ranks == (1,)
    assert straggler.evidence["stable"] is True
    hungry = [f for f in analysis.findings if f.mode == "cpu_starvation"]
    assert all(1 not in f.evidence.get("late_ranks", ()) for f in hungry)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_jitter_alone_on_a_loaded_host_names_no_straggler(tmp_path, seed):
    """No slow rank, every rank's main thread waiting alike on a loaded host: the
    per-step evidence names no rank, over five seeds of the jitter."""
    analysis = _analyze(tmp_path, HEALTHY.replace(seed=seed), ALIKE)
    assert not [r for r in _named(analysis, "straggler") if r]


def test_without_wait_removes_the_waiting_and_no_more(tmp_path):
    """The counterfactual of a rank late by its CPU: its gaps shorter by the time it
    waited per iteration on average, put where its extra time is (each step in
    proportion to its time beyond the other ranks' median for the same actions),
    never below that median; the other ranks untouched."""
    from syncpace.analysis.metrics import compute_metrics
    from syncpace.analysis.replay import counterfactuals as cf
    from syncpace.trace import load_trace

    prog = compute_metrics(load_trace(generate(STRONG, tmp_path / "run"))).program
    assert prog is not None
    waited = 1_000_000.0  # 1 ms an iteration, less than rank 1's 25 % more compute
    gap = cf.without_wait(prog, {1: waited}).gap
    mine = prog.rank == 1
    assert np.array_equal(gap[~mine], prog.gap[~mine])
    assert np.all(gap <= prog.gap)
    typical = cf.compute_like_others(prog, [1]).gap
    assert np.all(gap[mine] >= typical[mine] - 1e-6)
    steps = np.searchsorted(prog.steps, prog.step[mine])
    removed = np.bincount(steps, weights=prog.gap[mine] - gap[mine])
    extra = np.bincount(steps, weights=prog.gap[mine] - typical[mine])
    # the whole millisecond a step on average, none of it where there was no extra time
    assert removed.mean() == pytest.approx(waited, rel=1e-6)
    # each step's part in proportion to its extra time: a step twice as late lost twice
    assert np.allclose(removed, extra * waited / extra.mean())
    # a wait longer than its lateness stops at the others' median, action by action
    big = cf.without_wait(prog, {1: 1e9}).gap
    assert np.allclose(big[mine], typical[mine])


def test_waiting_in_bursts_is_costed_where_it_fell(tmp_path):
    """A rank whose CPU comes in bursts (a CPU limit throttles a period at a time):
    rank 1 computes 40 ms more in every other step, its main thread waiting for a CPU
    that long on average (20 ms an iteration). The cost of CPU starvation against the
    truth from outside the analysis, the same job rerun without the bursts: a flat
    20 ms off every step would leave each burst step 20 ms late and cut nothing from
    the others."""
    bursts = HEALTHY.replace(name="bursts", stalls=tuple((1, s, 40.0) for s in range(1, 40, 2)))
    run = generate(bursts, tmp_path / "run")
    steps = load_trace(run).steps
    iteration_ns = float((steps["end_ns"] - steps["start_ns"]).mean())
    rate = 20e6 / iteration_ns  # ns waited per ns: 20 ms an iteration
    _host(run, tmp_path / "host", {**ALIKE, 1: ALIKE[1] + rate})
    analysis = analyze(run)
    for f in analysis.findings:
        print(f.mode, round(f.cost, 4), f.ranks, f.summary)
    first = analysis.findings[0]
    assert first.mode == "cpu_starvation" and 1 in first.evidence["late_ranks"]
    rerun = _analyze(tmp_path / "rerun", HEALTHY, ALIKE)
    truth = 1 - rerun.runs[0].iteration_ns / analysis.runs[0].iteration_ns
    print(f"cost {first.cost:.4f}, rerun {truth:.4f}")
    assert truth > 0.2
    assert first.cost == pytest.approx(truth, abs=0.02)


@pytest.mark.parametrize("bench_gbps", [0.5, 80.0, 10_000.0])
def test_a_fed_ranks_transfers_take_the_slower_of_the_bench_and_the_runs_best(tmp_path, bench_gbps):
    """What the links allow a fed rank's transfers: no faster than the benchmark (one
    collective alone on rested links), nor than the run's best transfer of their
    class (the job's own transfers beside each other); never slower than measured."""
    from syncpace.analysis.detectors import cpu
    from syncpace.analysis.detectors.context import Context
    from syncpace.analysis.metrics import compute_metrics
    from syncpace.analysis.replay import counterfactuals as cf

    metrics = compute_metrics(load_trace(generate(STRONG, tmp_path / "run")))
    prog = metrics.program
    assert prog is not None
    ctx = Context(metrics, Thresholds(link_gbps=bench_gbps), None)
    theirs = cf.instances_with(prog, [1])
    made = cpu.links_allow(ctx, prog, [1]).service
    best = cf.transfers_at_best(prog, which=theirs).service
    rate = cf.transfers_at_rate(prog, bench_gbps, which=theirs).service
    assert made is not None and best is not None and rate is not None
    assert np.array_equal(made, np.fmax(best, rate))
    assert np.all(made <= prog.service)
    # the planted links run at 80 GB/s: a slower bench holds every transfer to it, a
    # far faster one leaves the run's best
    if bench_gbps == 0.5:
        assert np.array_equal(made, prog.service)  # no transfer was that slow
    if bench_gbps == 10_000.0:
        assert np.array_equal(made, best)


def test_ranks_taking_turns_whose_threads_waited_alike_are_no_cpu_starvation(tmp_path):
    """Rank 1 computes 30 % more in the first half of the run, rank 0 in the second,
    on a host whose threads wait for a CPU 60 % of the time, every rank's main thread
    alike: each late rank is slow by its own doing in the half it is late (it waited
    no more than the others there), so the late rank changes, and the host's CPU,
    which starved the ranks on time alike, is not named its cause."""
    turns = Planted(
        name="turns",
        nodes=1,
        gpus_per_node=2,
        steps=40,
        jitter=0.08,
        slow_spans=((1, 1.3, 0, 20), (0, 1.3, 20, 40)),
    )
    run = generate(turns, tmp_path / "run")
    steps = load_trace(run).steps
    span_ns = int(steps["end_ns"].max() - steps["start_ns"].min())
    _host(run, tmp_path / "host", {0: 0.1, 1: 0.1}, ticks=span_ns // TICK_NS + 2)
    analysis = analyze(run)
    for f in analysis.findings:
        print(f.mode, round(f.cost, 4), f.ranks, f.summary)
    assert "cpu_starvation" not in {f.mode for f in analysis.findings}
    (changing,) = [f for f in analysis.findings if f.mode == "straggler"]
    assert changing.ranks == ()
    assert "the late rank changes: rank 1 in the first half of the run, rank 0 in the second" in (
        changing.summary
    )
