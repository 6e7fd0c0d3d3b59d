"""syncpace.attach(strategy=...) routes each setting to the right configuration."""

from __future__ import annotations

import subprocess
import sys

import pytest

# each test starts a fresh interpreter that imports torch (about 2 s)
pytestmark = pytest.mark.slow


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_attach_splits_settings(tmp_path):
    proc = run(
        "import syncpace\n"
        f"syncpace.attach({str(tmp_path)!r}, strategy='target', hold=2,"
        " channel_timeout_s=3.5, flush_interval_s=0.5, host_sampler='off',"
        " counters_interval_s=0.002)\n"
        "from syncpace.capture.tracer import TRACER as t\n"
        "print(t.pacing_config.strategy, t.pacing_config.hold,"
        " t.controller_config.channel_timeout_s, t.config.flush_interval_s, t.config.dir,"
        " t.telemetry_config.host_sampler, t.telemetry_config.counters_interval_s)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["target", "2", "3.5", "0.5", str(tmp_path), "off", "0.002"]


def test_attach_rejects_unknown_setting(tmp_path):
    proc = run(f"import syncpace\nsyncpace.attach({str(tmp_path)!r}, pase='early')\n")
    assert proc.returncode != 0
    assert "attach(): unknown setting 'pase'" in proc.stderr
