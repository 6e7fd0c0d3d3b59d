"""What the trace holds when a rank closes with completions still being delivered.

Modes (two ranks):
  futures N   N async all-reduces consumed through their futures (as DDP's reducer
              does), then destroy_process_group at once: the futures have woken this
              thread, their callbacks (which make the records) may still be running
  inflight    rank 0 posts an irecv rank 1 never answers, all-reduces once, and
              destroys the group with the irecv in flight (rank 1 likewise, after
              the all-reduce); then both exit
  exit        as inflight, but the rank exits without destroy_process_group (its
              exit functions run, then it leaves at once: a group with an unmatched
              receive cannot be torn down)
"""

import os
import sys

import torch
import torch.distributed as dist

import syncpace


def main() -> None:
    mode = sys.argv[1]
    syncpace.attach(os.environ["TRACE_DIR"])
    dist.init_process_group("gloo")
    x = torch.ones(64)
    if mode == "futures":
        futures = [dist.all_reduce(x, async_op=True).get_future() for _ in range(int(sys.argv[2]))]
        torch.futures.wait_all(futures)
        dist.destroy_process_group()
    else:
        peer = 1 - dist.get_rank()
        pending = dist.irecv(torch.empty(4), src=peer)  # never sent: stays in flight
        dist.all_reduce(x)
        if mode == "inflight":
            dist.destroy_process_group()
        else:
            import atexit

            atexit._run_exitfuncs()  # what a normal exit runs first (the tracer closes)
        print("WORKER_DONE", flush=True)
        os._exit(0)  # then no teardown of a group with an unmatched receive
        assert pending
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
