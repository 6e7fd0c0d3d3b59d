"""The environment that arms tracing and pacing in every rank a command starts."""

from __future__ import annotations

import subprocess
import sys

from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import BOOTSTRAP_DIR, traced_env
from syncpace.control.config import ControllerConfig, PacingConfig


def test_traced_env_carries_every_config(tmp_path):
    env = traced_env(
        tmp_path,
        TraceConfig(dir=str(tmp_path), flush_interval_s=0.5),
        {"PYTHONPATH": "/x"},
        ControllerConfig(log_every=5),
        PacingConfig(strategy="early", ab=False, hold=2),
    )
    assert env["SYNCPACE_DIR"] == str(tmp_path)
    assert env["PYTHONPATH"] == f"{BOOTSTRAP_DIR}:/x"
    pacing = (env["SYNCPACE_STRATEGY"], env["SYNCPACE_AB"], env["SYNCPACE_HOLD"])
    assert pacing == ("early", "0", "2")
    assert env["SYNCPACE_LOG_EVERY"] == "5"
    assert env["SYNCPACE_FLUSH_INTERVAL_S"] == "0.5"


def test_fabric_run_rejects_a_bad_pacing_value_before_anything(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "syncpace",
            "fabric",
            "run",
            "--trace",
            "--strategy",
            "fast",
            "--out",
            str(out),
            "--",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "syncpace fabric: error: --strategy: must be one of off, early, target, got 'fast'"
    ]
    assert not out.exists()
