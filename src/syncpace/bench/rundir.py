"""Where a benchmark rank writes: the traced run directory, resolved the same on every rank."""

from __future__ import annotations

import os
from pathlib import Path

from syncpace.bench.config import BenchConfig
from syncpace.bench.results import BENCH_FILE
from syncpace.errors import BenchError

DEFAULT_DIR = "syncpace-bench"


def resolve(config: BenchConfig) -> Path:
    """``$SYNCPACE_DIR`` when the tracer is already armed there (``syncpace run``,
    ``syncpace fabric run --trace``), else ``--out``, else ``./syncpace-bench``."""
    armed = os.environ.get("SYNCPACE_DIR", "")
    return Path(armed or config.out or DEFAULT_DIR).resolve()


def prepare_rank(run_dir: Path, rank: int, overwrite: bool) -> None:
    """Make the directory ready for this rank's files, touching no other rank's.

    A directory armed by ``syncpace run`` was prepared by it; otherwise a rank refuses
    to mix its trace with an earlier one unless told to overwrite.
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise BenchError(f"{run_dir}: exists and is not a directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    if os.environ.get("SYNCPACE_DIR"):
        return
    mine = sorted(run_dir.glob(f"rank-{rank:05d}.*"))
    if rank == 0 and (run_dir / BENCH_FILE).exists():
        mine.append(run_dir / BENCH_FILE)
    if mine and not overwrite:
        raise BenchError(
            f"{run_dir}: already holds an earlier run ({mine[0].name}); "
            "choose another --out or add --force to replace it"
        )
    for path in mine:
        path.unlink(missing_ok=True)
