"""The packet tier's speed: one collective of the reference study through ns-3, growing.

The reference scenario's collective (a 25 MB hierarchical all-reduce over nodes of 8
GPUs: NVLink at 150 GB/s, one 100 Gbit/s NIC per GPU, a 3:1 leaf-spine, scattered
placement, two far GPUs per node) at 2, 4, 8, ... nodes, each in one ns-3 run, until a
run takes more than the budget of CPU time. Prints per scale the transfers (ring steps
and phases' flows) and TCP segments simulated, the driver's CPU seconds (the machine's
load does not count), transfers and segments per CPU second, and the largest scale
within the budget. The driver is compiled before the first timing.

    python benchmarks/packet_speed.py [--budget 60] [--max-nodes 64] [--bucket-mb 25]
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import sys
import time
from pathlib import Path

import numpy as np

from syncpace.sim.collectives import plan
from syncpace.sim.packet.net import HEADERS, PacketNetwork
from syncpace.sim.packet.transfers import Transfers, expand
from syncpace.sim.scenario import load
from syncpace.sim.topology import Topology

SCENARIO = Path(__file__).resolve().parents[1] / "examples" / "scenarios" / "reference_study.toml"


def children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def scale(nodes: int, bucket_mb: float) -> dict:
    cfg = load(str(SCENARIO)).config
    topo_spec = dataclasses.replace(cfg.topology, nodes=nodes)
    spec = dataclasses.replace(cfg.network, tier="packet")
    topo = Topology(topo_spec, seed=cfg.run.seed)
    net = PacketNetwork(topo, spec, seed=cfg.run.seed)
    ranks = np.arange(topo_spec.world_size)
    p = plan("all_reduce", spec.algorithm, int(bucket_mb * 2**20), ranks, topo_spec.gpus_per_node)
    out = Transfers()
    expand(p, topo, spec, 0, out)
    segments = sum(int(np.ceil(ph.nbytes / (spec.packet_mtu - HEADERS)).sum()) for ph in p.phases)
    cpu, wall = children_cpu(), time.perf_counter()
    took = float(net.durations(p)[0])
    cpu, wall = children_cpu() - cpu, time.perf_counter() - wall
    return {
        "nodes": nodes,
        "ranks": int(ranks.size),
        "transfers": len(out.xfers),
        "segments": segments,
        "collective_ms": took * 1e3,
        "cpu_s": cpu,
        "wall_s": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=60.0, help="CPU seconds per run")
    parser.add_argument("--max-nodes", type=int, default=64)
    parser.add_argument("--bucket-mb", type=float, default=25.0)
    args = parser.parse_args()
    scale(2, 0.01)  # compiles the driver outside the timings
    print(
        "| nodes | ranks | transfers | segments | collective ms | CPU s "
        "| transfers/s | segments/s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    largest = None
    nodes = 2
    while nodes <= args.max_nodes:
        r = scale(nodes, args.bucket_mb)
        cpu = max(r["cpu_s"], 1e-9)
        print(
            f"| {r['nodes']} | {r['ranks']} | {r['transfers']:,} | {r['segments']:,} | "
            f"{r['collective_ms']:.2f} | {r['cpu_s']:.1f} | {r['transfers'] / cpu:,.0f} | "
            f"{r['segments'] / cpu:,.0f} |",
            flush=True,
        )
        if r["cpu_s"] > args.budget:
            break
        largest = nodes
        nodes *= 2
    print(f"largest scale within {args.budget:g} CPU s: {largest} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
