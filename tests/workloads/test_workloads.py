"""Real jobs of every parallelism, traced with no code change, against a truth of their own.

Each job in ``jobs/`` is plain PyTorch as its user would write it. It runs once
traced and once untraced (the untraced runs of one world size share a launch). For
every job: the loss is bit-identical to the untraced run's; on every rank, the
collectives in the trace are exactly PyTorch's own Flight Recorder entries of the
same run (group, sequence number, op, bytes); point-to-point traffic (which the
Flight Recorder does not record on gloo) and per-iteration counts match what the
job's code implies; diagnosis raises no false incomplete-trace or size warning and
names the parallelism the job uses.

Set ``WORKLOAD_REPORT=path.json`` to keep a summary row per job (the table of the
workload suite).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import harness as h
import polars as pl
import pytest

from syncpace.analysis import analyze
from syncpace.analysis.detectors import advice
from syncpace.trace import load_trace

# counts, bytes and losses against the jobs' own truth: they hold at any CPU load
pytestmark = [pytest.mark.multirank, pytest.mark.untimed]

J = h.Job
JOBS = {
    j.name: j
    for j in (
        J("ddp_buckets", "ddp.py", ("buckets",), torchrun=True),
        J("ddp_one_bucket_two_threads", "ddp.py", ("one_bucket",)),
        J("ddp_no_sync_profiled", "ddp.py", ("no_sync",)),
        J("fsdp2_checkpoint", "fsdp2.py", ("{scratch}/checkpoint",)),
        J("tensor_parallel", "tensor_parallel.py"),
        J("mesh_2d", "mesh_2d.py", world=4),
        J("pipeline_gpipe", "pipeline.py", ("gpipe",)),
        J("pipeline_1f1b", "pipeline.py", ("1f1b",)),
        J("moe_all_to_all", "moe.py"),
        J("compile_ddp", "compiled.py", ("compile_ddp",)),
        J("ddp_compile", "compiled.py", ("ddp_compile",)),
    )
}
REPORT: dict[str, dict] = {}


@pytest.fixture(scope="module")
def untraced(tmp_path_factory):
    losses = {}
    for world in sorted({j.world for j in JOBS.values()}):
        jobs = [j for j in JOBS.values() if j.world == world]
        losses.update(h.run_untraced(jobs, tmp_path_factory.mktemp(f"untraced-{world}")))
    return losses


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    cache: dict[str, h.Run] = {}

    def get(name: str) -> h.Run:
        if name not in cache:
            cache[name] = h.run_traced(JOBS[name], tmp_path_factory.mktemp(name))
        return cache[name]

    return get


def teardown_module() -> None:
    path = os.environ.get("WORKLOAD_REPORT")
    if path and REPORT:
        Path(path).write_text(json.dumps(REPORT, indent=1))


def fr_truth(run: h.Run) -> dict[int, list[tuple]]:
    """Per rank, the Flight Recorder's collectives in the trace's terms. Two backend
    facts are applied, from gloo's implementation: ``reduce_scatter_tensor`` runs as an
    all-reduce of the whole input (the Flight Recorder names what ran), and the sizes
    of gather/scatter lists are known on their root only (taken from there)."""
    calls = {r: h.fr_calls(rec) for r, rec in run.records.items()}
    root_bytes: dict[tuple, int] = {}
    for per_rank in calls.values():
        for c in per_rank:
            if c["op"] in ("gather", "scatter"):
                key = (c["group"], c["seq"])
                root_bytes[key] = max(root_bytes.get(key, 0), c["bytes"])
    for per_rank in calls.values():
        for c in per_rank:
            if c["op"] in ("gather", "scatter"):
                c["bytes"] = root_bytes[(c["group"], c["seq"])]
    return {r: h.ordered(c) for r, c in calls.items()}


def traced_as_fr(events: pl.DataFrame, rank: int) -> list[tuple]:
    calls = h.trace_calls(events, rank)
    for c in calls:
        if c["op"] == "reduce_scatter":
            c["op"] = "all_reduce"  # what gloo runs for it (see fr_truth)
    return h.ordered(calls)


def check_common(run: h.Run, untraced: dict) -> tuple:
    """What every job must satisfy; returns (trace, analysis) for the specific checks."""
    job = run.job
    for rank in range(job.world):
        assert run.loss(rank) == untraced[job.name][rank], f"{job.name}: loss differs on {rank}"
    trace = load_trace(run.trace_dir)
    assert trace.warnings == (), trace.warnings
    assert all(m["finished"] for m in trace.meta.values())
    assert set(trace.events["status"]) == {"completed"}
    job_ids = {m["job_id"] for m in trace.meta.values()}
    assert len(job_ids) == 1 and None not in job_ids
    truth = fr_truth(run)
    for rank in range(job.world):
        assert traced_as_fr(trace.events, rank) == truth[rank], f"{job.name} rank {rank}"
    analysis = analyze(run.trace_dir)
    modes = [f.mode for f in analysis.findings]
    assert "incomplete_trace" not in modes, [f.summary for f in analysis.findings]
    m = analysis.runs[0]
    assert m.quality["incomplete_instances"] == 0
    assert m.quality["size_mismatched_instances"] == 0
    REPORT[job.name] = {
        "truth": f"Flight Recorder: {sum(len(v) for v in truth.values())} collectives",
        "traced": trace.events.height,
        "loss_equal": True,
        "parallelism": m.parallelism.describe(),
        "findings": [f"{f.severity}:{f.mode}" for f in analysis.findings],
    }
    return trace, analysis


def per_rank_op(events: pl.DataFrame, **where) -> Counter:
    frame = events
    for column, value in where.items():
        frame = frame.filter(pl.col(column) == value)
    return Counter(frame.select("rank", "op").rows())


def test_ddp_buckets(traced, untraced):
    run = traced("ddp_buckets")
    trace, analysis = check_common(run, untraced)
    p = analysis.runs[0].parallelism
    assert p.kinds == ("ddp",)
    # DDP's first iteration reduces its gradients in one bucket (the model is smaller
    # than its 1 MiB first bucket); after it, DDP rebuilds buckets of bucket_cap_mb
    fr_all_reduces = sum(c["op"] == "all_reduce" for c in h.fr_calls(run.records[0]))
    steps = run.derived["steps"]
    assert p.ddp_buckets == (fr_all_reduces - 1) / (steps - 1) > 1
    assert (trace.events["timing"] == "future").sum() == 2 * fr_all_reduces


def test_ddp_one_bucket_with_a_second_thread(traced, untraced):
    run = traced("ddp_one_bucket_two_threads")
    trace, analysis = check_common(run, untraced)
    side = run.derived["side_group"]
    assert per_rank_op(trace.events, group=side) == {
        (r, "all_reduce"): run.derived["side_all_reduces"] for r in range(2)
    }
    # the side thread's calls interleave with training (they ran meanwhile)
    train = trace.events.filter(pl.col("group") == "0", pl.col("op") == "all_reduce")
    side_calls = trace.events.filter(pl.col("group") == side)
    assert side_calls["enter_ns"].min() < train["enter_ns"].max()
    p = analysis.runs[0].parallelism
    assert p.kinds == ("ddp",) and p.ddp_buckets == 1.0
    assert "1 gradient bucket per iteration" in advice.poor_overlap(p)[0]


def test_ddp_no_sync_under_the_profiler(traced, untraced):
    run = traced("ddp_no_sync_profiled")
    trace, analysis = check_common(run, untraced)
    steps = run.derived["steps"]
    # gradient accumulation over 2 micro-batches with no_sync(): one all-reduce a step
    for rank in range(2):
        record = run.records[rank]
        assert record["derived"]["profiler_ops"]["gloo:all_reduce"] == steps
        assert per_rank_op(trace.events, op="all_reduce")[(rank, "all_reduce")] == steps
    assert analysis.runs[0].parallelism.ddp_buckets == 1.0


def test_fsdp2_with_a_checkpoint_after_training(traced, untraced):
    run = traced("fsdp2_checkpoint")
    trace, analysis = check_common(run, untraced)
    m = analysis.runs[0]
    steps, units = run.derived["steps"], run.derived["units"]
    # per step: an all-gather per unit in forward, again in backward for every unit but
    # the root (FSDP2 keeps the root's parameters after forward), a reduce-scatter per unit
    per_step = {"all_gather": 2 * units - 1, "reduce_scatter": units}
    training = trace.events.filter(pl.col("step") < steps)
    for rank in range(2):
        counts = per_rank_op(training)
        for op, n in per_step.items():
            assert counts[(rank, op)] == n * steps
    # iteration figures count the training calls only, the checkpoint apart
    iterations = m.steps.height
    assert m.instances.height == sum(per_step.values()) * iterations
    trained = run.records[0]["marks"]["trained"]
    after = len(run.records[0]["fr"]) - trained  # the checkpoint's calls, per the FR
    assert after > 0 and m.trailing["calls_per_rank"] == after
    assert m.parallelism.kinds == ("fsdp",)
    assert "FSDP" in advice.poor_overlap(m.parallelism)[0]
    assert "FSDP" in advice.latency_bound(m.parallelism)[0]


def test_tensor_parallel_on_a_device_mesh(traced, untraced):
    run = traced("tensor_parallel")
    trace, analysis = check_common(run, untraced)
    steps = run.derived["steps"]
    # RowwiseParallel all-reduces the output once per forward; the input needs no grad
    training = trace.events.filter(pl.col("op") == "all_reduce")
    assert per_rank_op(training) == {(r, "all_reduce"): steps for r in range(2)}
    p = analysis.runs[0].parallelism
    assert p.kinds == ("tensor",)
    assert trace.meta[0]["groups"]["0"]["mesh_dims"] == ["tp"]


def test_2d_mesh_fsdp_by_tensor_parallel(traced, untraced):
    run = traced("mesh_2d")
    trace, analysis = check_common(run, untraced)
    steps = run.derived["steps"]
    dims = {  # each rank knows the groups it is in: the mesh is the union
        g: spec.get("mesh_dims") for m in trace.meta.values() for g, spec in m["groups"].items()
    }
    tp = [g for g, d in dims.items() if d == ["tp"]]
    dp = [g for g, d in dims.items() if d == ["dp"]]
    assert len(tp) == 2 and len(dp) == 2  # rows and columns of the 2 x 2 mesh
    ev = trace.events
    assert per_rank_op(ev.filter(pl.col("group").is_in(tp), pl.col("op") == "all_reduce")) == {
        (r, "all_reduce"): steps for r in range(4)
    }
    dp_ev = ev.filter(pl.col("group").is_in(dp))
    for rank in range(4):
        counts = per_rank_op(dp_ev)
        assert counts[(rank, "all_gather")] == counts[(rank, "reduce_scatter")] == steps
    pair = run.derived["pair_group"]
    assert per_rank_op(ev.filter(pl.col("group") == pair)) == {
        (r, "all_reduce"): steps for r in range(2)
    }
    p = analysis.runs[0].parallelism
    assert set(p.kinds) == {"fsdp", "tensor"}
    assert p.describe().startswith("2 × 2 mesh")


def check_pipeline(run: h.Run, untraced: dict, orders: dict[int, str]) -> None:
    trace, analysis = check_common(run, untraced)
    steps, micro = run.derived["steps"], run.derived["microbatches"]
    data = trace.events.filter(pl.col("op").is_in(["send", "recv"]), pl.col("dtype") == "float32")
    # every microbatch: its activation forward, its gradient back, 2 x 16 float32 each
    assert per_rank_op(data) == {
        (0, "send"): steps * micro,
        (0, "recv"): steps * micro,
        (1, "send"): steps * micro,
        (1, "recv"): steps * micro,
    }
    assert set(data["bytes"]) == {8 // micro * 16 * 4}
    for rank, order in orders.items():
        mine = data.filter(pl.col("rank") == rank).sort("enter_ns")
        for step in range(steps):
            ops = mine.filter(pl.col("step") == step)["op"].to_list()
            assert "".join("S" if o == "send" else "R" for o in ops) == order
    # matched by direction: each transfer is one complete instance of two
    inst = analysis.runs[0].instances
    p2p = inst.filter(pl.col("pair") >= 0)
    kept = trace.events.filter(pl.col("op") == "send", pl.col("step") >= 1)  # after warm-up
    assert p2p.height == kept.height
    assert (p2p["n"] == 2).all()
    assert analysis.runs[0].parallelism.kinds == ("pipeline",)
    assert "microbatches" in advice.poor_overlap(analysis.runs[0].parallelism)[0]


def test_pipeline_gpipe(traced, untraced):
    # GPipe: all forwards, then all backwards; stage 0 sends activations, then receives
    # gradients; the last stage the other way round
    check_pipeline(traced("pipeline_gpipe"), untraced, {0: "SSSSRRRR", 1: "RRRRSSSS"})


def test_pipeline_1f1b(traced, untraced):
    # 1F1B with 2 stages and 4 microbatches: stage 0 warms up with 2 forwards, then
    # alternates backward/forward, then drains; the last stage alternates from the start
    check_pipeline(traced("pipeline_1f1b"), untraced, {0: "SSRSRSRR", 1: "RSRSRSRS"})


def test_moe_uneven_all_to_all_and_batched_p2p(traced, untraced):
    run = traced("moe_all_to_all")
    trace, analysis = check_common(run, untraced)
    steps = run.derived["steps"]
    ev = trace.events
    # per step: the counts (even), dispatch and combine forward, the combine's backward
    assert per_rank_op(ev.filter(pl.col("op") == "all_to_all")) == {
        (r, "all_to_all"): 4 * steps for r in range(2)
    }
    a2a = ev.filter(pl.col("op") == "all_to_all", pl.col("dtype") == "float32")
    uneven = a2a.group_by("seq").agg(sizes=pl.col("bytes").n_unique())
    assert (uneven["sizes"] > 1).any(), "the routing was even: the test proves nothing"
    ring = ev.filter(pl.col("op").is_in(["send", "recv"]))
    assert per_rank_op(ring) == {(r, op): steps for r in range(2) for op in ("send", "recv")}
    assert analysis.runs[0].parallelism.kinds == ("expert",)


@pytest.mark.parametrize("name", ["compile_ddp", "ddp_compile"])
def test_torch_compile_with_ddp(traced, untraced, name):
    run = traced(name)
    trace, analysis = check_common(run, untraced)
    steps = run.derived["steps"]
    assert per_rank_op(trace.events, op="all_reduce") == {
        (r, "all_reduce"): steps for r in range(2)
    }
    assert analysis.runs[0].parallelism.kinds == ("ddp",)
