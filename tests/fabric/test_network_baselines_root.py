"""Causes that never let up, on the real emulated fabric, as root.

Each test runs the same traced job (one 1 MiB all-reduce a step, one rank per host)
on healthy links and with the cause in force from before its first step to after its
last, and compares what the diagnosis of the second says removing the cause saves with
what the first measured. Fabrics get unique names and are removed in ``finally``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import polars as pl
import pytest

from syncpace.analysis import analyze
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.fabric import build_spec, bulk
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.faults import parse_fault
from syncpace.fabric.lifecycle import down, up
from syncpace.fabric.runner import RunOptions, run_job
from syncpace.trace import load_trace

pytestmark = pytest.mark.root

HERE = Path(__file__).resolve().parent
STEPS = 10
#: predicted saving over the saving measured against the healthy job
RATIO = (0.75, 1.3)


def traced(state, out: Path, faults: list[str]) -> Path:
    """The steps job traced across the fabric; its run directory."""
    out.mkdir(parents=True)
    env = traced_env(out, TraceConfig(dir=str(out)))
    command = [sys.executable, str(HERE / "steps_job.py"), str(out), str(STEPS), "1"]
    options = RunOptions(timeout_s=180, grace_s=5, faults=[parse_fault(f) for f in faults])
    result = run_job(state, command, out, SystemBackend(), options, env, echo=None)
    assert result.returncode == 0, result
    return out


def transfer_ms(run: Path) -> float:
    """The all-reduces' median transfer, read from the trace: from the last rank's
    arrival to the last rank's completion (the first step warms up)."""
    events = load_trace(run).events.filter((pl.col("op") == "all_reduce") & (pl.col("step") >= 1))
    per_call = events.group_by("seq").agg(pl.col("exit_ns").max() - pl.col("enter_ns").max())
    return per_call["exit_ns"].median() / 1e6


def measured_saving(healthy: Path, slow: Path) -> float:
    fast = analyze(healthy).runs[0].iteration_ns
    return 1 - fast / analyze(slow).runs[0].iteration_ns


def test_a_host_link_slow_all_run_is_a_slow_link_costed_against_healthy_links(state_dir, tmp_path):
    """A 4-host star at 50 Mbit/s; h0's link at 10 Mbit/s from the job's start."""
    backend = SystemBackend()
    spec = build_spec(
        dict(topology="star", hosts=4, host_rate="50mbit", name=f"nb{os.getpid() % 9999}")
    )
    state = up(spec, backend, state_dir)
    try:
        healthy = traced(state, tmp_path / "healthy", [])
        slow = traced(state, tmp_path / "slow", ["rate h0-sw 10mbit at=0"])
    finally:
        down(state, backend)
    analysis = analyze(slow)
    top = next(f for f in analysis.findings if not f.symptom)
    measured = measured_saving(healthy, slow)
    print(
        f"slow host link: {top.mode} {top.ranks} costs {top.cost:.1%}, "
        f"measured {measured:.1%} against the healthy job"
    )
    assert top.mode == "slow_link", [f.summary for f in analysis.findings]
    # the link counters say which link is slow: h0's, and its rank is named; the ranks
    # either side of it in the ring (3 -> 0 -> 1) see transfers end last
    assert top.ranks == (0,) and top.nodes == ("h0",), top.summary
    assert set(top.evidence["lagging_ranks"]) <= {3, 0, 1}
    assert top.evidence["baseline"]["source"] == "the hosts' link rate"
    assert RATIO[0] <= top.cost / measured <= RATIO[1]


def test_a_fixed_rate_sender_over_the_spine_is_contention_named_by_its_source(state_dir, tmp_path):
    """A 2 x 2 leaf-spine, 50 Mbit/s host links and 1:2 oversubscribed uplinks; h0
    sends 30 Mbit/s of UDP to h2 across the spine for the whole job, beside the ring's
    own crossing of it."""
    backend = SystemBackend()
    spec = build_spec(
        dict(
            leaves=2,
            hosts=2,
            host_rate="50mbit",
            oversubscription=2.0,
            name=f"nc{os.getpid() % 9999}",
        )
    )
    state = up(spec, backend, state_dir)
    flows = []
    try:
        healthy = traced(state, tmp_path / "healthy", [])
        flows = bulk.start_flows(state.fabric, [("h0", "h2")], 120.0, 5401, rate_bps=30_000_000)
        busy = traced(state, tmp_path / "busy", [])
    finally:
        for flow in flows:
            flow.stop()
        down(state, backend)
    analysis = analyze(busy)
    (found,) = [f for f in analysis.findings if f.mode == "fabric_contention"]
    measured = measured_saving(healthy, busy)
    ev = found.evidence
    print(
        f"fixed-rate sender: first {analysis.top.mode}; contention from {found.source[:3]} "
        f"costs {found.cost:.1%}, measured {measured:.1%}; {ev.get('slower_beside_foreign')}x "
        f"slower against {ev.get('baseline')}, foreign {ev.get('foreign_share_by_carrier')}"
    )
    # the trace itself shows the sender: the ring's transfers share the uplink with it
    # (30 of its 50 Mbit/s taken: ~2.5x slower)
    slower = transfer_ms(busy) / transfer_ms(healthy)
    assert slower >= 1.5, slower
    assert analysis.top is found
    assert found.source[0] == "h0"
    assert ev["foreign_senders"][0] == "h0"
    assert ev["foreign_time_share"] >= 0.9
    assert RATIO[0] <= found.cost / measured <= RATIO[1]
