"""The collective benchmark on the emulated fabric (needs root).

1. Brings up a star of N hosts with shaped host links (unique fabric name).
2. Runs ``syncpace bench all_reduce`` across it, one rank per host, and prints the
   busbw of the large sizes as a fraction of the configured link rate (target 0.85).
3. Plants a slow link on one host and runs the pair matrix: the slowest pairs must be
   exactly that host's pairs, and the bench must name it.
4. Tears the fabric down, also on failure or Ctrl-C.

    sudo python benchmarks/bench_fabric.py [--hosts 4] [--rate 100mbit] [--slow-rate 20mbit]

Exit code 0 when both checks pass, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from pathlib import Path

from syncpace.bench.config import BenchConfig, format_size, parse_size
from syncpace.bench.on_fabric import bench_on_fabric, busbw_fractions, host_rate_gbps
from syncpace.fabric import build_spec
from syncpace.fabric.backend import SystemBackend, require_root
from syncpace.fabric.faults import parse_fault
from syncpace.fabric.lifecycle import down, up

TARGET = 0.85


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rate", default="100mbit", help="host link rate")
    parser.add_argument("--slow-rate", default="20mbit", help="rate of the planted slow link")
    parser.add_argument("--slow-host", type=int, default=2)
    parser.add_argument("-b", default="1M", help="smallest all-reduce size")
    parser.add_argument("-e", default="8M", help="largest all-reduce size")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--large", default="1M", help="sizes from here count as large")
    parser.add_argument("--out", help="keep the run directories here (default: a temp dir)")
    args = parser.parse_args()
    require_root("benchmarks/bench_fabric.py")
    out = Path(args.out or tempfile.mkdtemp(prefix="syncpace-bench-fabric-"))
    name = "bf" + secrets.token_hex(3)
    spec = build_spec(
        {
            "topology": "star",
            "hosts": args.hosts,
            "host_rate": args.rate,
            "name": name,
            "subnet": "10.233.0.0/24",
        }
    )
    backend = SystemBackend()
    state = up(spec, backend)
    print(f"fabric {name}: star of {args.hosts} hosts, host links {args.rate}; runs in {out}")
    try:
        ok_bw = _busbw(state, out / "allreduce", args)
        ok_pairs = _slow_link(state, out / "pairs", args)
    finally:
        down(state, backend)
        print(f"fabric {name} is down")
    return 0 if ok_bw and ok_pairs else 1


def _busbw(state, run_dir: Path, args) -> bool:
    config = BenchConfig(
        ops="all_reduce",
        min_bytes=args.b,
        max_bytes=args.e,
        iters=args.iters,
        warmup=1,
        pairs=False,
        timeout_s=300,
    )
    bench = bench_on_fabric(state, config, run_dir)
    rate = host_rate_gbps(state)
    rows = busbw_fractions(bench, rate, "all_reduce", parse_size(args.large))
    print(f"\nall_reduce over {bench['world_size']} hosts, link rate {rate:.6g} GB/s:")
    for size, busbw, fraction in rows:
        print(f"  {format_size(size):>6}  busbw {busbw:.6g} GB/s  = {fraction:.3f} of link rate")
    mean = sum(f for _, _, f in rows) / len(rows)
    verdict = "PASS" if mean >= TARGET else "FAIL"
    print(f"  mean over large sizes: {mean:.3f} of link rate (target >= {TARGET}) {verdict}")
    return mean >= TARGET


def _slow_link(state, run_dir: Path, args) -> bool:
    slow = args.slow_host
    link = f"h{slow}-sw"
    config = BenchConfig(pairs_only=True, pair_bytes="512K", pair_iters=4, timeout_s=300)
    faults = [parse_fault(f"rate {link} {args.slow_rate}")]
    bench = bench_on_fabric(state, config, run_dir, faults=faults)
    m = bench["pairs"]
    n = bench["world_size"]
    entries = sorted(
        (m["bandwidth_gbps"][i][j], i, j) for i in range(n) for j in range(n) if i != j
    )
    involved = 2 * (n - 1)  # pairs with the slow host, both directions
    slowest = entries[:involved]
    print(f"\npair matrix with {link} at {args.slow_rate} (rank {slow} is on h{slow}):")
    for bw, i, j in entries[: involved + 2]:
        mark = "slow" if any(p["src"] == i and p["dst"] == j for p in m["slow"]) else ""
        print(f"  {i} -> {j}: {bw:.6g} GB/s {mark}")
    exact = all(slow in (i, j) for _, i, j in slowest)
    named = m["suspects"] == [slow]
    flagged = {(p["src"], p["dst"]) for p in m["slow"]}
    expected = {(i, j) for _, i, j in slowest}
    print(
        f"  slowest {involved} pairs all involve rank {slow}: {exact}; flagged exactly "
        f"those: {flagged == expected}; suspect named: {m['suspects']}"
    )
    return exact and named and flagged == expected


if __name__ == "__main__":
    if os.geteuid() != 0:
        print("benchmarks/bench_fabric.py needs root (network namespaces)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
