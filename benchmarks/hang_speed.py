"""How fast does ``syncpace hang`` answer for a large job? A synthetic hung run.

Writes a run directory of ``--ranks`` ranks (default 1024), each with ``--calls``
completed all-reduces in its events stream and a stall record: every rank but one waits
in the next all-reduce, the last one is stuck in its data loader. Then times, in this
process, reading the directory and diagnosing it (``load_trace`` + ``find_hang``), and
the command end to end (``syncpace hang DIR``, interpreter start included). Medians of
``--repeat`` runs.

    python benchmarks/hang_speed.py [--ranks 1024] [--calls 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.progress import track

from syncpace.analysis import find_hang
from syncpace.trace import load_trace, schema
from syncpace.trace.stall import Call, Frame, StallRecord, ThreadStack, stall_path, write_stall

T0 = 1_764_590_000 * 10**9
STACK = (
    Frame("/job/train.py", 120, "<module>", "main()"),
    Frame("/job/train.py", 88, "train_step", "batch = next(loader)"),
    Frame("/env/site-packages/torch/utils/data/dataloader.py", 733, "__next__", ""),
)


def write_rank(out: Path, rank: int, world: int, calls: int) -> None:
    stem = out / schema.rank_stem(rank)
    meta = {
        "schema": schema.SCHEMA_NAME,
        "schema_version": schema.SCHEMA_VERSION,
        "rank": rank,
        "world_size": world,
        "host": f"h{rank // 8}",
        "finished": False,
        "source": "synthetic",
        "groups": {"0": {"ranks": list(range(world))}},
    }
    Path(f"{stem}{schema.META_SUFFIX}").write_text(json.dumps(meta))
    seq = np.arange(calls, dtype=np.int64)
    enter = T0 + seq * 10_000_000 + rank * 1000
    n = calls
    columns = {
        "rank": pa.array(np.full(n, rank, np.int32)),
        "step": pa.array(seq // 10),
        "group": pa.array(["0"] * n),
        "group_size": pa.array(np.full(n, world, np.int32)),
        "seq": pa.array(seq),
        "op": pa.array(["all_reduce"] * n),
        "bytes": pa.array(np.full(n, 1 << 20, np.int64)),
        "dtype": pa.array(["float32"] * n),
        "peer": pa.array(np.full(n, -1, np.int32)),
        "enter_ns": pa.array(enter),
        "exit_ns": pa.array(enter + 5_000_000),
        "timing": pa.array(["wait"] * n),
        "status": pa.array(["completed"] * n),
        "error": pa.nulls(n, pa.string()),
        "wait_ns": pa.array(np.full(n, -1, np.int64)),
    }
    for suffix, table in (
        (schema.EVENTS_SUFFIX, schema.events_table(columns)),
        (schema.STEPS_SUFFIX, schema.STEPS.empty_table()),
    ):
        with pa.OSFile(f"{stem}{suffix}", "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    since = T0 + calls * 10_000_000 + rank * 1000
    culprit = rank == world - 1
    in_flight = (
        () if culprit else (Call("0", calls, "all_reduce", 1 << 20, "float32", enter_ns=since),)
    )
    frames = STACK if culprit else STACK[:1] + (Frame("/job/train.py", 91, "train_step", ""),)
    write_stall(
        stall_path(out, rank),
        StallRecord(
            rank=rank,
            world_size=world,
            state="stalled",
            kind="no_progress" if culprit else "in_collective",
            since_ns=since,
            written_ns=since + 90 * 10**9,
            host=meta["host"],
            in_flight=in_flight,
            threads=(ThreadStack("MainThread", 1, frames, main=True),),
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=2000, help="completed calls per rank")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        out.mkdir()
        for rank in track(range(args.ranks), description="writing the run", console=console):
            write_rank(out, rank, args.ranks, args.calls)
        inproc, command = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            _, finding = find_hang(load_trace(out))
            inproc.append(time.perf_counter() - t0)
            assert finding is not None and finding.ranks == (args.ranks - 1,), finding
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "syncpace", "hang", str(out)], capture_output=True, text=True
            )
            command.append(time.perf_counter() - t0)
            assert proc.returncode == 1, proc.stderr[-2000:]
        console.print(finding.summary)
    result = {
        "ranks": args.ranks,
        "events": args.ranks * args.calls,
        "load_and_diagnose_s": round(statistics.median(inproc), 3),
        "command_s": round(statistics.median(command), 3),
    }
    console.print(
        f"{args.ranks} ranks, {args.ranks * args.calls:,} events: read + diagnose "
        f"{result['load_and_diagnose_s']:.2f} s, `syncpace hang` {result['command_s']:.2f} s "
        f"(medians of {args.repeat})"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
