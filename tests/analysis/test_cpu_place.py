"""CPU starvation names a host only where that host stands out in each half of the run.

A loaded machine, built: three hosts of one rank each whose job threads all wait for a
CPU alike, each rank measured on its own. The late rank's own main thread waits for
its lateness, on node1 in the first half of the run and on node2 in the second: the
starved place moves, so no host is the cause (a rerun would name another) and the
finding is the machine's. With the same late rank waiting in both halves the host
stands out and is named.

Traces are written with the real writer (``tests/planted.py``), each host's counters by
the real sampler over a fake host tree (``tests/sysfs_trees.py``) on the trace's clock,
covering the whole run so each half has its own. The truth is the plant: which rank
computes more, in which half, and whose main thread waited then."""

from __future__ import annotations

from pathlib import Path

import pytest

from planted import Planted, generate
from syncpace.analysis import costs
from syncpace.analysis.api import analyze
from syncpace.analysis.thresholds import Thresholds
from syncpace.trace import schema
from sysfs_trees import (
    JOB_PID,
    sample_host,
    switch_host,
    write_cpu_shares,
    write_netdev,
    write_netstat,
    write_snmp,
)

SHAPE = {"nodes": 3, "gpus_per_node": 1, "steps": 30, "jitter": 0.02}
#: rank 1 (node1) computes 30 % more in the first half, rank 2 (node2) in the second
MOVING = Planted(name="moving", slow_spans=((1, 1.3, 0, 15), (2, 1.3, 15, 30)), **SHAPE)
#: rank 1 (node1) computes 30 % more all run long
STAYING = Planted(name="staying", slow_ranks=((1, 1.3),), **SHAPE)
TICK_NS = 100_000_000
PID0 = 7000
HOST_WAIT = 0.75  # every host's job threads wait alike: a loaded machine
BUSY_WAIT = 0.35  # a late rank's main thread, ns waited per ns, while it is late
CALM_WAIT = 0.02


