"""Peak memory of ``syncpace export --perfetto`` against the size of the trace.

Writes traces of N million events with the real per-rank writer (8 ranks, 64
all-reduces per step, one batch per flush as in a job), then exports each in a fresh
process and reads that process's peak RSS. The streamed export's memory should stay
flat as N grows; ``--in-memory`` also measures the old way (load the whole trace,
encode every line, then write) for comparison.

    python benchmarks/perfetto_memory.py --millions 1 2 4 8 [--in-memory]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from syncpace.trace import RankTraceWriter

WORLD = 8
PER_STEP = 64

CHILD = """
import resource, sys, time
from syncpace.report.perfetto import export_perfetto, perfetto_events
from syncpace.trace import load_trace
mode, src, out = sys.argv[1:4]
start = time.monotonic()
if mode == "stream":
    r = export_perfetto(src, out)
    n = r.events
else:
    lines = perfetto_events(load_trace(src))
    with open(out, "w") as f:
        f.write(",\\n".join(lines))
    n = len(lines)
print(n, time.monotonic() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def write_trace(root: Path, events: int) -> None:
    per_rank = events // WORLD
    steps = per_rank // PER_STEP
    for rank in range(WORLD):
        w = RankTraceWriter(root, rank, {"world_size": WORLD, "host": f"n{rank // 4}"},
                            flush_interval_s=3600)  # fmt: skip
        t = 1_000_000_000
        rng = np.random.default_rng(rank)
        jitter = rng.integers(0, 50_000, size=per_rank)
        for s in range(steps):
            start = t
            for i in range(PER_STEP):
                seq = s * PER_STEP + i
                enter = t + int(jitter[seq])
                w.add_event((rank, s, "0", WORLD, seq, "all_reduce", 1 << 20, "float32", -1,
                             enter, enter + 200_000, "future", "completed", None, -1))  # fmt: skip
                t += 250_000
            w.add_step((rank, s, start, t, 0))
            if s % 150 == 149:
                w.flush()  # one batch per ~10k events, as the flusher would write
        w.close()


def peak_rss_mb(mode: str, src: Path, out: Path) -> tuple[float, float, int]:
    """The export's own peak RSS (MB), measured in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(src), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    n, seconds, maxrss_kb = proc.stdout.split()
    return int(maxrss_kb) / 1024, float(seconds), int(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--millions", type=float, nargs="+", default=[1, 2, 4])
    parser.add_argument("--in-memory", action="store_true", help="also measure the old way")
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="perfetto-mem-"))
    rows = []
    try:
        for millions in sorted(args.millions):
            src = work / f"trace-{millions:g}M"
            t0 = time.monotonic()
            write_trace(src, int(millions * 1e6))
            written = time.monotonic() - t0
            out = work / "out.json"
            modes = ["stream"] + (["in-memory"] if args.in_memory else [])
            for mode in modes:
                rss, seconds, n = peak_rss_mb(mode, src, out)
                rows.append((millions, mode, rss, seconds, out.stat().st_size / 1e9))
                print(
                    f"{millions:g}M events ({written:.0f} s to write): {mode:9s} peak RSS "
                    f"{rss:7.0f} MB, {rss / millions:6.0f} MB per million events, "
                    f"{seconds:5.1f} s, output {out.stat().st_size / 1e9:.2f} GB",
                    flush=True,
                )
                out.unlink()
            shutil.rmtree(src)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print("\nmillions | mode | peak RSS MB | MB per million | seconds | output GB")
    for millions, mode, rss, seconds, gb in rows:
        print(
            f"{millions:g} | {mode} | {rss:.0f} | {rss / millions:.0f} | {seconds:.1f} | {gb:.2f}"
        )


if __name__ == "__main__":
    main()
