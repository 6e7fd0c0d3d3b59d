"""A two-node job on the emulated fabric, launched as users launch one (root).

Each "node" is a host namespace running ``syncpace run -- torchrun --nnodes 2`` on its
own. First every node writes into a directory of its own (no shared filesystem): the
directories are diagnosed as one job, merge into one, and agree with the truth. Then
the nodes share one directory and the second node starts 4 s late: every rank's
trace still holds every call the Flight Recorder saw, and the diagnosis is the one the
per-node directories gave (the job's last rank is planted 40 ms slow a step).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import harness as h
import pytest

from syncpace.analysis import analyze
from syncpace.fabric import build_spec
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.lifecycle import down, existing_namespaces, up
from syncpace.fabric.runner import RunOptions, run_job
from syncpace.trace import load_trace

pytestmark = [pytest.mark.root, pytest.mark.multirank]

if os.geteuid() != 0:
    pytest.skip("needs root for network namespaces", allow_module_level=True)

#: each host's launch: an optional delay by node rank, then syncpace run -- torchrun
LAUNCH = 'sleep $(( $1 * $2 )); shift 2; exec "$@"'


@pytest.fixture(scope="module")
def fabric(tmp_path_factory):
    backend = SystemBackend()
    state = up(
        build_spec(leaves=1, hosts=2, host_rate="1gbit"),
        backend,
        tmp_path_factory.mktemp("fabric-state"),
    )
    try:
        yield state
    finally:
        down(state, backend)
        assert not [ns for ns in existing_namespaces(backend) if ns.startswith(state.name)]


def launch(fabric, out: Path, truth: Path, delay_s: int, *run_flags: str) -> None:
    command = [
        "sh", "-c", LAUNCH, "launch", "{node_rank}", str(delay_s),
        sys.executable, "-m", "syncpace", "run", "--quiet", *run_flags, "--",
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        str(h.JOBS / "ddp.py"), "straggler",
    ]  # fmt: skip
    truth.mkdir(parents=True, exist_ok=True)
    env = h._base_env({"WORKLOAD_OUT": str(truth)})
    result = run_job(
        fabric,
        command,
        out,
        SystemBackend(),
        RunOptions(timeout_s=180, grace_s=5),
        env,
        echo=None,
    )
    logs = "\n".join(p.read_text()[-2000:] for p in sorted((out / "fabric-logs").glob("*.log")))
    assert result.returncode == 0, f"{result}\n{logs}"


def records(truth: Path) -> dict[int, dict]:
    found = {}
    for path in truth.glob("rank-*.json"):
        record = json.loads(path.read_text())
        found[record["rank"]] = record
    return found


def check_against_truth(trace, truth: dict[int, dict]) -> None:
    assert sorted(trace.meta) == [0, 1, 2, 3] and trace.warnings == ()
    assert {m["host"] for m in trace.meta.values()} == {"h0", "h1"}
    assert len({m["job_id"] for m in trace.meta.values()}) == 1
    for rank, record in truth.items():
        fr = h.ordered(h.fr_calls(record))
        assert h.ordered(h.trace_calls(trace.events, rank)) == fr, f"rank {rank}"
    assert set(trace.events["status"]) == {"completed"}


def straggler(analysis) -> tuple:
    found = [f for f in analysis.findings if f.mode == "straggler"]
    assert found, [f.summary for f in analysis.findings]
    return found[0].ranks, found[0].nodes


def test_node_local_directories_are_one_job_and_match_a_shared_one(fabric, tmp_path):
    # 1. no shared filesystem: each node writes its own directory
    local = tmp_path / "local"
    launch(fabric, local, tmp_path / "truth-local", 0, "--out", str(local / "node-{host}"))
    parts = sorted(local.glob("node-*"))
    assert [p.name for p in parts] == ["node-h0", "node-h1"]
    assert [sorted(load_trace(p).meta) for p in parts] == [[0, 1], [2, 3]]
    one = analyze(parts)
    assert len(one.runs) == 1 and one.runs[0].world_size == 4 and not one.scaling[1:]
    assert "incomplete_trace" not in {f.mode for f in one.findings}
    merged = tmp_path / "merged"
    proc = subprocess.run(
        [sys.executable, "-m", "syncpace", "merge", *map(str, parts), "--out", str(merged)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "(4 ranks)" in proc.stdout
    check_against_truth(load_trace(merged), records(tmp_path / "truth-local"))
    local_finding = straggler(one)
    assert local_finding[0] == (3,)

    # 2. a shared directory, the second node 4 s late: nothing lost, the same finding
    shared = tmp_path / "shared"
    launch(fabric, shared, tmp_path / "truth-shared", 4, "--join", "--out", str(shared))
    trace = load_trace(shared)
    check_against_truth(trace, records(tmp_path / "truth-shared"))
    assert straggler(analyze(shared)) == local_finding
