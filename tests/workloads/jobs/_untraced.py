"""Runs several jobs untraced, one after another, in one launch (test helper).

``WORKLOAD_PLAN`` is a JSON list of ``[name, script, *args]``. Each job rendezvouses
afresh, on a port rank 0 picks just before it starts and leaves in ``WORKLOAD_PORT_DIR``:
a port picked long before (for all jobs up front) can be taken meanwhile by one of the
earlier jobs' own connections. Prints ``UNTRACED name rank loss-hex``.
"""

import json
import os
import runpy
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


PORT_WAIT_S = 120


def job_port(index: int, rank: int) -> int:
    """The port of job ``index``: rank 0 picks a free one, the others read it."""
    path = os.path.join(os.environ["WORKLOAD_PORT_DIR"], f"port-{index}")
    if rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with open(path + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(path + ".tmp", path)
        return port
    deadline = time.monotonic() + PORT_WAIT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"rank {rank}: no port for job {index} in {PORT_WAIT_S} s")
        time.sleep(0.05)
    with open(path) as f:
        return int(f.read())


def main() -> None:
    plan = json.loads(os.environ["WORKLOAD_PLAN"])
    rank = int(os.environ["RANK"])
    for index, (name, script, *args) in enumerate(plan):
        port = job_port(index, rank)
        with tempfile.TemporaryDirectory() as out:
            os.environ.update(MASTER_PORT=str(port), WORKLOAD_OUT=out)
            sys.argv = [script, *args]
            runpy.run_path(script, run_name="__main__")
            with open(os.path.join(out, f"rank-{rank}.json")) as f:
                loss = json.load(f)["loss"]
        print(f"UNTRACED {name} {rank} {loss}", flush=True)


if __name__ == "__main__":
    main()
