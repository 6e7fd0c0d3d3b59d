"""``diagnose`` finds the cause planted in a simulated cluster, from the trace alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncpace.analysis import Severity, Thresholds, analyze
from syncpace.sim.engine import simulate
from syncpace.sim.tracewrite import write_trace

from .conftest import config

PLANTED = {
    "slow_node": (
        {"noise": {"slow_nodes": (2,), "slow_factor": 1.15}},
        "straggler",
        (8, 9, 10, 11),
        ("node2",),
    ),
    "oversubscribed_uplinks": (
        # 3:1 uplinks, nodes scattered over a 16-node cluster, other jobs' bursts on them
        {
            "topology": {"oversub": 3.0, "cluster_nodes": 16, "placement": "scattered"},
            "network": {"background_load": 0.09, "background_duty": 0.15, "background_steps": 2},
        },
        "fabric_contention",
        (),
        ("node0", "node1", "node2", "node3"),
    ),
    "far_from_nic_gpu": (
        {"topology": {"far_gpus": (3,), "far_compute_penalty": 0.08}},
        "locality_variance",
        (3, 7, 11, 15),
        ("node0", "node1", "node2", "node3"),
    ),
}


#: Every simulated cluster's compute noise, amplified by synchronisation over its 16
#: ranks: the replay costs it at about 8 % of each iteration (no compute jitter), a
#: cause the verdict names; the planted cause is judged beside it.
NOISE = "sync_amplification"


def _jitter_row(analysis) -> tuple[float, float]:
    row = analysis.what_if[0].row("jitter")
    return row.saving, row.error


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_diagnose_finds_the_planted_cause(name: str, tmp_path: Path) -> None:
    sections, mode, ranks, nodes = PLANTED[name]
    trace = write_trace(simulate(config(**sections)), tmp_path / name)
    analysis = analyze(trace)
    top = next(f for f in analysis.findings if f.mode != NOISE)
    assert top.mode == mode, [top.mode, top.summary]
    # a warning or worse unless its replayed saving is below the reporting threshold
    floor = top.cost - (top.cost_error or 0.0)
    assert top.severity.name in ("WARNING", "CRITICAL") or floor < Thresholds().warning_cost
    assert top.ranks == ranks
    assert top.nodes == nodes


def test_a_clean_simulated_cluster_is_healthy_but_for_its_jitter(tmp_path: Path) -> None:
    analysis = analyze(write_trace(simulate(config()), tmp_path / "clean"))
    warned = [f for f in analysis.findings if f.severity >= Severity.WARNING]
    assert [f.mode for f in warned] == [NOISE], [f.summary for f in warned]
    saving, _ = _jitter_row(analysis)
    assert warned[0].cost == pytest.approx(saving)


def test_a_uniformly_saturated_uplink_is_not_contention_to_the_detector(tmp_path: Path) -> None:
    """Constant oversubscription slows every transfer alike: the trace shows it (lower
    busbw), but the detector compares each transfer with the run's own best, so it cannot
    tell a slow fabric from a busy one. Documented in docs/simulator.md."""
    sections = {"topology": {"oversub": 4.0, "cluster_nodes": 16, "placement": "scattered"}}
    base = simulate(config()).comm_s.mean()
    result = simulate(config(**sections))
    assert result.comm_s.mean() > 1.5 * base
    modes = {f.mode for f in analyze(write_trace(result, tmp_path / "sat")).findings}
    assert "fabric_contention" not in modes