def _end_and_middle(run: Path) -> tuple[int, int]:
    """The run's last step end and the start of its second half of steps (ns)."""
    rs = analyze(run).runs[0].rank_steps
    steps = sorted(set(rs["step"].to_list()))
    second = steps[len(steps) // 2 :]
    middle = int(rs.filter(rs["step"].is_in(second))["start_ns"].min())
    return int(rs["end_ns"].max()), middle


def _hosts(
    run: Path,
    root: Path,
    waiting: dict[int, tuple[bool, bool]],
    throttled: dict[int, float] | None = None,
    busy_wait: float = BUSY_WAIT,
) -> None:
    """Each host's sampler, covering the run: its job threads waiting ``HOST_WAIT``,
    rank r's main thread waiting ``busy_wait`` in the halves ``waiting[r]`` says
    (first, second) and ``CALM_WAIT`` otherwise; host r's CPU limit throttling it
    ``throttled[r]`` of the time."""
    end, middle = _end_and_middle(run)
    ticks = (end - 1_000_000_000) // TICK_NS + 3  # the sampler's clock starts at 1 s
    for rank in range(3):
        host = f"node{rank}"
        tree = switch_host(root / host)
        write_netdev(tree, {"eth0": {}})
        write_snmp(tree, {})
        write_netstat(tree, {})
        (run / schema.rank_pid_name(host, rank)).write_text(str(PID0 + rank))
        busy_in = waiting.get(rank, (False, False))
        share = (throttled or {}).get(rank, 0.0)
        script = _script(tree, rank, busy_in, middle, share, busy_wait)
        sample_host(run, host, tree, ticks, script, job_pid=JOB_PID, use_nvml=False)


def _script(
    tree,
    rank: int,
    busy_in: tuple[bool, bool],
    middle: int,
    throttled: float = 0.0,
    busy_wait: float = BUSY_WAIT,
):
    """The host tree's counters at each tick: the host's job threads waiting
    ``HOST_WAIT``, its CPU limit throttling them ``throttled`` of the time, rank
    ``rank``'s main thread ``busy_wait`` in the halves ``busy_in`` says (the second from
    ``middle`` on, ns on the trace's clock), else ``CALM_WAIT``."""
    waited = [0]

    def script(tick: int) -> None:
        ns = TICK_NS * tick
        busy = busy_in[0] if 1_000_000_000 + ns <= middle else busy_in[1]
        if tick:
            waited[0] += int((busy_wait if busy else CALM_WAIT) * TICK_NS)
        write_cpu_shares(tree, tick, HOST_WAIT, throttled)
        pid = PID0 + rank
        task = tree.root / f"proc/{pid}/task/{pid}"
        task.mkdir(parents=True, exist_ok=True)
        (task / "schedstat").write_text(f"{int(0.2 * ns)} {waited[0]} 10\n")

    return script


def _analyze(tmp_path: Path, scenario: Planted, waiting: dict[int, tuple[bool, bool]]):
    run = generate(scenario, tmp_path / "run")
    _hosts(run, tmp_path / "hosts", waiting)
    return analyze(run)


def test_a_starved_place_that_moves_from_host_to_host_is_the_machines(tmp_path):
    """The late rank is rank 1 in the first half and rank 2 in the second, each waiting
    for a CPU while late, every host waiting alike: CPU starvation names no host and no
    rank (node1 in one half, node2 in the other), says so, advises on the machine, and
    names no straggler in their place; its severity is the shared rule on its saving."""
    analysis = _analyze(tmp_path, MOVING, {1: (True, False), 2: (False, True)})
    for f in analysis.findings:
        print(f.mode, f.severity.name, round(f.cost, 4), f.nodes, f.ranks, f.summary)
    (found,) = [f for f in analysis.findings if f.mode == "cpu_starvation"]
    assert found.ranks == ()
    assert found.nodes == ("node0", "node1", "node2")
    assert found.evidence["placed"] is False
    assert found.evidence["late_ranks"] == [1, 2]
    assert found.evidence["late_ranks_first_half"] == [1]
    assert found.evidence["late_ranks_second_half"] == [2]
    assert found.summary.startswith("CPU starvation of the machine, not of one host")
    assert "rank 1 (node1) in the first half of the run, rank 2 (node2) in the second" in (
        found.summary
    )
    assert found.severity == costs.severity(found.cost, found.cost_error, Thresholds())
    actions = " ".join(found.actions)
    assert "fewer ranks per core" in actions and "excluding a node does not help" in actions
    assert not [f for f in analysis.findings if f.mode == "straggler" and f.ranks]


def test_a_host_whose_late_rank_waits_in_both_halves_is_named(tmp_path):
    """Rank 1 late all run long, its main thread waiting for it in both halves, every
    host waiting alike: node1 stands out in each half, CPU starvation of node1 and
    rank 1."""
    analysis = _analyze(tmp_path, STAYING, {1: (True, True)})
    (found,) = [f for f in analysis.findings if f.mode == "cpu_starvation"]
    assert found.nodes == ("node1",) and found.ranks == (1,)
    assert found.evidence["late_ranks"] == [1]
    assert found.evidence["cpu_extra_wait_ms_by_rank"]["node1"][1] > 0


@pytest.mark.parametrize("half", [0, 1])
def test_the_halves_are_read_from_the_counters_of_each(tmp_path, half):
    """The CPU of a half is that half's counters: rank 1's main thread waits in one
    half only and its host's summary over that half says so, over the other not (the
    sampler's 100 ms ticks blur the edge between the halves: a tick's increase is read
    evenly across it)."""
    from syncpace.analysis.detectors import cpu
    from syncpace.analysis.detectors.context import Context

    run = generate(STAYING, tmp_path / "run")
    _hosts(run, tmp_path / "hosts", {1: (half == 0, half == 1)})
    metrics = analyze(run).runs[0]
    ctx = Context(metrics, Thresholds())
    busy, calm = cpu.rank_waits(ctx, half)[1], cpu.rank_waits(ctx, 1 - half)[1]
    assert 0.7 * BUSY_WAIT <= busy <= BUSY_WAIT
    assert CALM_WAIT <= calm <= 0.3 * BUSY_WAIT
    assert cpu.host_cpu(ctx, half)["node1"]["job_wait_share"] == pytest.approx(HOST_WAIT)


@pytest.mark.parametrize("throttled", [0.5, 0.0])
def test_a_throttled_hosts_late_rank_is_its_cpu_whatever_its_sampled_waiting(tmp_path, throttled):
    """Rank 1 is late all run, its main thread waiting a little more than the others'
    (0.1 of the time: under ``cpu_explains_share`` of its extra compute), every host
    waiting alike. With node1's CPU limit throttling it half the time and the other
    hosts not, the kernel says node1's ranks were held off the CPU: CPU starvation of
    node1 and rank 1, first, and no straggler. Without the throttling its sampled
    waiting does not explain it: a straggler, and no CPU starvation names node1."""
    run = generate(STAYING, tmp_path / "run")
    _hosts(run, tmp_path / "hosts", {1: (True, True)}, {1: throttled}, busy_wait=0.1)
    analysis = analyze(run)
    for f in analysis.findings:
        print(f.mode, f.severity.name, round(f.cost, 4), f.nodes, f.ranks, f.summary)
    starved = [f for f in analysis.findings if f.mode == "cpu_starvation" and f.ranks]
    stragglers = [f for f in analysis.findings if f.mode == "straggler" and 1 in f.ranks]
    if throttled:
        (found,) = starved
        assert found.nodes == ("node1",) and found.ranks == (1,)
        assert "CPU limit (0.5 CPU) held its ranks throttled 50%" in found.summary
        assert analysis.findings[0] is found
        assert not stragglers
    else:
        assert not starved
        assert analysis.findings[0] is stragglers[0]
