"""Batched point-to-point calls keep a coalescing backend's batched path when traced."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from multirank import free_port, rank_env

WORKER = Path(__file__).parent / "workers" / "coalescing.py"

# which calls were recorded, never how long they took: it holds at any CPU load
pytestmark = [pytest.mark.multirank, pytest.mark.untimed]


def test_batch_isend_irecv_coalesces_on_a_traced_group(tmp_path):
    """torch coalesces batch_isend_irecv only when ``type(group) is ProcessGroup``; on a
    traced group the batch still goes through the backend's start/end coalescing when
    the backend supports it, returns one work for the batch, and every call of the
    batch is recorded, completed with it. Without coalescing support, torch's own
    one-by-one path runs, untouched."""
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(tmp_path / "trace")],
        env=rank_env(0, 1, free_port()),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["plain"] == {"calls": [], "works": 2}
    assert report["coalesced"] == {"calls": ["start", "end"], "works": 1}
    assert report["events"] == [
        ["send", 0, 0, "wait", "completed"],
        ["recv", 0, 0, "wait", "completed"],
        ["send", 0, 1, "wait", "completed"],
        ["recv", 0, 1, "wait", "completed"],
    ]
