"""Simulator speed on one core: analytical 1,024 and 4,096 ranks x 1,000 iterations,
flow-level 64 ranks x 200 iterations. Each case runs in a child process with every
thread pool limited to one thread; prints wall and CPU seconds against the budget.

    python benchmarks/sim_speed.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CASES = {
    # name: (nodes, steps, tier, budget_s)
    "analytical 1,024 ranks x 1,000": (128, 1000, "analytical", 10.0),
    "analytical 4,096 ranks x 1,000": (512, 1000, "analytical", 60.0),
    "flow-level 64 ranks x 200": (8, 200, "flow", 60.0),
}

CHILD = r"""
import json, sys, time
from syncpace.control.config import PacingConfig
from syncpace.sim.scenario import from_dict
from syncpace.sim.engine import simulate
nodes, steps, tier = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
flow = tier == "flow"
cfg = from_dict({
    "topology": {"kind": "leafspine", "nodes": nodes, "gpus_per_node": 8, "nics_per_node": 8,
                 "nodes_per_leaf": 4 if flow else 16, "spines": 4, "oversub": 3.0,
                 "cluster_nodes": 2 * nodes, "placement": "scattered", "far_gpus": [7],
                 "far_compute_penalty": 0.05},
    "workload": {"model_mb": 100.0, "bucket_mb": 25.0},
    "network": {"tier": tier, "algorithm": "hierarchical", "background_load": 0.2,
                "background_flow_mb": 256.0},
    "noise": {"jitter": 0.03, "distribution": "pareto", "rank_spread": 0.02,
              "os_burst_prob": 0.001, "loader_prob": 0.0005, "throttle_rate": 0.0005},
    "interference": {"mode": "spin"},
    "pacing": {"strategy": "early"},
    "run": {"steps": steps, "record_events": False},
}).config
wall, cpu = time.perf_counter(), time.process_time()
result = simulate(cfg)
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "ranks": result.world_size, "iteration_ms": result.summary()["iteration_ms"]}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the iterations")
    args = parser.parse_args()
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "POLARS_MAX_THREADS"):
        env[var] = "1"
    failed = False
    for name, (nodes, steps, tier, budget) in CASES.items():
        steps = steps // 10 if args.quick else steps
        proc = subprocess.run(
            ["taskset", "-c", "0", sys.executable, "-c", CHILD, str(nodes), str(steps), tier],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(f"{name}: failed\n{proc.stderr}")
            failed = True
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        verdict = "ok" if r["wall_s"] <= budget or args.quick else "OVER BUDGET"
        print(
            f"{name:34s} wall {r['wall_s']:6.2f} s  cpu {r['cpu_s']:6.2f} s  "
            f"budget {budget:4.0f} s  {verdict}  ({r['ranks']} ranks, {steps} iterations)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
