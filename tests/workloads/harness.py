"""Running the workload jobs traced and untraced, and the truth to compare traces with.

A traced run is armed exactly as ``syncpace run`` arms one (the bootstrap on
``PYTHONPATH``, no code change): either through ``syncpace run -- torchrun …`` itself
or, to save a launcher process per job on a 2-core CI machine, by starting the ranks
directly with that environment and the variables torchrun would set. The untraced
runs of all jobs of one world size share one launch (:file:`jobs/_untraced.py`).

The truth is not syncpace's: PyTorch's Flight Recorder entries of the same run (what
reached the gloo backend: op, process group, sequence number, sizes) and counts that
follow from each job's code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multirank import record_restart, with_ranksite
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import armed_env
from syncpace.control.config import ControllerConfig
from syncpace.control.policy import PacingConfig
from syncpace.ports import free_port

JOBS = Path(__file__).parent / "jobs"
SRC = str(Path(__file__).resolve().parents[2] / "src")
FR_ENV = {"TORCH_FR_BUFFER_SIZE": "20000"}
TIMEOUT_S = 240

#: Flight Recorder profiling names (ProcessGroupGloo's) -> the trace's canonical ops.
FR_OPS = {
    "gloo:all_reduce": "all_reduce",
    "gloo:all_gather": "all_gather",
    "gloo:reduce_scatter": "reduce_scatter",
    "gloo:broadcast": "broadcast",
    "gloo:reduce": "reduce",
    "gloo:gather": "gather",
    "gloo:scatter": "scatter",
    "gloo:all_to_all": "all_to_all",
    "gloo:barrier": "barrier",
}
_DTYPE_BYTES = {
    "Float": 4,
    "Double": 8,
    "Long": 8,
    "Int": 4,
    "Byte": 1,
    "Char": 1,
    "Half": 2,
    "BFloat16": 2,
    "Bool": 1,
}


@dataclass(frozen=True)
class Job:
    """One workload: its script, arguments, world size, and how it is launched."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    world: int = 2
    torchrun: bool = False  # traced through `syncpace run -- torchrun` (else: env-armed)


@dataclass
class Run:
    """A traced run's outputs: the trace directory and each rank's own record."""

    job: Job
    trace_dir: Path
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    stdout: str = ""

    def loss(self, rank: int = 0) -> float:
        return float.fromhex(self.records[rank]["loss"])

    @property
    def derived(self) -> dict[str, Any]:
        return self.records[0]["derived"]


def _base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(FR_ENV, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    env["PYTHONPATH"] = with_ranksite(env["PYTHONPATH"])  # as multirank's ranks
    return env


def _args(job: Job, scratch: Path) -> list[str]:
    return [a.replace("{scratch}", str(scratch)) for a in job.args]


def run_traced(job: Job, root: Path) -> Run:
    """Run ``job`` traced with no code change; every rank must exit 0."""
    trace_dir, out, scratch = root / "trace", root / "truth", root / "scratch"
    for d in (out, scratch):
        d.mkdir(parents=True, exist_ok=True)
    script = str(JOBS / job.script)
    env = _base_env({"WORKLOAD_OUT": str(out)})
    if job.torchrun:
        command = [
            sys.executable, "-m", "syncpace", "run", "--quiet", "--out", str(trace_dir), "--",
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(job.world),
            "--master-port", str(free_port()), script, *_args(job, scratch),
        ]  # fmt: skip
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        if proc.returncode != 0 and _INIT_FAILURE in proc.stderr:  # see _INIT_FAILURE
            record_restart(job.name, 1, _INIT_FAILURE)
            command[command.index("--master-port") + 1] = str(free_port())
            command.insert(command.index("--quiet"), "--force")
            proc = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
            )
        if proc.returncode != 0:
            raise AssertionError(f"{job.name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        stdout = proc.stdout
    else:
        trace_dir.mkdir(parents=True, exist_ok=True)
        armed = armed_env(trace_dir, (TraceConfig(), ControllerConfig(), PacingConfig()), env)
        stdout = _spawn(job, script, _args(job, scratch), armed)
    records = {}
    for path in sorted(out.glob("rank-*.json")):
        record = json.loads(path.read_text())
        records[record["rank"]] = record
    assert sorted(records) == list(range(job.world)), f"{job.name}: rank records {sorted(records)}"
    return Run(job, trace_dir, records, stdout)


#: gloo's full-mesh connect at init, failing for all ranks at once ("Connection closed
#: by peer"): seen on the shared 2-core machine under heavy load, with and without
#: syncpace (2 and 1 of 12 launches of the same 3-rank job). The job never started.
_INIT_FAILURE = "connectFullMesh failed"


def _spawn(job: Job, script: str, args: list[str], env: dict[str, str]) -> str:
    """The ranks of ``job`` as torchrun would start them, every exit checked; a launch
    that failed in gloo's connect at init (before the job ran) is started once more."""
    try:
        return _spawn_once(job, script, args, env)
    except AssertionError as exc:
        if _INIT_FAILURE not in str(exc):
            raise
        print(exc)
        record_restart(job.name, 1, _INIT_FAILURE)
        for path in Path(env.get("WORKLOAD_OUT", "/nonexistent")).glob("rank-*.json"):
            path.unlink()
        for path in Path(env.get("WORKLOAD_PORT_DIR", "/nonexistent")).glob("port-*"):
            path.unlink()  # the ports of the failed launch
        return _spawn_once(job, script, args, env)


def _spawn_once(job: Job, script: str, args: list[str], env: dict[str, str]) -> str:
    port = free_port()
    procs = []
    for rank in range(job.world):
        rank_env = dict(
            env,
            RANK=str(rank),
            WORLD_SIZE=str(job.world),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(job.world),
            GROUP_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            TORCHELASTIC_RUN_ID=f"workload-{job.name}",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, script, *args],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=TIMEOUT_S))
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        tails = [p.communicate()[1][-1500:] for p in procs]  # where each rank stopped
        raise AssertionError(
            f"{job.name}: ranks did not finish in {TIMEOUT_S}s; stderr tails: {tails}"
        ) from None
    failed = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0]
    if failed:
        errors = "\n".join(f"rank {r}: {err[-3000:]}" for r, (_, err) in enumerate(outputs))
        raise AssertionError(f"{job.name}: ranks exited {failed}:\n{errors}")
    return "".join(out for out, _ in outputs)


