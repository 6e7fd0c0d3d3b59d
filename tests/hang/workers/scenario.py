"""One rank of a gloo job with a planted hang or desync (driven by tests/hang).

After a barrier, every rank runs STEPS iterations of CALLS all-reduces, marks each iteration with
``syncpace.step()`` and ends with a barrier. At iteration STEP, call 1, the rank
CULPRIT does what MODE plants instead of its all-reduce. The lines the diagnosis must
point at carry a ``# LINE:<name>`` marker; the tests find their numbers by it.

Environment: RANK, WORLD_SIZE, MASTER_* (torchrun style); TRACE_DIR (traced when set);
READY_DIR (a file barrier before the rendezvous); PG_TIMEOUT (the collectives' timeout,
seconds); FR_DIR (write a Flight Recorder dump
there, ``fr_trace_rank_<R>``, once this rank's stall record appears).
"""

import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import syncpace

STEPS, CALLS, STEP = 6, 3, 3
CULPRIT = int(os.environ.get("CULPRIT", "3"))
BOUND_S = 300.0  # every wait of this worker is bounded


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"worker: gave up waiting for {what}")
        time.sleep(0.02)


def file_barrier(rank: int, world: int) -> None:
    ready = Path(os.environ["READY_DIR"])
    (ready / str(rank)).touch()
    wait_until(lambda: len(list(ready.iterdir())) >= world, "the other ranks to start")


def flight_recorder_dumper(rank: int) -> None:
    """Dump Flight Recorder once this rank's own stall record appears (the moment NCCL's
    watchdog would dump it on a timeout, only earlier), while the job still hangs."""
    out = Path(os.environ["FR_DIR"])
    stall = Path(os.environ["TRACE_DIR"]) / f"rank-{rank:05d}.stall.json"

    def dump() -> None:
        from torch._C._distributed_c10d import _dump_fr_trace

        try:
            wait_until(stall.exists, "this rank's stall record")
        except SystemExit:
            return
        tmp = out / f".tmp{rank}"
        tmp.write_bytes(_dump_fr_trace())
        tmp.rename(out / f"fr_trace_rank_{rank}")

    threading.Thread(target=dump, daemon=True).start()


def planted(mode: str, x: torch.Tensor) -> None:
    if mode in ("sleep", "kill"):
        time.sleep(3600)  # LINE:planted-sleep
    elif mode == "op":
        dist.broadcast(x, 0)  # LINE:planted-op
    elif mode == "size":
        dist.all_reduce(torch.ones(2 * x.numel()))  # LINE:planted-size
    elif mode == "freeze":
        os.kill(os.getpid(), signal.SIGSTOP)  # LINE:planted-freeze
        dist.all_reduce(x)
    elif mode == "skip":
        pass  # LINE:planted-skip
    else:
        raise SystemExit(f"unknown mode {mode}")


def main() -> None:
    mode = sys.argv[1]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if os.environ.get("TRACE_DIR"):
        syncpace.attach(
            os.environ["TRACE_DIR"], flush_interval_s=0.1, stall_after_s=1.0, stall_repeat_s=0.5
        )
    if os.environ.get("FR_DIR"):
        flight_recorder_dumper(rank)
    file_barrier(rank, world)
    # The rendezvous gets a generous timeout (a loaded machine connects slowly); the job's
    # collectives the short one, set once every rank is in.
    dist.init_process_group("gloo", timeout=timedelta(seconds=BOUND_S))
    dist.barrier()
    dist.distributed_c10d._set_pg_timeout(timedelta(seconds=float(os.environ["PG_TIMEOUT"])))
    print("INIT_DONE", flush=True)
    x = torch.ones(1024)
    for step in range(STEPS):
        for call in range(CALLS):
            if mode != "healthy" and rank == CULPRIT and step == STEP and call == 1:
                planted(mode, x)
            else:
                dist.all_reduce(x)  # LINE:loop-all-reduce
        syncpace.step()
    dist.barrier()  # LINE:final-barrier
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
