"""CPU starvation judged on its own evidence, stragglers only when stable across the
run's halves, and a straggler's cost without the jitter the jitter finding charges.

Traces are written with the real writer (``tests/planted.py``), host counters by the
real sampler over fake host trees (``tests/sysfs_trees.py``): the sampled rank's
threads' run and run-queue wait times (``schedstat``) and its cgroup's throttling."""

from __future__ import annotations

from pathlib import Path

import pytest

from planted import Planted, generate
from syncpace.analysis.api import analyze
from syncpace.analysis.thresholds import Thresholds
from sysfs_trees import (
    JOB_PID,
    sample_host,
    switch_host,
    write_cpu_shares,
    write_netdev,
    write_netstat,
    write_snmp,
)

ONE_HOST = {"nodes": 1, "gpus_per_node": 2, "steps": 30}
#: rank 0 computes 25 % more in the first half of the run, rank 1 in the second: who
#: gets the CPU changes, as on a host shared with other work
TAKING_TURNS = Planted(
    name="turns", jitter=0.08, slow_spans=((0, 1.25, 0, 15), (1, 1.25, 15, 30)), **ONE_HOST
)


def _counters(
    run: Path, root: Path, wait: float, throttled: float = 0.0, host: str = "node0"
) -> None:
    """``host``'s sampler over a host whose job threads wait ``wait`` of the time they
    could run and whose cgroup throttles them ``throttled`` of the time."""
    tree = switch_host(root)
    write_netdev(tree, {"eth0": {}})
    write_snmp(tree, {})
    write_netstat(tree, {})

    def script(tick: int) -> None:
        write_cpu_shares(tree, tick, wait, throttled)

    sample_host(run, host, tree, 5, script, job_pid=JOB_PID, use_nvml=False)


def _run(tmp_path: Path, scenario: Planted, wait: float | None = None, throttled: float = 0.0):
    run = generate(scenario, tmp_path / "run")
    if wait is not None:
        _counters(run, tmp_path / "host", wait, throttled)
    return run


def _modes(analysis) -> list[str]:
    return [f.mode for f in analysis.findings]


def test_a_one_host_job_waiting_for_cpu_is_named_cpu_starvation_not_a_straggler(tmp_path):
    """Two ranks on one host whose threads wait for a CPU 60 % of the time, the late
    rank changing between the run's halves: CPU starvation of node0 with both ranks,
    first; no straggler, no jitter charged beside it; the advice frees CPUs, pins
    threads and reduces them, and never excludes the node."""
    analysis = analyze(_run(tmp_path, TAKING_TURNS, wait=0.6))
    for f in analysis.findings:
        print(f.mode, f.cost, f.summary)
    assert _modes(analysis)[0] == "cpu_starvation"
    assert "straggler" not in _modes(analysis)
    assert "sync_amplification" not in _modes(analysis)
    (found,) = [f for f in analysis.findings if f.mode == "cpu_starvation"]
    assert found.nodes == ("node0",) and found.ranks == (0, 1)
    assert found.evidence["cpu_wait_share_by_host"] == {"node0": pytest.approx(0.6)}
    assert found.evidence["late_ranks_first_half"] == [0]
    assert found.evidence["late_ranks_second_half"] == [1]
    assert "host node0's ranks waited for a CPU 60% of the time they could run" in found.summary
    assert "rank 0 in the first half of the run, rank 1 in the second" in found.summary
    actions = " ".join(found.actions)
    assert "the CPUs they need" in actions and "OMP_NUM_THREADS" in actions
    assert "Pin each rank's threads" in actions
    assert "Exclude or replace" not in actions


def test_the_cpu_starvation_cost_is_near_the_rerun_with_the_cpu(tmp_path):
    """Its cost against the truth from outside the analysis: the same job (same seed)
    rerun with neither rank slowed, its jitter kept."""
    starved = analyze(_run(tmp_path / "a", TAKING_TURNS, wait=0.6))
    fed = analyze(_run(tmp_path / "b", TAKING_TURNS.replace(slow_spans=())))
    truth = 1 - fed.runs[0].iteration_ns / starved.runs[0].iteration_ns
    (found,) = [f for f in starved.findings if f.mode == "cpu_starvation"]
    print(f"cost {found.cost:.4f}, rerun {truth:.4f}")
    assert truth > 0.1
    assert found.cost == pytest.approx(truth, abs=0.02)


