"""The mechanisms behind the diagnosis, each on a small trace built the way the job
would run: who computes how long, what the transfer takes, who sees it end when."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from syncpace.analysis import Severity, analyze
from syncpace.demo.pipeline import DemoConfig
from syncpace.trace.writer import RankTraceWriter

MS = 1_000_000


def job(
    root: Path,
    *,
    hosts: list[str],
    steps: int = 40,
    compute: Callable[[int, int], float] = lambda r, s: 40.0,
    transfer: Callable[[int], float] = lambda s: 4.0,
    lag: Callable[[int, int], float] = lambda r, s: 0.0,
    buckets: int = 1,
    nbytes: int = 2 << 20,
    after: float = 1.0,
) -> Path:
    """Each step every rank computes ``compute(rank, step)`` ms, then ``buckets``
    blocking all-reduces of ``nbytes``, each transferring ``transfer(step)`` ms after
    the last rank arrives and seen ending ``lag(rank, step)`` ms later by that rank;
    the step ends ``after`` ms after its last all-reduce returns."""
    ranks = list(range(len(hosts)))
    events: dict[int, list] = {r: [] for r in ranks}
    rsteps: dict[int, list] = {r: [] for r in ranks}
    now = dict.fromkeys(ranks, 0.0)
    seq = 0
    for s in range(steps):
        start = dict(now)
        at = {r: now[r] + compute(r, s) for r in ranks}
        for _ in range(buckets):
            done = max(at.values()) + transfer(s)
            for r in ranks:
                exit_ = done + lag(r, s)
                e = int(at[r] * MS)
                events[r].append((s, seq, e, int(exit_ * MS), e + 1000))
                at[r] = exit_
            seq += 1
        for r in ranks:
            now[r] = at[r] + after
            rsteps[r].append((s, int(start[r] * MS), int(now[r] * MS)))
    locals_ = {}
    for r, h in enumerate(hosts):
        locals_[r] = sum(1 for x in hosts[:r] if x == h)
    for r in ranks:
        meta = {
            "world_size": len(ranks),
            "host": hosts[r],
            "local_rank": locals_[r],
            "clock": {"offset_ns": 0, "uncertainty_ns": 0},
            "groups": {"0": {"ranks": ranks, "backend": "gloo"}},
            "source": "synthetic",
        }
        w = RankTraceWriter(root, r, meta, flush_interval_s=3600, offset_ns=lambda: 0)
        for step, sq, enter, exit_, wait in events[r]:
            row = (r, step, "0", len(ranks), sq, "all_reduce", nbytes, "float32", -1)
            w.add_event((*row, enter, exit_, "wait", "completed", None, wait))
        for step, start, end in rsteps[r]:
            w.add_step((r, step, start, end, 0))
        w.close()
    return root


def modes(path: Path, **kw) -> list[tuple[str, Severity, tuple[int, ...], tuple[str, ...]]]:
    return [(f.mode, f.severity, f.ranks, f.nodes) for f in analyze(path, **kw).findings]


def jitter(sigma: float, seed: int = 0) -> Callable[[int, int], float]:
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((64, 512))
    return lambda r, s: 40.0 * float(np.exp(sigma * table[r, s]))


FOUR_HOSTS = ["node0", "node1", "node2", "node3"]
TWO_BY_TWO = ["node0", "node0", "node1", "node1"]


def test_half_the_ranks_slow_is_found_against_the_fast_half(tmp_path: Path) -> None:
    # local rank 1 of two on both hosts computes 10 ms more: a median over the four
    # ranks sits between the two groups, the fast half's does not
    path = job(tmp_path, hosts=TWO_BY_TWO, compute=lambda r, s: 40.0 + 10 * (r % 2))
    (mode, severity, ranks, nodes), *_ = modes(path)
    assert (mode, ranks, nodes) == ("locality_variance", (1, 3), ("node0", "node1"))
    assert severity == Severity.CRITICAL  # 10 ms of 55: the iteration is 18 % longer


def test_a_whole_slow_node_is_a_straggler_node(tmp_path: Path) -> None:
    path = job(tmp_path, hosts=TWO_BY_TWO, compute=lambda r, s: 40.0 + 10 * (r >= 2))
    (mode, _, ranks, nodes), *_ = modes(path)
    assert (mode, ranks, nodes) == ("straggler", (2, 3), ("node1",))


def test_a_straggler_costs_what_its_removal_saves(tmp_path: Path) -> None:
    path = job(tmp_path, hosts=FOUR_HOSTS, compute=lambda r, s: 40.0 + 10 * (r == 2))
    top = analyze(path).top
    assert top.mode == "straggler" and top.ranks == (2,)
    # 55 ms iterations become 45 ms: 10/55 of the iteration
    assert top.cost == pytest.approx(10 / 55, rel=1e-3)
    assert top.cost_basis == "replay" and top.cost_error == pytest.approx(0.0, abs=1e-6)


def test_a_one_off_stall_is_not_amplification(tmp_path: Path) -> None:
    compute = lambda r, s: 40.0 + (3000.0 if (r, s) == (1, 20) else 0.0)  # noqa: E731
    path = job(tmp_path, hosts=FOUR_HOSTS, compute=compute)
    findings = analyze(path).findings
    assert findings[0].mode == "stall" and findings[0].ranks == (1,)
    assert findings[0].evidence["steps"] == [20]
    assert "sync_amplification" not in {f.mode for f in findings}
    assert not any("Enable" in a or "enable" in a for a in findings[0].actions)
    # one 3 s step in 39 of 45 ms: removing it saves 3000 / 39 ms per iteration on average
    assert findings[0].cost == pytest.approx(3000 / 39 / (45 + 3000 / 39), rel=0.02)


def test_recurring_heavy_tailed_jitter_is_amplification(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    extra = rng.pareto(2.0, (4, 64)) * 6.0

    path = job(tmp_path, hosts=FOUR_HOSTS, compute=lambda r, s: 40.0 + float(extra[r, s]))
    found = modes(path)
    assert found[0][0] == "sync_amplification", found
    assert "stall" not in {m for m, *_ in found}


def test_no_fabric_verdict_without_a_group_across_nodes(tmp_path: Path) -> None:
    # transfers slow down 3x after the first third: on one host that is the CPU or the
    # loopback, not a fabric
    slow = lambda s: 4.0 if s < 14 else 12.0  # noqa: E731
    one = job(tmp_path / "one", hosts=["vm"] * 4, transfer=slow)
    assert "fabric_contention" not in {m for m, *_ in modes(one)}
    four = job(tmp_path / "four", hosts=FOUR_HOSTS, transfer=slow)
    assert modes(four)[0][0] == "fabric_contention"


def test_a_slow_link_names_the_ranks_next_to_it(tmp_path: Path) -> None:
    # ranks 0 and 1 see every collective end 8 ms after the others (their ring step
    # crosses the slow link), and so arrive last at the next one: not stragglers
    lag = lambda r, s: 8.0 if r in (0, 1) else 0.0  # noqa: E731
    path = job(tmp_path, hosts=FOUR_HOSTS, lag=lag)
    found = modes(path)
    assert found[0][:1] + found[0][2:] == ("slow_link", (0, 1), ("node0", "node1"))
    assert "straggler" not in {m for m, *_ in found}


def test_two_slow_links_name_the_ranks_next_to_each(tmp_path: Path) -> None:
    # two slow links in the ring: each collective ends at the slower path, so rank 1
    # ends 16 ms late in every one, rank 3 12 ms late in 70 % of them (else on time)
    second = np.random.default_rng(3).random(40) < 0.7
    lag = lambda r, s: {1: 16.0, 3: 12.0 if second[s] else 0.0}.get(r, 0.0)  # noqa: E731
    found = modes(job(tmp_path / "two", hosts=FOUR_HOSTS, lag=lag))
    assert found[0][:1] + found[0][2:] == ("slow_link", (1, 3), ("node1", "node3"))
    # the same lateness of rank 3 alone, with no link late all run long: no slow link
    alone = lambda r, s: 12.0 if r == 3 and second[s] else 0.0  # noqa: E731
    found = modes(job(tmp_path / "alone", hosts=FOUR_HOSTS, lag=alone))
    assert "slow_link" not in {m for m, *_ in found}


def test_exposed_communication_under_contention_is_a_symptom(tmp_path: Path) -> None:
    # 4 blocking buckets after compute (poorly overlapped) whose transfers slow 4x in
    # the second half: contention is the cause, exposure its symptom
    path = job(
        tmp_path,
        hosts=FOUR_HOSTS,
        buckets=4,
        transfer=lambda s: 3.0 if s < 20 else 12.0,
        compute=lambda r, s: 30.0,
    )
    findings = analyze(path).findings
    order = [f.mode for f in findings]
    assert order[0] == "fabric_contention", order
    symptoms = [f for f in findings if f.mode in ("poor_overlap", "comm_dominated")]
    assert symptoms and all(f.symptom for f in symptoms)
    assert all(order.index(f.mode) > 0 for f in symptoms)


@pytest.mark.parametrize(
    "name",
    [
        "straggler",
        "sync_amplification",
        "fabric_contention",
        "poor_overlap",
        "bandwidth_bound",
        "locality_variance",
        "real_ddp_straggler",
        "demo/trace",
        "demo/trace-paced",
    ],
)
def test_costs_are_savings_that_never_exceed_the_iteration(name: str) -> None:
    data = Path(__file__).resolve().parents[1] / "data" / name
    analysis = analyze(data)
    table = analysis.what_if[0]
    assert table is not None
    for f in analysis.findings:
        assert 0.0 <= f.cost <= 1.0
        if f.cost_basis == "replay":
            row = table.row(f.evidence["counterfactual"]["name"])
            assert row is not None and row.saving == pytest.approx(f.cost, abs=1e-4)
            assert 0 <= row.saving_ns <= table.base.replayed_ns
    every = table.row("all")
    if every is not None:  # all causes removed at once save at least the largest one
        causes = [f.cost for f in analysis.findings if f.cost_basis == "replay" and not f.symptom]
        assert every.saving >= max(causes) - 1e-6


def test_the_demo_ranks_its_causes_by_what_their_removal_saves() -> None:
    """The demo's recorded run (a straggler planted at ``DemoConfig().slow_ms`` every
    step, greedy flows across the spine): every cause is costed by a replay, causes are
    listed by that saving with the symptoms after them, and the straggler's saving is
    the time the job spent on the plant."""
    demo = Path(__file__).resolve().parents[1] / "data" / "demo" / "trace"
    analysis = analyze(demo)
    config = DemoConfig()
    causes = [f for f in analysis.findings if f.severity >= Severity.WARNING and not f.symptom]
    symptoms = [f for f in analysis.findings if f.symptom]
    assert {f.mode for f in causes} == {"fabric_contention", "straggler"}
    assert all(f.cost_basis == "replay" for f in (*causes, *symptoms))
    assert [f.cost for f in causes] == sorted((f.cost for f in causes), reverse=True)
    last_cause = max(analysis.findings.index(f) for f in causes)
    assert all(analysis.findings.index(f) > last_cause for f in symptoms)
    (straggler,) = [f for f in causes if f.mode == "straggler"]
    assert straggler.ranks == (config.slow_rank,)
    row = analysis.what_if[0].row(straggler.evidence["counterfactual"]["name"])
    assert row.saving_ns / 1e6 == pytest.approx(config.slow_ms, rel=0.1)