def run_untraced(jobs: list[Job], root: Path) -> dict[str, dict[int, float]]:
    """Every job of ``jobs`` (one world size) untraced, one after another in one launch:
    job name -> rank -> final loss."""
    world = {j.world for j in jobs}
    assert len(world) == 1
    scratch = root / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    plan = [[j.name, str(JOBS / j.script), *_args(j, scratch / j.name)] for j in jobs]
    ports = Path(tempfile.mkdtemp(dir=scratch, prefix="ports-"))
    env = _base_env({"WORKLOAD_PLAN": json.dumps(plan), "WORKLOAD_PORT_DIR": str(ports)})
    job = Job("untraced", "_untraced.py", world=world.pop())
    stdout = _spawn(job, str(JOBS / "_untraced.py"), [], env)
    losses: dict[str, dict[int, float]] = {}
    for line in stdout.splitlines():
        if line.startswith("UNTRACED "):
            _, name, rank, value = line.split()
            losses.setdefault(name, {})[int(rank)] = float.fromhex(value)
    return losses


# Truth ---------------------------------------------------------------------------------
def fr_calls(record: dict[str, Any], upto: int | None = None) -> list[dict[str, Any]]:
    """A rank's Flight Recorder collectives as (group, seq, op, bytes) in the trace's
    terms: sequence numbers from 0, bytes as nccl-tests counts them."""
    calls = []
    for e in record["fr"][:upto]:
        if e["is_p2p"]:
            continue
        op = FR_OPS[e["profiling_name"]]
        calls.append(
            {
                "group": e["process_group"][0],
                "seq": e["collective_seq_id"] - 1,
                "op": op,
                "bytes": _fr_bytes(op, e),
            }
        )
    return calls


def _size(shapes: list[list[int]], dtypes: list[str]) -> int:
    total = 0
    for shape, dtype in zip(shapes, dtypes, strict=False):
        n = 1
        for d in shape:
            n *= d
        total += n * _DTYPE_BYTES[dtype]
    return total


def _fr_bytes(op: str, e: dict[str, Any]) -> int:
    inputs = _size(e["input_sizes"], e["input_dtypes"])
    outputs = _size(e["output_sizes"], e["output_dtypes"])
    if op in ("all_gather", "gather"):
        return outputs  # the gathered total
    return inputs


def trace_calls(events: Any, rank: int) -> list[dict[str, Any]]:
    """A rank's traced collectives in the same terms."""
    mine = events.filter(events["rank"] == rank)
    mine = mine.filter(~mine["op"].is_in(["send", "recv"]))
    return [
        {"group": r["group"], "seq": r["seq"], "op": r["op"], "bytes": r["bytes"]}
        for r in mine.sort("group", "seq").iter_rows(named=True)
    ]


def by_group_op(calls: list[dict[str, Any]]) -> Counter:
    return Counter((c["group"], c["op"]) for c in calls)


def ordered(calls: list[dict[str, Any]]) -> list[tuple]:
    return sorted((c["group"], c["seq"], c["op"], c["bytes"]) for c in calls)