@pytest.mark.parametrize(
    ("wait", "throttled", "starved"),
    [
        # the development cases cpu_wait_share (0.25) and cpu_throttle_share (0.1)
        # were chosen on: a quiet host waits a few percent, a shared one a third or more
        (0.02, 0.0, False),
        (0.10, 0.0, False),
        (0.20, 0.0, False),
        (0.33, 0.0, True),
        (0.50, 0.0, True),
        (0.80, 0.0, True),
        (0.05, 0.05, False),
        (0.05, 0.30, True),
    ],
)
def test_starvation_on_one_host_by_its_own_counters(tmp_path, wait, throttled, starved):
    analysis = analyze(_run(tmp_path, TAKING_TURNS, wait=wait, throttled=throttled))
    print(wait, throttled, _modes(analysis))
    assert ("cpu_starvation" in _modes(analysis)) is starved
    th = Thresholds()
    assert starved is (wait >= th.cpu_wait_share or throttled >= th.cpu_throttle_share)
    # never a straggler named: the late rank changes between the halves
    assert all(not f.ranks for f in analysis.findings if f.mode == "straggler")


def test_a_persistent_straggler_without_cpu_waiting_is_named(tmp_path):
    """Rank 1 computes 15 % more in every step, the host's threads wait 2 % of the
    time: a straggler, last in both halves, and no CPU starvation."""
    scenario = Planted(name="slow", jitter=0.01, slow_ranks=((1, 1.15),), **ONE_HOST)
    analysis = analyze(_run(tmp_path, scenario, wait=0.02))
    assert "cpu_starvation" not in _modes(analysis)
    (found,) = [f for f in analysis.findings if f.mode == "straggler"]
    print(found.summary)
    assert found.ranks == (1,) and found.nodes == ("node0",)
    assert found.evidence["stable"] is True
    assert found.evidence["late_ranks_first_half"] == [1]
    assert found.evidence["late_ranks_second_half"] == [1]
    assert "late in both halves of the run" in found.summary
    assert any("Exclude or replace the node" in a for a in found.actions)


def test_a_late_rank_that_flips_between_halves_is_no_straggler(tmp_path):
    """Rank 1 is 30 % slower for the first 17 of 30 steps, rank 2 for the rest (two
    hosts, no host counters): no rank is named a straggler, the finding says the late
    rank changes and does not advise excluding a node; the jitter finding does not
    charge the same time again."""
    scenario = Planted(name="flip", jitter=0.01, slow_spans=((1, 1.3, 0, 17), (2, 1.3, 17, 30)))
    analysis = analyze(_run(tmp_path, scenario))
    for f in analysis.findings:
        print(f.mode, f.cost, f.ranks, f.summary)
    stragglers = [f for f in analysis.findings if f.mode == "straggler"]
    assert stragglers, "the late ranks' cost is reported"
    assert all(f.ranks == () and f.evidence.get("stable") is False for f in stragglers)
    (found,) = stragglers
    assert found.evidence["late_ranks_first_half"] == [1]
    assert found.evidence["late_ranks_second_half"] == [2]
    assert "the late rank changes: rank 1 in the first half of the run, rank 2 in the second" in (
        found.summary
    )
    assert "no persistent straggler" in found.summary
    assert not any("Exclude or replace" in a for a in found.actions)
    assert "sync_amplification" not in _modes(analysis)


def test_a_straggler_is_costed_without_the_jitter_the_jitter_row_removes(tmp_path):
    """Two ranks with 10 % compute jitter, rank 1 10 % slower all run. Truth from a
    rerun: the same job (same seed, same jitter) without the slow rank. The
    straggler's cost is its persistent extra time: near the rerun's saving, not that
    plus rank 1's jitter, which the jitter row removes (counted once, there)."""
    jittery = {"nodes": 1, "gpus_per_node": 2, "steps": 40, "jitter": 0.1}
    slow = analyze(_run(tmp_path / "a", Planted(name="s", slow_ranks=((1, 1.1),), **jittery)))
    rerun = analyze(_run(tmp_path / "b", Planted(name="s", **jittery)))
    truth = 1 - rerun.runs[0].iteration_ns / slow.runs[0].iteration_ns
    (found,) = [f for f in slow.findings if f.mode == "straggler"]
    table = slow.what_if[0]
    jitter = table.row("jitter")
    print(f"straggler {found.cost:.4f}, rerun {truth:.4f}, jitter row {jitter.saving:.4f}")
    assert found.ranks == (1,)
    assert found.cost == pytest.approx(truth, abs=0.015)
    # its counterfactual keeps rank 1's variation: the jitter row is where that is
    assert found.evidence["counterfactual"]["name"] == "straggler:1"
    assert found.evidence["counterfactual"]["description"] == "rank 1 computing like the others"
    assert jitter.saving > 0.03


