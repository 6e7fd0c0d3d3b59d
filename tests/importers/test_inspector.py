"""NCCL Inspector logs, written to the plugin's format (v4.0) from the real profiled run
(see inspector_logs.py), converted and compared with syncpace's own trace of the run."""

from __future__ import annotations

import json

import polars as pl
import pytest
from inspector_logs import comm_id, write_logs
from profiled import SLOW_MS

from syncpace.analysis import analyze
from syncpace.errors import TraceError
from syncpace.importers import ImportConfig, convert
from syncpace.trace import load_trace

pytestmark = pytest.mark.multirank

OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"]


def iteration_ms(trace) -> float:
    """About one iteration: the window the conversion should use (a user knows it from
    the training log)."""
    steps = trace.steps.with_columns(d=pl.col("end_ns") - pl.col("start_ns"))
    return float(steps["d"].median()) / 1e6


def stragglers(path) -> list[tuple[int, ...]]:
    return [f.ranks for f in analyze(path).findings if f.mode == "straggler"]


def test_every_collective_and_the_straggler(profiled, tmp_path):
    traced = profiled.syncpace
    logs = tmp_path / "logs"
    written = write_logs(traced, logs)
    assert sorted(p.name for p in logs.iterdir()) == sorted(
        f"{m['host']}-pid{m['pid']}.log" for m in traced.meta.values()
    )
    record = json.loads(
        (logs / next(iter(sorted(p.name for p in logs.iterdir())))).read_text().splitlines()[0]
    )
    assert record["metadata"]["inspector_output_format_version"] == "v4.0"
    out = tmp_path / "trace"
    config = ImportConfig(window_ms=iteration_ms(traced))
    result = convert("nccl-inspector", [logs], out, config=config)
    assert result.events == sum(written.values())
    trace = load_trace(out)
    names = {comm_id(g): g for g in traced.meta[0]["groups"]}
    got = (
        trace.events.with_columns(pl.col("group").replace_strict(names))
        .group_by("rank", "group", "op", "bytes")
        .len()
        .sort(pl.all())
    )
    want = (
        traced.events.filter(pl.col("op").is_in(OPS))
        .group_by("rank", "group", "op", "bytes")
        .len()
        .sort(pl.all())
    )
    assert got.to_dicts() == want.to_dicts()
    assert set(trace.events["timing"]) == {"inspector_kernel_gpu"} and trace.warnings == ()
    # the communicators' members, from the ranks each process holds in them
    assert {names[g]: s["ranks"] for g, s in trace.meta[0]["groups"].items()} == {
        g: s["ranks"] for g, s in traced.meta[0]["groups"].items()
    }
    missing = " ".join(trace.meta[0]["import"]["missing"])
    assert "when collectives started" in missing and "iterations" in missing
    assert stragglers(profiled.syncpace_dir)[0] == (profiled.slow_rank,)
    assert stragglers(out) == [(profiled.slow_rank,)]
    # the log has no call times: every wait shows at the first kernel of a queue, none
    # at its tail, so the cost is the others' longest wait: about the slow rank's extra
    # compute, of the iteration the job measured
    (found,) = [f for f in analyze(out).findings if f.mode == "straggler"]
    planted = SLOW_MS / iteration_ms(traced)
    assert abs(found.cost - planted) <= 0.25 * planted, (found.cost, planted)
    assert "no call times" in found.evidence["wait_basis"]


def test_verbose_records_on_two_hosts_have_their_clocks_aligned(profiled, tmp_path):
    """Verbose records carry host-clock timestamps: ranks 2 and 3 on a host whose clock
    runs 8 ms ahead come back aligned, within the estimate's uncertainty."""
    traced = profiled.syncpace
    logs = tmp_path / "logs"
    hosts = {0: "h0", 1: "h0", 2: "h1", 3: "h1"}
    write_logs(traced, logs, verbose=True, hosts=hosts, host_offset_us={2: 8000, 3: 8000})
    out = tmp_path / "trace"
    convert("nccl-inspector", [logs], out, config=ImportConfig(window_ms=iteration_ms(traced)))
    trace = load_trace(out)
    assert trace.meta[1]["clock"]["method"] == "same_host"
    for rank in (2, 3):
        clock = trace.meta[rank]["clock"]
        assert clock["method"] == "estimate"
        error = abs(clock["offset_ns"] + 8_000_000)
        assert error <= clock["uncertainty_ns"] < 1_000_000, clock
    assert trace.meta[0]["import"]["verbose_records"] > 0
    assert stragglers(out) == [(profiled.slow_rank,)]


def test_a_long_dump_interval_records_only_some_and_says_so(profiled, tmp_path):
    traced = profiled.syncpace
    logs = tmp_path / "logs"
    written = write_logs(traced, logs, interval_us=30_000, seed=3)
    full = traced.events.filter(pl.col("op").is_in(OPS)).height
    assert 0 < sum(written.values()) < full
    out = tmp_path / "trace"
    result = convert("nccl-inspector", [logs], out)
    assert result.events == sum(written.values())
    (warning,) = [w for w in result.warnings if "the logs hold" in w]
    assert "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS" in warning
    # instances some ranks did not dump are kept and flagged incomplete, never invented
    quality = analyze(out).runs[0].quality
    assert quality["incomplete_instances"] > 0


def test_logs_that_are_not_the_inspectors_are_refused(tmp_path):
    (tmp_path / "host-pid1.log").write_text('{"hello": 1}\n')
    with pytest.raises(TraceError, match="no NCCL Inspector collective records"):
        convert("nccl-inspector", [tmp_path], tmp_path / "out")
    (tmp_path / "host-pid2.log").write_text("not json at all\n")
    with pytest.raises(TraceError, match=r"host-pid2\.log: not valid JSON"):
        convert("nccl-inspector", [tmp_path / "host-pid2.log"], tmp_path / "out")
