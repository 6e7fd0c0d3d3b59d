"""Directories that hold parts of one job: recognised, loaded as one, merged, refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from syncpace.analysis import analyze
from syncpace.errors import TraceError
from syncpace.trace import RankTraceWriter, load_trace
from syncpace.trace.merge import group_dirs, load_job, merge_dirs

WORLD = 4


def write_part(root: Path, ranks: list[int], job_id: str | None, world: int = WORLD) -> Path:
    """Ranks of a 4-rank job, 3 iterations with one all-reduce each, in ``root``."""
    for rank in ranks:
        meta = {"world_size": world, "host": f"node{rank // 2}"}
        if job_id is not None:
            meta["job_id"] = job_id
        w = RankTraceWriter(root, rank, meta)
        for step in range(3):
            start = step * 1_000_000
            w.add_event(
                (rank, step, "0", world, step, "all_reduce", 1024, "float32", -1,
                 start + 1000 * rank, start + 9000, "future", "completed", None, -1)
            )  # fmt: skip
            w.add_step((rank, step, start, start + 10_000, 0))
        w.close()
    return root


def test_parts_of_one_job_are_one_trace(tmp_path):
    a = write_part(tmp_path / "n0", [0, 1], "job-1")
    b = write_part(tmp_path / "n1", [2, 3], "job-1")
    assert group_dirs([a, b]) == [[a, b]]
    trace = load_job([a, b])
    assert trace.ranks == [0, 1, 2, 3] and trace.missing_ranks == [] and trace.warnings == ()
    assert str(trace.path) == f"{a} + {b}"
    analysis = analyze([a, b])
    assert len(analysis.runs) == 1 and analysis.runs[0].world_size == WORLD
    assert "incomplete_trace" not in {f.mode for f in analysis.findings}


def test_different_jobs_stay_apart_and_make_a_scaling_study(tmp_path):
    a = write_part(tmp_path / "a", [0, 1, 2, 3], "job-1")
    b = write_part(tmp_path / "b", [0, 1], "job-2", world=2)
    assert group_dirs([a, b]) == [[a], [b]]
    assert len(analyze([a, b]).runs) == 2


def test_parts_without_job_ids_are_joined_when_their_ranks_are_disjoint(tmp_path):
    a = write_part(tmp_path / "n0", [0, 1], None)
    b = write_part(tmp_path / "n1", [2, 3], None)
    c = write_part(tmp_path / "again", [0, 1, 2, 3], None)
    assert group_dirs([a, b, c]) == [[a, b], [c]]


def test_merge_copies_one_job_into_one_directory(tmp_path):
    a = write_part(tmp_path / "n0", [0, 1], "job-1")
    b = write_part(tmp_path / "n1", [2, 3], "job-1")
    out = tmp_path / "merged"
    proc = subprocess.run(
        [sys.executable, "-m", "syncpace", "merge", str(a), str(b), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "merged job job-1 (4 ranks)" in proc.stdout
    merged = load_trace(out)
    assert merged.ranks == [0, 1, 2, 3] and merged.warnings == ()
    assert merged.events.height == 12


@pytest.mark.slow
def test_merge_refuses_different_jobs_and_a_rank_twice(tmp_path):
    a = write_part(tmp_path / "n0", [0, 1], "job-1")
    b = write_part(tmp_path / "n1", [2, 3], "job-2")
    with pytest.raises(TraceError, match="2 different jobs"):
        merge_dirs([a, b], tmp_path / "out")
    c = write_part(tmp_path / "n2", [1, 2], "job-1")
    with pytest.raises(TraceError, match="rank 1 is also in"):
        load_job([a, c])
    proc = subprocess.run(
        [sys.executable, "-m", "syncpace", "merge", str(a), str(b), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "different jobs" in proc.stderr


def test_warnings_name_the_real_files(tmp_path):
    a = write_part(tmp_path / "n0", [0, 1], "job-1")
    b = write_part(tmp_path / "n1", [2], "job-1")
    trace = load_job([a, b])
    assert trace.missing_ranks == [3]
    assert any(str(a) in w and str(b) in w for w in trace.warnings), trace.warnings
    assert not any("syncpace-job-" in w for w in trace.warnings)


def _node_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """The fabric_contention scenario (8 ranks, node0: 0-3, node1: 4-7) written the way
    two nodes without a shared disk write it: each node's ranks, its host sampler's
    counters and facts, and what else a node leaves (a stall record that resolved, the
    emulated fabric's link counters, a Flight Recorder dump in a folder of its own)."""
    from sysfs_trees import sample_host, switch_host, write_netdev, write_netstat, write_snmp

    source = Path(__file__).resolve().parents[1] / "data" / "fabric_contention"
    dirs = (tmp_path / "node0", tmp_path / "node1")
    for node, d in enumerate(dirs):
        d.mkdir()
        for rank in range(4 * node, 4 * node + 4):
            for f in source.glob(f"rank-{rank:05d}.*"):
                if f.name.endswith(".meta.json"):
                    meta = json.loads(f.read_text())
                    meta["job_id"] = "job-7"
                    (d / f.name).write_text(json.dumps(meta))
                else:
                    shutil.copy2(f, d / f.name)
        tree = switch_host(tmp_path / f"tree{node}")
        write_netstat(tree, {})

        def counters(tick: int, tree=tree, node=node) -> None:
            # node1's eth0 sends 99 % of 100 Gbit/s and retransmits: the evidence changes
            sent = tick * (99_000_000_000 // 8 // 10 if node else 1_000_000)
            eth0 = {"tx_bytes": sent, "tx_packets": sent // 9000}
            write_netdev(tree, {"eth0": eth0, "eth1": {}, "eth2": {}})
            write_snmp(tree, {"OutSegs": tick * 10_000, "RetransSegs": tick * 50 * node})

        sample_host(d, f"node{node}", tree, 12, counters, use_nvml=False)
    demo = source.parent / "demo" / "trace"
    # the fabric's link counters, scaled to a fabric faster than this job's NICs (the
    # demo's links run at 100 Mbit/s: as they are, they would hold this synthetic job's
    # collectives to a rate it never ran at)
    links = pl.read_ipc_stream(demo / "fabric-links.arrow")
    links = links.with_columns(pl.col("rate_bps") * 10_000, pl.col("bytes") * 10_000)
    links.write_ipc_stream(dirs[0] / "fabric-links.arrow")
    (dirs[1] / "rank-00005.monitor.jsonl").write_text("")
    (dirs[1] / "flight-recorder").mkdir()
    (dirs[1] / "flight-recorder" / "nccl_trace_rank_5").write_bytes(b"\x80\x04N.")
    (dirs[0] / "syncpace.lock").write_text("")  # a live run's lock: no data
    return dirs


def _files(*dirs: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(d)): p.read_bytes()
        for d in dirs
        for p in d.rglob("*")
        if p.is_file() and p.name != "syncpace.lock"
    }


def test_merge_keeps_every_file_and_the_diagnosis(tmp_path, capsys):
    """The merged directory holds every file of the nodes' directories, byte for byte,
    and ``diagnose --json`` of it equals that of the directories read together (the
    host counters included: node1's retransmissions are named in both)."""
    from syncpace.cli.main import main

    n0, n1 = _node_dirs(tmp_path)
    out = tmp_path / "merged"
    assert main(["merge", str(n0), str(n1), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "merged job job-7 (8 ranks)" in printed
    assert _files(out) == _files(n0, n1)
    assert not (out / "syncpace.lock").exists()
    assert main(["diagnose", "--json", str(n0), str(n1)]) == 0
    apart = capsys.readouterr().out.replace(f"{n0} + {n1}", "RUN")
    assert main(["diagnose", "--json", str(out)]) == 0
    merged = capsys.readouterr().out.replace(str(out), "RUN")
    assert json.loads(merged) == json.loads(apart)
    (contention,) = [f for f in json.loads(merged)["findings"] if f["mode"] == "fabric_contention"]
    assert contention["evidence"]["tcp_retransmitted_segments_by_host"] == {"node1": 550}
    # the merged directory and its parts are one run: given together, refused
    assert main(["diagnose", str(out), str(n0), str(n1)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"syncpace diagnose: error: {n0} + {n1}: the same run as {out} (job id job-7): "
        "give each run once\n"
    )


def test_merge_refuses_two_different_files_of_one_name(tmp_path):
    n0, n1 = _node_dirs(tmp_path)
    (n1 / "fabric-links.arrow").write_bytes(b"other")
    with pytest.raises(TraceError, match="differs from .*node0/fabric-links.arrow"):
        merge_dirs([n0, n1], tmp_path / "out")
    assert not (tmp_path / "out").exists()
