"""Directories that hold parts of one job: recognised, loaded as one, merged, refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
