"""``tier = "auto"``: the rule's choice on built scenarios, the line a run prints, and one
real point of the cross-check (the fast tiers against ns-3 where nothing competes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from syncpace.cli.main import main
from syncpace.config import load_toml
from syncpace.sim import engine
from syncpace.sim.engine import SimConfig
from syncpace.sim.scenario import from_dict
from syncpace.sim.tierpick import (
    FLOW_ENTITIES_PER_S,
    PACKET_SEGMENTS_PER_CPU_S,
    choose,
    estimate_flow_s,
    estimate_packet_cpu_s,
    other_jobs_flows,
    resolve,
)

from .test_packet import needs_ns3

#: the cross-check's job (benchmarks/tier_check.py)
JOB = Path(__file__).resolve().parents[2] / "examples/scenarios/tier_check.toml"


def job(nodes: int = 4, **sections: dict[str, Any]) -> SimConfig:
    """One GPU per 10 Gbit/s node on a 4-spine leaf-spine, 8 nodes a leaf, a 4 MB ring
    all-reduce per iteration: the cross-check's job, contiguous unless told."""
    base = load_toml(JOB)
    base["topology"]["nodes"] = nodes
    for name, values in sections.items():
        base.setdefault(name, {}).update(values)
    return from_dict(base, source=str(JOB)).config


def test_nothing_shared_is_analytical() -> None:
    for cfg in (job(4), job(64, topology={"kind": "switch"})):
        choice = choose(cfg)
        assert choice.tier == "analytical"
        assert "nothing shares the job's links" in choice.reason


def test_an_oversubscribed_spine_crossed_by_the_job_is_flow() -> None:
    choice = choose(job(16, topology={"oversub": 4.0}))
    assert choice.tier == "flow"
    assert choice.reason.startswith("the job crosses 4:1 oversubscribed uplinks")
    # inside one leaf the oversubscription is never crossed
    assert choose(job(8, topology={"oversub": 4.0})).tier == "analytical"
    loaded = choose(job(16, network={"background_load": 0.2}))
    assert (loaded.tier, loaded.reason[:27]) == ("flow", "other jobs load the uplinks")


def test_a_greedy_flow_among_few_slow_hosts_is_packet_within_the_budget() -> None:
    slow = {"nic_gbps": 0.0125}  # 100 Mbit/s, the emulated fabric's kind of link
    cfg = job(4, topology=slow, network={"background_flows": ["1->0"]})
    choice = choose(cfg)
    assert choice.tier == "packet"
    assert f"about {estimate_packet_cpu_s(cfg):.0f} CPU s of the 60 s budget" in choice.reason
    # the same flow among many hosts costs more than the budget: the flow tier
    big = job(512, topology=slow, network={"background_flows": ["1->0"]})
    assert estimate_packet_cpu_s(big) > 60
    choice = choose(big)
    assert choice.tier == "flow"
    assert "over the 60 s budget" in choice.reason
    # at 10 Gbit/s the greedy flow's own seconds before the offsets are over the budget
    assert choose(job(4, network={"background_flows": ["1->0"]})).tier == "flow"
    # a larger budget lets it through; a fat-tree never (the packet tier lacks it)
    generous = {"background_flows": ["1->0"], "auto_budget_s": 1e6}
    assert choose(job(512, topology=slow, network=generous)).tier == "packet"
    fat = job(4, topology={"kind": "fat-tree", **slow}, network={"background_flows": ["1->0"]})
    assert choose(fat).tier == "flow"


def test_a_flow_tier_over_the_budget_falls_back_to_analytical() -> None:
    loaded, long = {"background_load": 0.2}, {"steps": 100_000, "warmup": 10}
    cost = estimate_flow_s(job(64, topology={"oversub": 4.0}, network=loaded, run=long))
    assert cost > 2
    over = job(
        64, topology={"oversub": 4.0}, network={**loaded, "auto_budget_s": cost / 2}, run=long
    )
    choice = choose(over)
    assert choice.tier == "analytical"
    assert f"the flow tier would need about {cost:.0f} s, over {cost / 2:g} s" in choice.reason
    under = job(
        64, topology={"oversub": 4.0}, network={**loaded, "auto_budget_s": cost * 2}, run=long
    )
    assert choose(under).tier == "flow"


