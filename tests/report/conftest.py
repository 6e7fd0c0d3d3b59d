from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


def _rows(path: Path) -> list[dict]:
    return pa.ipc.open_stream(pa.memory_map(str(path))).read_all().to_pylist()


@pytest.fixture(scope="session")
def uplink_truth():
    """Each uplink direction's utilisation while a run ran, from the raw link counters:
    bytes moved between the first and the last sample inside the run's iterations (step
    1 on), over that time and the configured rate."""

    def utilisation(run: Path) -> dict[str, float]:
        steps = [s for p in run.glob("rank-*.steps.arrow") for s in _rows(p) if s["step"] >= 1]
        lo, hi = min(s["start_ns"] for s in steps), max(s["end_ns"] for s in steps)
        inside = [r for r in _rows(run / "fabric-links.arrow") if lo <= r["time_ns"] <= hi]
        out = {}
        for key in {(r["src"], r["dst"]) for r in inside if r["kind"] == "uplink"}:
            samples = sorted(
                (r for r in inside if (r["src"], r["dst"]) == key), key=lambda r: r["time_ns"]
            )
            first, last = samples[0], samples[-1]
            seconds = (last["time_ns"] - first["time_ns"]) / 1e9
            moved = (last["bytes"] - first["bytes"]) * 8
            out[f"{key[0]}→{key[1]}"] = moved / seconds / first["rate_bps"]
        return out

    return utilisation
