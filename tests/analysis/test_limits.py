"""Figures the physics forbids are flagged as unmeasurable, with the reason, and kept
out of every bandwidth: the demo's runs on 100 Mbit/s host links, and host counters
that read a NIC above its own rate."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from syncpace.analysis import analyze
from syncpace.analysis.hostcounters import host_metrics
from syncpace.trace.busbw import FACTORS

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo" / "trace"


def _host_link_gbps(run: Path) -> float:
    """The fastest host link of the fabric, from its own description (fabric.json)."""
    links = json.loads((run / "fabric.json").read_text())["links"]
    return max(link["rate_bps"] for link in links if link["kind"] == "host") / 8e9


def test_no_busbw_above_the_link_rate_and_each_left_out_says_why():
    rate = _host_link_gbps(DEMO)
    run = analyze(DEMO).runs[0]
    inst = run.instances
    # the raw figure, recomputed from bytes and service time with nccl-tests' factors
    a = pl.col("op").replace_strict({op: f[0] for op, f in FACTORS.items()}, default=None)
    b = pl.col("op").replace_strict({op: f[1] for op, f in FACTORS.items()}, default=None)
    raw = inst.filter(pl.col("service_ns") > 0, ~pl.col("exit_bounded")).select(
        busbw=pl.col("bytes") / pl.col("service_ns") * (a * (pl.col("n") - 1) / pl.col("n") + b),
        reason=pl.col("unmeasurable"),
    )
    too_fast = raw.filter(pl.col("busbw") > rate)
    assert too_fast.height > 0  # the trace holds impossible figures to flag
    assert too_fast["reason"].null_count() == 0
    kept = inst["busbw_gbps"].drop_nulls()
    assert kept.len() > 0 and kept.max() <= rate
    assert inst.filter(pl.col("unmeasurable").is_not_null())["busbw_gbps"].null_count() == (
        inst["unmeasurable"].is_not_null().sum()
    )
    notes = {u.reason: u for u in run.unmeasurable if u.what == "busbw"}
    assert sum(u.count for u in notes.values()) == inst["unmeasurable"].is_not_null().sum()
    assert any("faster than the 100 Mbit/s host link rate allows" in reason for reason in notes)
    summary = run.summary()
    assert summary["link_rate"]["gbps"] == rate
    assert {u["what"] for u in summary["unmeasurable"]} == {"busbw"}
    assert all(u["reason"] and u["of"] >= u["count"] > 0 for u in summary["unmeasurable"])


def _counters(tx_bytes: list[int], rate_bps: int) -> pl.DataFrame:
    """One host's NIC sampled every 100 ms: cumulative tx bytes and its link rate."""
    times = [1_000_000_000 + i * 100_000_000 for i in range(len(tx_bytes))]
    rows = [("tx_bytes", t, v) for t, v in zip(times, tx_bytes, strict=True)]
    rows += [("link_rate_bps", t, rate_bps) for t in times]
    return pl.DataFrame(
        {
            "time_ns": [t for _, t, _ in rows],
            "host": ["h0"] * len(rows),
            "source": ["nic"] * len(rows),
            "device": ["eth0"] * len(rows),
            "port": [-1] * len(rows),
            "counter": [c for c, _, _ in rows],
            "value": [v for _, _, v in rows],
        }
    )


def test_a_nic_above_its_rate_is_unmeasurable_not_a_peak():
    # 100 Mbit/s is 1.25 MB per 100 ms window: half, full, then 1.3 MB (104 %)
    counters = _counters([0, 625_000, 1_875_000, 3_175_000], 100_000_000)
    nic = host_metrics(counters, {}, {}, window_ns=100_000_000).nic
    row = nic.filter(pl.col("direction") == "tx").row(0, named=True)
    assert row["util_peak"] is not None and row["util_peak"] <= 1.0
    assert row["util_unmeasurable_windows"] == 1
    assert row["util_peak_sample"] is None or row["util_peak_sample"] <= 1.0


def test_the_bound_is_at_the_level_of_hosts():
    """8 ranks on 2 hosts with 100 Gbit/s (12.5 GB/s) each: an all-reduce at 20 GB/s
    algbw has a flat busbw of 35 GB/s, yet moves only 20 GB/s through each host's link
    (factor 2(2-1)/2 = 1): too fast. At 10 GB/s it is possible, though its flat busbw
    (17.5 GB/s) is above the NIC; inside one host nothing is held to the NIC."""
    from syncpace.analysis.limits import LinkRate, flag_instances

    inst = pl.DataFrame(
        {
            "group": ["0", "0", "intra"],
            "op": ["all_reduce"] * 3,
            "n": [8, 8, 4],
            "service_ns": [1_000_000] * 3,
            "algbw_gbps": [20.0, 10.0, 100.0],
            "busbw_gbps": [35.0, 17.5, 150.0],
        }
    )
    out, notes = flag_instances(
        inst,
        uncertainty_ns=2_000_000,
        link=LinkRate(12.5, "test"),
        group_nodes={"0": 2, "intra": 1},
    )
    # every service time (1 ms) is below the clocks' 2 ms: the clock rule comes first
    assert out["unmeasurable"].to_list() == ["service time shorter than the clock uncertainty"] * 3
    out, notes = flag_instances(
        inst, uncertainty_ns=1_000, link=LinkRate(12.5, "test"), group_nodes={"0": 2, "intra": 1}
    )
    assert out["unmeasurable"].to_list() == ["busbw above the link rate", None, None]
    assert out["busbw_gbps"].to_list() == [None, 17.5, 150.0]
    assert [(u.count, u.total) for u in notes] == [(1, 3)]