def test_the_flow_estimate_counts_coflows_and_other_jobs_flows() -> None:
    ring = job(16, topology={"oversub": 4.0})
    assert other_jobs_flows(ring) == 0
    # a ring all-reduce is one coflow per collective: 20 of them
    assert estimate_flow_s(ring) == pytest.approx(20 / FLOW_ENTITIES_PER_S)
    loaded = job(16, topology={"oversub": 4.0}, network={"background_load": 0.2})
    assert other_jobs_flows(loaded) > 0
    assert estimate_flow_s(loaded) == pytest.approx(
        (20 + other_jobs_flows(loaded)) / FLOW_ENTITIES_PER_S
    )


def test_the_packet_estimate_counts_intra_node_phases_once() -> None:
    # 2 nodes x 4 GPUs, hierarchical 1 MiB: intra RS and AG on one node (4 flows of
    # 3/4 MiB each), the rails' rings (8 flows of 2 x 1/2 x 1/4 MiB)
    cfg = job(
        2,
        topology={"gpus_per_node": 4, "nics_per_node": 4},
        network={"algorithm": "hierarchical"},
        workload={"model_mb": 1.0, "bucket_mb": 1.0},
    )
    mib = float(1 << 20)
    bytes_moved = 2 * 4 * 0.75 * mib + 8 * 0.25 * mib
    segments = bytes_moved / (1500 - 52)
    assert estimate_packet_cpu_s(cfg) == pytest.approx(segments / PACKET_SEGMENTS_PER_CPU_S)


def test_the_packet_estimate_counts_every_bucket_of_a_step_and_its_warm_ups() -> None:
    one = job(2, workload={"model_mb": 1.0, "bucket_mb": 1.0})
    two = job(2, workload={"model_mb": 2.0, "bucket_mb": 1.0})
    # the step's two equal buckets run one after the other in one ns-3 run, not once
    assert estimate_packet_cpu_s(two) == pytest.approx(2 * estimate_packet_cpu_s(one))
    warm = job(2, workload={"model_mb": 2.0, "bucket_mb": 1.0}, network={"packet_warm": 2})
    assert estimate_packet_cpu_s(warm) == pytest.approx(3 * estimate_packet_cpu_s(two))


def test_an_asked_for_tier_is_kept() -> None:
    for tier in ("analytical", "flow", "packet"):
        cfg = job(4, network={"tier": tier, "background_flows": ["1->0"]})
        settled, choice = resolve(cfg)
        assert settled is cfg and choice is None


def test_the_run_records_and_prints_what_auto_picked(capsys) -> None:
    cfg = job(16, topology={"oversub": 4.0}, run={"steps": 3, "warmup": 1})
    result = engine.simulate(cfg)
    assert result.config.network.tier == "flow"
    assert result.tier_choice is not None and result.tier_choice.tier == "flow"
    code = main(
        ["simulate", "--nodes", "2", "--steps", "8", "--tier", "auto", "--topology", "switch"]
    )
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "tier analytical: nothing shares the job's links: the fast tiers agree with ns-3 there"
    )
    assert lines[1].startswith("simulated ")
    code = main(
        ["simulate", "--nodes", "2", "--steps", "8", "--tier", "auto", "--topology", "switch"]
        + ["--json"]
    )
    out = capsys.readouterr()
    assert json.loads(out.out)["config"]["network"]["tier"] == "analytical"
    assert out.err.strip().splitlines()[-1].startswith("tier analytical: ")


@needs_ns3
@pytest.mark.slow
def test_where_nothing_competes_the_fast_tiers_agree_with_ns3() -> None:
    # the table's uncontended points (oversubscription 1, no greedy flow) are within 4 %
    # of ns-3 in communication at 16 and 32 nodes; its smallest, 16 nodes over 32
    comm = {}
    spread = {"placement": "scattered", "cluster_nodes": 32}
    for tier in ("analytical", "flow", "packet"):
        cfg = job(16, topology=spread, network={"tier": tier})
        comm[tier] = engine.simulate(cfg).summary()["comm_ms"]
    for tier in ("analytical", "flow"):
        assert comm[tier] == pytest.approx(comm["packet"], rel=0.05), comm
    assert comm["packet"] > 0
