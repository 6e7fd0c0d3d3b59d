from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def fixture_copy(tmp_path: Path):
    """A writable copy of a saved scenario trace."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(DATA / name, dest)
        return dest

    return copy


def write_trace(
    root: Path,
    events: dict[int, list[tuple]],
    steps: dict[int, list[tuple]],
    *,
    world_size: int | None = None,
    hosts: dict[int, str] | None = None,
    uncertainty_ns: int = 0,
    groups: dict[str, list[int]] | None = None,
) -> Path:
    """Write a small trace. Event rows: (rank, step, group, group_size, seq, op, bytes,
    enter_ns, exit_ns[, peer]); step rows: (rank, step, start_ns, end_ns)."""
    from syncpace.trace.writer import RankTraceWriter

    ranks = sorted(set(events) | set(steps))
    world = world_size or (max(ranks) + 1)
    for rank in ranks:
        meta = {
            "world_size": world,
            "host": (hosts or {}).get(rank, f"node{rank // 2}"),
            "local_rank": rank % 2,
            "clock": {"offset_ns": 0, "uncertainty_ns": 0 if rank == 0 else uncertainty_ns},
            "groups": {g: {"ranks": r} for g, r in (groups or {"0": list(range(world))}).items()},
            "source": "synthetic",
        }
        w = RankTraceWriter(root, rank, meta, flush_interval_s=3600, offset_ns=lambda: 0)
        for r, step, group, size, seq, op, nbytes, enter, exit_, *peer in events.get(rank, []):
            w.add_event(
                (
                    r,
                    step,
                    group,
                    size,
                    seq,
                    op,
                    nbytes,
                    "float32",
                    peer[0] if peer else -1,
                    enter,
                    exit_,
                    "simulated",
                    "completed",
                    None,
                    -1,
                )
            )
        for r, step, start, end in steps.get(rank, []):
            w.add_step((r, step, start, end, 0))
        w.close()
    return root


@pytest.fixture
def make_trace(tmp_path: Path):
    counter = iter(range(1_000_000))

    def make(*args, **kwargs) -> Path:
        return write_trace(tmp_path / f"run{next(counter)}", *args, **kwargs)

    return make
