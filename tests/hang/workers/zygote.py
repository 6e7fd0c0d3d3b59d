"""Start the ranks of one job by forking them from a process that imported torch once.

Importing torch costs seconds of CPU per process; forking the ranks from one parent
that already imported it (with OMP_NUM_THREADS=1 it runs no thread yet, so the fork is
safe) pays that once per job. Each child is a real, separate rank process: it takes its
RANK, sends its output to ``OUT/rank<R>.out|.err`` and runs the worker as ``__main__``,
so an uncaught error prints its traceback, runs the exit handlers and exits 1, exactly
as the worker run on its own would. The parent writes ``OUT/pids.json`` and, as each
rank ends, ``OUT/rank<R>.code`` (its exit code, negative for a signal).

    python zygote.py WORLD OUT WORKER ARGS...
"""

import json
import os
import runpy
import sys
from pathlib import Path

import torch  # noqa: F401 - imported before the fork, once for every rank
import torch.distributed  # noqa: F401


def main() -> None:
    world, out, worker, args = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
    if os.environ.get("FR_DIR"):
        # A Flight Recorder dump symbolises stacks through torch._dynamo, whose first
        # import takes seconds: paid here once, not by each rank inside the hang.
        import torch._dynamo  # noqa: F401
    pids = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
            for fd, suffix in ((1, "out"), (2, "err")):
                target = os.open(out / f"rank{rank}.{suffix}", os.O_WRONLY | os.O_CREAT, 0o644)
                os.dup2(target, fd)
                os.close(target)
            sys.argv = [worker, *args]
            runpy.run_path(worker, run_name="__main__")
            sys.exit(0)  # unwinds the child out of this loop, through its exit handlers
        pids[rank] = pid
    tmp = out / ".pids.json"
    tmp.write_text(json.dumps(pids))
    tmp.rename(out / "pids.json")
    rank_of = {pid: rank for rank, pid in pids.items()}
    while rank_of:
        pid, status = os.wait()
        rank = rank_of.pop(pid, None)
        if rank is not None:
            (out / f"rank{rank}.code").write_text(str(os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    main()
