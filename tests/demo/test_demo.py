"""A short run of ``syncpace demo``: real ranks, planted straggler, named in the findings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multirank


def test_short_demo_names_the_planted_straggler(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "syncpace", "demo", "--out", str(out), "--ranks", "3",
         "--steps", "15", "--slow-rank", "1", "--compute-ms", "10", "--slow-ms", "30"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "straggler" in proc.stdout
    report = out / "report.html"
    assert report.exists() and report.stat().st_size > 100_000  # plotly.js is inlined
    diag = subprocess.run(
        [sys.executable, "-m", "syncpace", "diagnose", str(out / "trace"), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    findings = json.loads(diag.stdout)["findings"]
    straggler = [f for f in findings if f["mode"] == "straggler"]
    assert straggler and straggler[0]["ranks"] == [1]
    assert straggler[0]["severity"] in ("warning", "critical")
