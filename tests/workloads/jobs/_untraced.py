"""Runs several jobs untraced, one after another, in one launch (test helper).

``WORKLOAD_PLAN`` is a JSON list of ``[name, script, *args]``, ``WORKLOAD_PORTS`` a
port per job (each job rendezvouses afresh). Prints ``UNTRACED name rank loss-hex``.
"""

import json
import os
import runpy
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    plan = json.loads(os.environ["WORKLOAD_PLAN"])
    ports = json.loads(os.environ["WORKLOAD_PORTS"])
    rank = int(os.environ["RANK"])
    for (name, script, *args), port in zip(plan, ports, strict=True):
        with tempfile.TemporaryDirectory() as out:
            os.environ.update(MASTER_PORT=str(port), WORKLOAD_OUT=out)
            sys.argv = [script, *args]
            runpy.run_path(script, run_name="__main__")
            with open(os.path.join(out, f"rank-{rank}.json")) as f:
                loss = json.load(f)["loss"]
        print(f"UNTRACED {name} {rank} {loss}", flush=True)


if __name__ == "__main__":
    main()
