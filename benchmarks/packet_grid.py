"""The validation grid's transfers through the packet tier, against the real medians.

For each point of docs/validation.md's grid (50 Mbit/s links, one 256 KiB ring
all-reduce per collective, the same background flows, `quickack` but on
star8-delayed-ack) the median collective time of the packet tier (ns-3, several
offsets against the background flows; each step's all-reduces one after the other, as
the job issues them, on connections warmed by earlier steps) and of the flow tier,
beside the real median transfer that docs/validation.md reports for the run in its
table. Nothing is fitted:
the links are the fabric's rate, α the benchmark's (0 at 4 ranks, 2.9 ms per
collective at 8).

    python benchmarks/packet_grid.py [--samples 8] [--tcp bbr] [--shaper tbf] [--json out.json]
    python benchmarks/packet_grid.py --grid runs/validate/validation.json

The fabric's hosts are network namespaces, which take the machine's congestion control
(`sysctl net.ipv4.tcp_congestion_control`) unless the fabric pins it: ``--tcp`` defaults
to the machine's. ``--grid`` takes a grid run's ``validation.json`` instead: each point's
real median transfer and the congestion control its fabric's hosts ran, as recorded
there (``--tcp`` then only where a row has none). ``--shaper tbf``
shapes every link as the fabric's tbf does (a rested link passes its bucket at once);
``wire`` sends every packet at the link's rate.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from syncpace.errors import ConfigError
from syncpace.sim.collectives import plan
from syncpace.sim.flownet import FlowNetwork
from syncpace.sim.network import NetworkSpec
from syncpace.sim.packet.net import PacketNetwork
from syncpace.sim.topology import Topology, TopologySpec
from syncpace.validate.model import PACKET_TCP, packet_tcp

MBIT = 50.0
STAR = {"kind": "switch"}
LS = {"kind": "leaf-spine", "nodes_per_leaf": 2, "spines": 1}
UDP_15 = 0.3 * 1442 / 1400  # 15 Mbit/s of payload as a share of the wire
#: point: (topology, ranks, background flows, delayed-ACK count, real median ms)
POINTS = {
    "star2": (STAR, 2, (), 1, 45.1),
    "star4": (STAR, 4, (), 1, 66.1),
    "star4-contended": (STAR, 4, ("1->0",), 1, 175.4),
    "star4-udp": (STAR, 4, ("1->0@0.5150",), 1, 135.2),
    "ls4": ({**LS, "oversub": 2.0}, 4, (), 1, 66.6),
    "ls4-oversub4": ({**LS, "oversub": 4.0}, 4, (), 1, 139.4),
    "ls4-contended": ({**LS, "oversub": 2.0}, 4, ("3->0", "3->1"), 1, 379.6),
    "ls4-udp": ({**LS, "oversub": 2.0}, 4, (f"2->0@{UDP_15:.4f}", f"3->1@{UDP_15:.4f}"), 1, 161.0),
    "star8": (STAR, 8, (), 1, 74.2),
    "star8-delayed-ack": (STAR, 8, (), 2, 79.7),
}
ALPHA_US = {2: 0.0, 4: 0.0, 8: 0.0029 * 1e6 / 14}  # the benchmark's α per ring step
COMPUTE_S = {2: 0.150, 4: 0.150, 8: 0.200}  # the step's compute: how long connections rest
BUCKETS = {2: 2, 4: 2, 8: 1}  # all-reduces per step, issued one after the other


def hosts_tcp() -> str:
    """The congestion control a fresh network namespace takes here (the fabric's hosts)."""
    try:
        name = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        return "cubic"
    return PACKET_TCP.get(name, "cubic")


def recorded(path: str) -> dict[str, tuple[float, str]]:
    """Per point of a grid run: its real median transfer (ms) and the packet tier's
    name of the congestion control its hosts ran (empty where not recorded)."""
    try:
        rows = json.loads(Path(path).read_text())["rows"]
        return {
            r["point"]: (
                float(r["real"]["transfer_ms"]),
                packet_tcp(r["setup"]["fabric"]["congestion_control"])
                if "fabric" in r["setup"]
                else "",
            )
            for r in rows
        }
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:
        raise SystemExit(f"{path}: not a validation grid's output: {exc}") from None


def point(
    name: str, samples: int, tcp: str, shaper: str, warm: int = 2, real: float | None = None
) -> dict:
    topo_kw, ranks, flows, delack, table_real = POINTS[name]
    real = table_real if real is None else real
    topo = Topology(
        TopologySpec(
            nodes=ranks, gpus_per_node=1, nics_per_node=1, nic_gbps=MBIT * 1e6 / 8e9, **topo_kw
        )
    )
    spec = NetworkSpec(
        tier="packet",
        algorithm="ring",
        alpha_us=ALPHA_US[ranks],
        background_flows=flows,
        packet_delayed_ack=delack,
        packet_tcp=tcp,
        packet_shaper=shaper,
        packet_samples=samples,
        packet_warm=warm,
    )
    p = plan("all_reduce", "ring", 256 * 1024, np.arange(ranks), 1)
    net = PacketNetwork(topo, spec, seed=0, idle_s=COMPUTE_S[ranks])
    wall = time.perf_counter()
    # the step's all-reduces as the step runs them: the real median is over all of them
    step = net.sequence([p] * BUCKETS[ranks]) * 1e3
    packet = step.ravel()
    wall = time.perf_counter() - wall
    flow = FlowNetwork(topo, spec, seed=0).run(p, 0.0, 0) * 1e3
    med = float(np.median(packet))
    return {
        "point": name,
        "tcp": tcp,
        "real_ms": real,
        "packet_ms": med,
        "packet_err": med / real - 1,
        "packet_p10_p90_ms": [float(np.percentile(packet, 10)), float(np.percentile(packet, 90))],
        "packet_bucket_ms": [float(np.median(col)) for col in step.T],
        "flow_ms": flow,
        "flow_err": flow / real - 1,
        "drops": net.drops,
        "wall_s": wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8, help="offsets per contended point")
    parser.add_argument("--tcp", default=hosts_tcp(), choices=["cubic", "newreno", "bbr"])
    parser.add_argument("--shaper", default="tbf", choices=["tbf", "wire"])
    parser.add_argument("--warm", type=int, default=2, help="collectives before the measured")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--grid", help="a grid run's validation.json: real medians and TCP")
    args = parser.parse_args()
    runs = recorded(args.grid) if args.grid else {}
    rows = []
    print(
        f"tcp {'as each point recorded' if runs else args.tcp}, shaper {args.shaper}, "
        f"{args.warm} warm collectives, {args.samples} offsets per contended point"
    )
    print(
        "| point | tcp | real ms | packet ms | err | p10–p90 | per bucket | flow ms | err | drops |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in [n for n in POINTS if not runs or n in runs]:
        real, tcp = runs.get(name, (None, ""))
        r = point(name, args.samples, tcp or args.tcp, args.shaper, args.warm, real)
        rows.append(r)
        lo, hi = r["packet_p10_p90_ms"]
        print(
            f"| {name} | {r['tcp']} | {r['real_ms']:.1f} | {r['packet_ms']:.1f} | "
            f"{r['packet_err']:+.1%} | "
            f"{lo:.0f}–{hi:.0f} | {' / '.join(f'{b:.1f}' for b in r['packet_bucket_ms'])} | "
            f"{r['flow_ms']:.1f} | {r['flow_err']:+.1%} | {r['drops']} |",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
