"""What the analysis makes of the shapes real parallel jobs give their traces: two-way
point-to-point, uneven all-to-all, work after the last iteration, no iteration at all,
and which parallelism it was."""

from __future__ import annotations

import json
from pathlib import Path

from syncpace.analysis import analyze
from syncpace.analysis.detectors import advice
from syncpace.report.perfetto import perfetto_events
from syncpace.trace import RankTraceWriter, load_trace

MS = 1_000_000


def write(root: Path, world: int, rows: list[tuple], steps: int, groups=None) -> Path:
    """rows: (rank, step, group, size, seq, op, bytes, peer, enter, exit, timing);
    ``steps`` iterations of 10 ms on every rank."""
    for rank in range(world):
        meta = {
            "world_size": world,
            "host": "node0",
            "source": "synthetic",
            "clock": {"offset_ns": 0, "uncertainty_ns": 0},
            "groups": groups or {"0": {"ranks": list(range(world))}},
        }
        w = RankTraceWriter(root, rank, meta, flush_interval_s=3600)
        for r, step, group, size, seq, op, nbytes, peer, enter, exit_, timing in rows:
            if r == rank:
                w.add_event((r, step, group, size, seq, op, nbytes, "float32", peer, enter, exit_,
                             timing, "completed", None, -1))  # fmt: skip
        for step in range(steps):
            w.add_step((rank, step, step * 10 * MS, (step + 1) * 10 * MS, 0))
        w.close()
    return root


def pipeline_rows(steps: int, micro: int = 4) -> list[tuple]:
    """Two stages: activations 0 -> 1 (128 B), gradients 1 -> 0 (64 B), per microbatch."""
    rows = []
    for step in range(steps):
        for m in range(micro):
            k = step * micro + m
            t = step * 10 * MS + m * MS
            rows += [
                (0, step, "0", 2, k, "send", 128, 1, t, t + 100_000, "wait"),
                (1, step, "0", 2, k, "recv", 128, 0, t + 50_000, t + 100_000, "wait"),
                (1, step, "0", 2, k, "send", 64, 0, t + 500_000, t + 600_000, "wait"),
                (0, step, "0", 2, k, "recv", 64, 1, t + 400_000, t + 600_000, "wait"),
            ]
    return rows


def test_two_way_point_to_point_matches_by_direction(tmp_path):
    """Sends a→b and b→a carry their own sequence numbers: each transfer is one
    complete instance of its send and its receive, with one size."""
    analysis = analyze(write(tmp_path, 2, pipeline_rows(3), 3))
    inst = analysis.runs[0].instances
    assert inst.height == 2 * 4 * 2  # steps after warm-up x microbatches x directions
    assert (inst["n"] == 2).all() and inst["complete"].all()
    assert sorted(set(inst["bytes"])) == [64, 128]
    assert (inst["bytes"] == inst["bytes_min"]).all()
    assert "incomplete_trace" not in {f.mode for f in analysis.findings}
    assert analysis.runs[0].parallelism.kinds == ("pipeline",)


def test_perfetto_labels_each_side_of_a_transfer(tmp_path):
    trace = load_trace(write(tmp_path, 2, pipeline_rows(1), 1))
    names = {json.loads(x)["name"] for x in perfetto_events(trace) if '"ph":"b"' in x}
    assert names == {"send 128B to 1", "recv 128B from 0", "send 64B to 0", "recv 64B from 1"}


def test_uneven_all_to_all_is_legal(tmp_path):
    rows = []
    for step in range(3):
        t = step * 10 * MS
        rows += [
            (0, step, "0", 2, step, "all_to_all", 768, -1, t, t + MS, "wait"),
            (1, step, "0", 2, step, "all_to_all", 256, -1, t, t + MS, "wait"),
        ]
    analysis = analyze(write(tmp_path, 2, rows, 3))
    assert analysis.runs[0].quality["size_mismatched_instances"] == 0
    assert "incomplete_trace" not in {f.mode for f in analysis.findings}
    assert analysis.runs[0].parallelism.kinds == ("expert",)