def test_a_straggler_of_its_own_on_a_starved_host_stays_a_straggler(tmp_path):
    """Rank 1 computes 15 % more in every step on a host whose threads wait 60 % of
    the time while rank 0 is on time: something of rank 1's own, not the host's CPU.
    The straggler is named, with the host's waiting in its summary and evidence."""
    scenario = Planted(name="slow", jitter=0.01, slow_ranks=((1, 1.15),), **ONE_HOST)
    analysis = analyze(_run(tmp_path, scenario, wait=0.6))
    for f in analysis.findings:
        print(f.mode, f.cost, f.ranks, f.summary)
    assert analysis.findings[0].mode == "straggler"
    (found,) = [f for f in analysis.findings if f.mode == "straggler"]
    assert found.ranks == (1,)
    assert found.evidence["cpu_wait_share_by_host"] == {"node0": pytest.approx(0.6)}
    assert "host node0's ranks waited for a CPU 60% of the time they could run" in found.summary
    # rank 0 on time shares the host: its CPU is noted, not given as the cause
    assert "starved of CPU alike for ranks on time, which does not explain it" in found.summary
    assert not any("CPUs they need" in a for a in found.actions), found.actions
    assert all(1 not in f.ranks for f in analysis.findings if f.mode == "cpu_starvation")


#: Two hosts, one rank each; rank 1 computes 30 % more all run (a straggler of its own)
TWO_HOSTS = Planted(
    name="two-hosts", jitter=0.03, slow_ranks=((1, 1.3),), nodes=2, gpus_per_node=1, steps=30
)


def _two_hosts(tmp_path: Path, waits: tuple[float, float], throttled: tuple[float, float]):
    run = generate(TWO_HOSTS, tmp_path / "run")
    for n in (0, 1):
        _counters(run, tmp_path / f"host{n}", waits[n], throttled[n], host=f"node{n}")
    return analyze(run)


def test_hosts_starved_alike_leave_a_straggler_of_its_own_a_straggler(tmp_path):
    """Every host's threads wait for a CPU 80 % of the time (a machine shared with other
    work) and rank 1 is late all run: the CPU starves both hosts alike and cannot
    explain why rank 1 alone is late. A straggler, its host's CPU noted, its cost its
    extra compute only (not its transfers at the run's best)."""
    analysis = _two_hosts(tmp_path, (0.8, 0.8), (0.0, 0.0))
    assert "cpu_starvation" not in _modes(analysis)
    (straggler,) = [f for f in analysis.findings if f.mode == "straggler"]
    assert straggler.ranks == (1,)
    assert "communicates slowly" not in straggler.summary
    assert "starved of CPU alike for ranks on time, which does not explain it" in straggler.summary
    assert not any("CPUs they need" in a for a in straggler.actions), straggler.actions
    quiet = _two_hosts(tmp_path / "quiet", (0.02, 0.02), (0.0, 0.0))
    (alone,) = [f for f in quiet.findings if f.mode == "straggler"]
    assert straggler.cost == pytest.approx(alone.cost, abs=0.01)


def test_a_host_throttled_beyond_the_others_explains_its_late_rank(tmp_path):
    """Rank 1's host alone held throttled half the time by its CPU limit while both
    wait alike: its CPU explains the late rank, named CPU starvation of node1."""
    analysis = _two_hosts(tmp_path, (0.3, 0.3), (0.0, 0.5))
    assert _modes(analysis)[0] == "cpu_starvation", _modes(analysis)
    (found,) = [f for f in analysis.findings if f.mode == "cpu_starvation"]
    assert found.nodes == ("node1",) and found.ranks == (1,)
    assert "straggler" not in _modes(analysis)


#: Three hosts, one rank each; rank 1 computes 30 % more in the first half of the run,
#: rank 2 in the second: the late rank changes, as with a loaded machine's jitter
TAKING_TURNS_ACROSS = Planted(
    name="turns-across",
    jitter=0.02,
    slow_spans=((1, 1.3, 0, 15), (2, 1.3, 15, 30)),
    nodes=3,
    gpus_per_node=1,
    steps=30,
)


def _three_hosts(tmp_path: Path, waits: tuple[float, float, float]):
    run = generate(TAKING_TURNS_ACROSS, tmp_path / "run")
    for n, wait in enumerate(waits):
        _counters(run, tmp_path / f"host{n}", wait, host=f"node{n}")
    return analyze(run)


