"""Local gloo ranks for the benchmarks: one process per rank, as torchrun would set them."""

from __future__ import annotations

import subprocess
import sys

from syncpace.ports import free_port


def spawn_ranks(world: int, argv: list[str], base: dict[str, str]) -> list[subprocess.Popen]:
    """Start ``python ARGV`` ``world`` times with the rendezvous variables of a local job."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(
            base,
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, *argv],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs
