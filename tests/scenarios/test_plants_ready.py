"""A fabric scenario's phase starts its steps only once its plants are in force: the
harness marks the phase after its faults are set and its flows are sending (the job,
``job.py --ready-dir``, waits for the mark before the phase's steps)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import suite  # noqa: E402


def plants(tmp_path: Path, **fields) -> tuple[suite._Plants, list[str]]:
    """The harness's plants of a scenario with flows, their start recorded in order
    with the ready marks seen when it happens."""
    sc = suite.Scenario(name="x", plant="x", flows=(("h0", "h1"),), **fields)
    out = suite._Plants(sc, state=SimpleNamespace(fabric=None), log=None, ready=tmp_path)
    seen: list[str] = []

    def start() -> None:
        seen.append(f"flows started, marks {sorted(p.name for p in tmp_path.iterdir())}")
        out.flows = ["a flow"]

    out._start_flows = start  # type: ignore[method-assign]
    out._stop_flows = lambda: seen.append("flows stopped")  # type: ignore[method-assign]
    return out, seen


def test_a_planted_phase_is_marked_once_its_flows_are_sending(tmp_path: Path) -> None:
    out, seen = plants(tmp_path)
    out.enter(0)  # the warm-up: clean
    assert sorted(p.name for p in tmp_path.iterdir()) == ["phase-0"]
    out.enter(2)  # planted
    assert seen == ["flows started, marks ['phase-0']"]
    assert (tmp_path / "phase-2").exists()
    out.enter(3)  # clean again: marked once the flows are stopped
    assert seen[-1] == "flows stopped"
    assert (tmp_path / "phase-3").exists()
    assert out.errors == []


def test_flows_meant_to_start_within_the_phase_do_not_hold_its_steps(tmp_path: Path) -> None:
    out, seen = plants(tmp_path, flows_after_s=0.01)
    out.enter(2)
    assert seen == ["flows started, marks ['phase-2']"]