def test_late_ranks_taking_turns_on_hosts_waiting_alike_are_no_cpu_starvation(tmp_path):
    """Every host's threads wait for a CPU 75 % of the time (a loaded machine) and the
    late rank changes from rank 1 to rank 2: the waiting is every host's, so it cannot
    say why those ranks were late and not rank 0. No CPU starvation is named."""
    analysis = _three_hosts(tmp_path, (0.75, 0.75, 0.75))
    print([(f.mode, f.ranks, f.cost) for f in analysis.findings])
    assert "cpu_starvation" not in _modes(analysis)


def test_late_ranks_taking_turns_on_hosts_waiting_beyond_the_on_time_one_are_starved(tmp_path):
    """The same late ranks, their hosts waiting 75 % of the time where rank 0's waits
    5 %: their CPU explains them, CPU starvation of node1 and node2, first."""
    analysis = _three_hosts(tmp_path, (0.05, 0.75, 0.75))
    assert _modes(analysis)[0] == "cpu_starvation", _modes(analysis)
    (found,) = [f for f in analysis.findings if f.mode == "cpu_starvation"]
    assert found.nodes == ("node1", "node2") and found.ranks == (1, 2)
    assert found.evidence["late_ranks_first_half"] == [1]
    assert found.evidence["late_ranks_second_half"] == [2]


def test_ranks_late_in_each_half_alone_are_not_said_to_change(tmp_path, monkeypatch):
    """A rank judged late in each half alone but not over the whole run (a margin met
    by halves only) is no straggler, and the finding does not read "the late rank
    changes: rank 1 in the first half, rank 1 in the second"."""
    from syncpace.analysis.detectors import arrival

    scenario = Planted(name="flip", jitter=0.01, slow_spans=((1, 1.3, 0, 17), (2, 1.3, 17, 30)))
    whole = arrival.late_in
    monkeypatch.setattr(arrival, "late_by_half", lambda ctx: ([1], [1]))
    monkeypatch.setattr(arrival, "late_in", lambda ctx, half=None: whole(ctx, half) if half else [])
    analysis = analyze(_run(tmp_path, scenario))
    (found,) = [f for f in analysis.findings if f.mode == "straggler"]
    print(found.summary)
    assert found.ranks == ()
    assert "late rank changes" not in found.summary
    assert found.summary.startswith(
        "rank 1 late in each half of the run judged alone, not over all of it — no persistent"
    )


#: Three hosts, one rank each, none late: the collectives' transfers take 1-3 times
#: their time at random, as when one host's CPU limit throttles its threads a period at
#: a time, mid-transfer, and every rank leaves the collective late together
SLOWED_INSIDE = Planted(
    name="slowed-inside",
    jitter=0.02,
    nodes=3,
    gpus_per_node=1,
    steps=30,
    busbw_gbps=5.0,
    cross_inflation=(1.0, 3.0),
)


def _slowed_inside(tmp_path: Path, throttled: tuple[float, float, float]):
    run = generate(SLOWED_INSIDE, tmp_path / "run")
    for n, share in enumerate(throttled):
        _counters(run, tmp_path / f"host{n}", 0.4, share, host=f"node{n}")
    return analyze(run)


def test_a_throttled_host_whose_ranks_arrive_on_time_is_named_by_its_slowed_transfers(
    tmp_path,
):
    """Every host's threads wait for a CPU 40 % of the time (a loaded machine); node1's
    CPU limit alone holds its rank throttled 90 % of the time, and no rank arrives late:
    its rank is late inside the collectives. CPU starvation of node1 comes first, costed
    by the transfers rank 1 drives at what the links allow (the run's best), which is
    what "every link at the run's best rate" saves on a ring every rank drives."""
    analysis = _slowed_inside(tmp_path, (0.0, 0.9, 0.0))
    assert _modes(analysis)[0] == "cpu_starvation", _modes(analysis)
    (found,) = [f for f in analysis.findings if f.mode == "cpu_starvation"]
    assert found.nodes == ("node1",) and found.ranks == (1,)
    assert "slow inside them" in found.summary
    assert found.evidence["slowed_transfers_of"] == [1]
    assert found.evidence["late_ranks"] == []
    best = {o.name: o for o in analysis.what_if[0].rows}["links:best"]
    assert found.cost >= 0.05
    assert found.cost == pytest.approx(best.saving, abs=0.02)


def test_slowed_transfers_beside_hosts_throttled_alike_name_no_host(tmp_path):
    """The same run with every host throttled alike, or none: no host stands out, so the
    CPU cannot say why the transfers are slow, and no CPU starvation is named."""
    for n, throttled in enumerate(((0.9, 0.9, 0.9), (0.0, 0.0, 0.0))):
        analysis = _slowed_inside(tmp_path / str(n), throttled)
        assert "cpu_starvation" not in _modes(analysis), _modes(analysis)
