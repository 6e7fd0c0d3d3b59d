"""Start the ranks of one job by forking them from a process that imported torch once.

Importing torch costs seconds of CPU per process; forking the ranks from one parent
that already imported it (with OMP_NUM_THREADS=1 it runs no thread yet, so the fork is
safe) pays that once per job. Each child is a real, separate rank process: it takes its
RANK, sends its output to ``OUT/rank<R>.out|.err`` and runs the worker as ``__main__``,
so an uncaught error prints its traceback, runs the exit handlers and exits 1, exactly
as the worker run on its own would. The parent writes ``OUT/pids.json`` and, as each
rank ends, ``OUT/rank<R>.code`` (its exit code, negative for a signal).

A child ends as the interpreter ends a program (non-daemon threads joined, exit
handlers run, output flushed) and then leaves without tearing its modules down: that
teardown frees torch's objects one by one, writing to every page the child shares
with the parent, and took 8-13 s per rank on a loaded 2-core machine (0.1 s without).
The parent freezes what it imported (``gc.freeze``) before forking, so a child's
collections never walk, nor copy, torch's objects either.

    python zygote.py WORLD OUT WORKER ARGS...
"""

import atexit
import gc
import json
import os
import runpy
import sys
import threading
from pathlib import Path

import torch  # noqa: F401 - imported before the fork, once for every rank
import torch.distributed  # noqa: F401


def exit_code(exc: SystemExit) -> int:
    """The status the interpreter gives ``raise SystemExit(code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run_rank(worker: str, args: list[str]) -> None:
    """Run the worker as ``__main__`` and end the process as the interpreter would."""
    sys.argv = [worker, *args]
    try:
        runpy.run_path(worker, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # what the interpreter's exit does first: join non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def main() -> None:
    world, out, worker, args = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
    if os.environ.get("FR_DIR"):
        # A Flight Recorder dump symbolises stacks through torch._dynamo, whose first
        # import takes seconds: paid here once, not by each rank inside the hang.
        import torch._dynamo  # noqa: F401
    gc.freeze()
    pids = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
            for fd, suffix in ((1, "out"), (2, "err")):
                target = os.open(out / f"rank{rank}.{suffix}", os.O_WRONLY | os.O_CREAT, 0o644)
                os.dup2(target, fd)
                os.close(target)
            run_rank(worker, args)
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