def fsdp_rows(steps: int, checkpoint: int) -> list[tuple]:
    """Per step 2 all-gathers and a reduce-scatter; after the last step, ``checkpoint``
    gathers (a checkpoint's all-gathers)."""
    rows, seq = [], 0
    for step in range(steps + 1):
        ops = ["all_gather", "all_gather", "reduce_scatter"] if step < steps else []
        ops += ["all_gather"] * (checkpoint if step == steps else 0)
        for i, op in enumerate(ops):
            t = step * 10 * MS + i * MS
            for rank in range(2):
                rows.append((rank, step, "0", 2, seq, op, 4096, -1, t, t + 500_000, "wait"))
            seq += 1
    return rows


def test_work_after_the_last_iteration_is_kept_apart(tmp_path):
    analysis = analyze(write(tmp_path, 2, fsdp_rows(4, checkpoint=12), 4))
    m = analysis.runs[0]
    assert m.instances.height == 3 * 3  # 3 calls in each of the 3 iterations after warm-up
    assert m.trailing["calls_per_rank"] == 12 and m.trailing["ops"] == {"all_gather": 24}
    assert m.parallelism.kinds == ("fsdp",)
    assert "FSDP" in advice.poor_overlap(m.parallelism)[0]


def test_no_iteration_boundary_asks_for_syncpace_step(tmp_path):
    rows = [(r, 0, "0", 2, i, "all_reduce", 64, -1, i * MS, i * MS + 1000, "wait")
            for i in range(20) for r in range(2)]  # fmt: skip
    analysis = analyze(write(tmp_path, 2, rows, 0))
    found = {f.mode: f for f in analysis.findings}
    assert "insufficient_data" in found and "healthy" not in found
    summary = found["insufficient_data"].summary
    assert "no iteration boundary was seen in 20 collectives" in summary
    assert "syncpace.step()" in summary


def test_ddp_buckets_and_one_bucket_advice(tmp_path):
    rows = []
    for step in range(4):
        t = step * 10 * MS
        for rank in range(2):
            rows.append((rank, step, "0", 2, step, "all_reduce", 1 << 20, -1, t + 8 * MS,
                         t + 9 * MS, "future"))  # fmt: skip
    p = analyze(write(tmp_path, 2, rows, 4)).runs[0].parallelism
    assert p.kinds == ("ddp",) and p.ddp_buckets == 1.0 and p.ddp_one_bucket
    assert "1 gradient bucket per iteration" in advice.poor_overlap(p)[0]
    assert "bucket_cap_mb" in advice.latency_bound(p)[0]


def test_a_2d_mesh_names_both_dimensions(tmp_path):
    groups = {
        "0": {"ranks": [0, 1, 2, 3]},
        "1": {"ranks": [0, 1], "mesh_dims": ["tp"]},
        "2": {"ranks": [2, 3], "mesh_dims": ["tp"]},
        "3": {"ranks": [0, 2], "mesh_dims": ["dp"]},
        "4": {"ranks": [1, 3], "mesh_dims": ["dp"]},
    }
    tp_of = {0: "1", 1: "1", 2: "2", 3: "2"}
    dp_of = {0: "3", 2: "3", 1: "4", 3: "4"}
    rows = []
    for step in range(3):
        t = step * 10 * MS
        for rank in range(4):
            rows += [
                (rank, step, tp_of[rank], 2, step, "all_reduce", 256, -1, t, t + MS, "wait"),
                (rank, step, dp_of[rank], 2, 2 * step, "all_gather", 4096, -1, t + 2 * MS,
                 t + 3 * MS, "wait"),
                (rank, step, dp_of[rank], 2, 2 * step + 1, "reduce_scatter", 4096, -1,
                 t + 5 * MS, t + 6 * MS, "wait"),
            ]  # fmt: skip
    p = analyze(write(tmp_path, 4, rows, 3, groups)).runs[0].parallelism
    assert set(p.kinds) == {"fsdp", "tensor"}
    assert p.describe() == "2 × 2 mesh: sharded data parallel (FSDP) [dp] × tensor parallel [tp]"
    assert [f["dim"] for f in p.families] == ["dp", "tp"]  # the world group carried nothing
