"""A 2-rank gloo job for the launch helper's own tests (test_multirank.py).

Each rank appends its rank to ``LAUNCH_LOG`` as it starts (so a test counts launches),
then joins the process group. With ``fail-after-start`` rank 1 then fails with a
connection error of its own, after the group formed; rank 0's next collective fails
with it.
"""

import datetime
import os
import sys

import torch.distributed as dist


def main() -> None:
    with open(os.environ["LAUNCH_LOG"], "a") as log:
        log.write(os.environ["RANK"] + "\n")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    dist.barrier()
    if sys.argv[1:] == ["fail-after-start"]:
        if dist.get_rank() == 1:
            raise ConnectionRefusedError("Connection refused (after start-up)")
        dist.barrier()
    dist.destroy_process_group()
    print("WORKER_DONE", flush=True)


if __name__ == "__main__":
    main()
