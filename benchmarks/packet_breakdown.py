"""Where the packet tier's collective spends its time: one ns-3 run of the cross-check's
job (benchmarks/tier_check.py) with the driver's statistics on.

Per offset (the same offsets ``tier_check.py`` draws, so the durations are its packet
figures): the collective's duration; every connection's retransmissions, timeouts (RTO)
and fast recoveries; every link direction that dropped packets or queued more than a
megabyte, with its fullest queue; the transfers on the critical path (from the last
one to end back through the dependency that ended last) that took longest, with their
connection and ring step. ``--warm N`` runs N steps first on the same connections
(``network.packet_warm``), to see which part of the time is the connections' start;
``--no-hystart`` turns cubic's hybrid slow start off (on in ns-3 and Linux).

    python benchmarks/packet_breakdown.py --out runs/breakdown --nodes 16 [--oversub 1]
        [--greedy yes] [--warm 0] [--no-hystart] [--samples 2] [--settle 0.2] [--span 0.2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
from pathlib import Path

import numpy as np
from tier_check import config

from syncpace.sim.collectives import plan
from syncpace.sim.packet.net import HEADERS, PacketNetwork
from syncpace.sim.topology import Topology

SLOW_S = 2e-3  # a critical-path transfer slower than this is listed
QUEUED = 1 << 20  # a link direction whose queue held more than this is listed
SLOW_RTT_S = 1e-3  # a connection whose smoothed round trip exceeded this is listed


def children_cpu_s() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def node_name(net: PacketNetwork, node: int) -> str:
    world = net.topo.spec.world_size
    return f"rank {node}" if node < world else f"switch {node}"


def parse_xfers(lines: list[str]) -> list[tuple[int, int, list[int]]]:
    """(connection, bytes, dependencies) of every transfer line."""
    out = []
    for line in lines:
        f = line.split()
        out.append((int(f[2]), int(f[3]), [int(d) for d in f[6:]]))
    return out


def critical_path(
    result: dict, xfers: list[tuple[int, int, list[int]]], ends: list[int]
) -> list[int]:
    done, path = result["done"], []
    cur = max(ends, key=lambda i: done[i])
    while True:
        path.append(cur)
        deps = xfers[cur][2]
        if not deps:
            return path[::-1]
        cur = max(deps, key=lambda i: done[i])


def breakdown(args: argparse.Namespace) -> dict:
    cfg = config(args.nodes, args.oversub, args.greedy, "packet", args)
    cfg = cfg.replace(network=dataclasses.replace(cfg.network, packet_warm=args.warm))
    topo = Topology(cfg.topology, seed=cfg.run.seed)
    wl = cfg.workload
    world = cfg.topology.world_size
    plans = [
        plan(wl.op, cfg.network.algorithm, int(b), np.arange(world), 1) for b in wl.bucket_bytes()
    ]
    net = PacketNetwork(
        topo, cfg.network, cfg.run.seed, idle_s=wl.compute_s + wl.opt_ms * 1e-3, step=plans
    )
    out, measured = net.step_transfers(plans)
    xfers = parse_xfers(out.xfers)
    conn_of = {i: key for key, i in out.conns.items()}
    # the ring step of every transfer on its connection, counted from the measured step
    first = measured[0][0]
    step_of: dict[int, int] = {}
    seen: dict[int, int] = {}
    for i, (c, nbytes, _) in enumerate(xfers):
        # zero-byte transfers mark a collective's start and its phases' boundaries
        if i > first and nbytes and conn_of[c][3] == "job":
            step_of[i] = seen.get(c, 0)
            seen[c] = step_of[i] + 1
    segment = cfg.network.packet_mtu - HEADERS
    offsets = net.offsets()
    samples = []
    for w in offsets:
        cpu = children_cpu_s()
        r = net.statistics(out, w, hystart=not args.no_hystart)
        begin, ends = measured[0]
        duration = max(r["done"][i] for i in ends) - r["done"][begin]
        conns = []
        for (src, dst, spine, purpose), c in out.conns.items():
            retx, rto, rec, cwnd, ssthresh, rtt = r["conns"][c]
            if retx or rto or rec or rtt > SLOW_RTT_S:
                conns.append(
                    {
                        "conn": f"{src}->{dst} spine {spine} {purpose}",
                        "retx": retx,
                        "rto": rto,
                        "recoveries": rec,
                        "max_cwnd_segments": cwnd / segment,
                        "ssthresh_segments": ssthresh / segment,
                        "max_srtt_ms": 1e3 * rtt,
                    }
                )
        dirs = []
        for d, (drops, peak) in enumerate(r["dirs"]):
            a, b, bps, cap = net.fabric.links[d // 2]
            frm, to = (a, b) if d % 2 == 0 else (b, a)
            if drops or peak > QUEUED:
                dirs.append(
                    {
                        "link": f"{node_name(net, frm)} -> {node_name(net, to)}",
                        "drops": drops,
                        "peak_bytes": peak,
                        "peak_ms": 1e3 * peak * 8 / bps,
                        "capacity": cap,
                    }
                )
        path = critical_path(r, xfers, ends)
        slow = [
            {
                "xfer": i,
                "conn": " ".join(map(str, conn_of.get(xfers[i][0], ("?",)))),
                "step": step_of.get(i, -1),
                "start_ms": 1e3 * r["start"][i],
                "took_ms": 1e3 * (r["done"][i] - r["start"][i]),
                "measured": i > first,
            }
            for i in path
            if r["done"][i] - r["start"][i] > SLOW_S
        ]
        samples.append(
            {
                "offset_s": w,
                "duration_ms": 1e3 * duration,
                "drops": r["drops"],
                "conns": conns,
                "dirs": dirs,
                "critical_slow": slow,
                "critical_len": len([i for i in path if i > first]),
                "cpu_s": children_cpu_s() - cpu,
            }
        )
    return {
        "nodes": args.nodes,
        "oversub": args.oversub,
        "greedy": args.greedy,
        "warm": args.warm,
        "hystart": not args.no_hystart,
        "samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--oversub", type=float, default=1.0)
    parser.add_argument("--greedy", default="yes", choices=("yes", "no"))
    parser.add_argument("--warm", type=int, default=0, help="packet_warm: steps run before")
    parser.add_argument("--no-hystart", action="store_true", help="cubic's HyStart off")
    parser.add_argument("--samples", type=int, default=2, help="offsets, as tier_check.py")
    parser.add_argument("--settle", type=float, default=0.2)
    parser.add_argument("--span", type=float, default=0.2)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    args.greedy = args.greedy == "yes"
    args.out.mkdir(parents=True, exist_ok=True)
    result = breakdown(args)
    hystart = "_nohystart" if args.no_hystart else ""
    name = f"n{args.nodes}_o{args.oversub:g}_g{int(args.greedy)}_w{args.warm}{hystart}"
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
