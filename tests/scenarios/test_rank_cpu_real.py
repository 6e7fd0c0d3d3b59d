"""A real two-rank job on this machine, its late rank told apart by its own waiting
for a CPU: rank 1 capped by a cgroup at a fifth of a CPU, beside two busy processes,
is CPU starvation, not a straggler; rank 1 sleeping longer beside the same busy
processes is a straggler.

The job is the scenario suite's (``job.py``: sleeps plus ``--burn-ms`` of real CPU
work a step), traced by ``syncpace``'s launcher environment with its host sampler,
which measures each rank on its own. The truth is what each run planted, and the
compute each rank's own clock measured (``--compute-log``): beside busy processes a
rank's CPU work takes what the machine's load makes it take, not what was planted."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from syncpace.analysis import analyze
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.ports import free_port

JOB = Path(__file__).with_name("job.py")
STEPS = 40
BASE = ["--comm", "sync", "--compute-ms", "15", "--burn-ms", "8", "--buckets", "2"]
BASE += ["--bucket-bytes", str(64 * 1024), "--steps", str(STEPS)]
# real ranks timed against each other: the timed worker runs them (tests/suiteschedule.py)
pytestmark = pytest.mark.multirank


def _burners() -> list[subprocess.Popen]:
    """Two processes keeping a CPU busy each: a host shared with other work."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", "while True:\n    pass\n"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]


def _run(out: Path, args: list[str]) -> Path:
    env = traced_env(out, TraceConfig(dir=str(out)))
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--master-port", str(free_port()), str(JOB), *BASE, *args]
    burners = _burners()
    try:
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL
        )
    finally:
        for proc in burners:
            proc.kill()
            proc.wait(timeout=10)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def _job_compute_ms(run: Path) -> dict[int, float]:
    """Each rank's median forward-side compute per step, by the job's own clock."""
    logs = sorted((run / "compute").glob("rank-*.json"))
    return {
        int(log.stem.split("-")[1]): statistics.median(json.loads(log.read_text())) for log in logs
    }


def _print(analysis) -> None:
    for f in analysis.findings:
        print(f.mode, round(f.cost, 4), f.ranks, f.summary)


@pytest.mark.root
def test_a_rank_capped_beside_busy_processes_is_cpu_starvation(tmp_path):
    from syncpace.fabric import cgroup as cg

    path = cg.base_dir("t" + os.urandom(3).hex())
    cg.create(path)
    try:
        cg.set_cpu_limit(path, 0.2)
        run = _run(tmp_path / "run", ["--cap-ranks", "1", "--cap-cgroup", str(path)])
    finally:
        cg.remove(path)
    analysis = analyze(run)
    _print(analysis)
    (host,) = analysis.runs[0].hosts.hosts.values()
    waits = host["cpu"]["ranks"]
    print(waits)
    # the sampler measured both ranks, and the capped one waited the longer
    assert set(waits) == {"0", "1"}
    assert waits["1"]["main_wait_rate"] > waits["0"]["main_wait_rate"]
    starved = [f for f in analysis.findings if f.mode == "cpu_starvation"]
    assert starved and 1 in starved[0].evidence["late_ranks"]
    assert all(1 not in f.ranks for f in analysis.findings if f.mode == "straggler")


def test_a_rank_sleeping_longer_beside_busy_processes_is_a_straggler(tmp_path):
    out = tmp_path / "run"
    run = _run(out, ["--slow-ranks", "1", "--slow-ms", "12", "--compute-log", str(out / "compute")])
    analysis = analyze(run)
    _print(analysis)
    stragglers = [f for f in analysis.findings if f.mode == "straggler" and f.ranks]
    assert [f.ranks for f in stragglers] == [(1,)]
    # its extra compute is what the job's own clock measured: the 12 ms it sleeps
    # longer, and whatever more its CPU work took beside the busy processes
    own = _job_compute_ms(run)
    print("job's own compute ms", own)
    assert set(own) == {0, 1}, f"the job logged its compute for ranks {sorted(own)}"
    assert own[1] - own[0] > 12 / 2  # the plant stands out of the load's noise
    excess = stragglers[0].evidence["compute_excess_ms"][1]
    assert excess == pytest.approx(own[1] - own[0], rel=0.3, abs=3.0)
    # rank 0, on time, shares the host and its busy processes: the host's CPU does not
    # explain why rank 1 is late, and the finding neither says nor advises so
    summary = stragglers[0].summary
    assert "on a host starved of CPU:" not in summary and "communicates slowly" not in summary
    assert not any("CPUs they need" in a for a in stragglers[0].actions), stragglers[0].actions
    assert all(
        1 not in f.evidence.get("late_ranks", [])
        for f in analysis.findings
        if f.mode == "cpu_starvation"
    )
