"""The environment that arms tracing and pacing in every rank a command starts."""

from __future__ import annotations

import subprocess
import sys

from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import BOOTSTRAP_DIR, traced_env
from syncpace.cli.main import main
from syncpace.config import from_env
from syncpace.control.config import ControllerConfig, PacingConfig
from syncpace.telemetry import TelemetryConfig


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


def test_the_host_samplers_settings_are_the_launchers(tmp_path):
    """Given, they reach the ranks; not given, its defaults do, as the tracer's do: a
    variable left in the launcher's own environment is not passed on."""
    left = {"SYNCPACE_HOST_SAMPLER": "off", "SYNCPACE_COUNTERS_NICS": "eth9"}
    env = traced_env(tmp_path, TraceConfig(dir=str(tmp_path)), left)
    assert (env["SYNCPACE_HOST_SAMPLER"], env["SYNCPACE_COUNTERS_NICS"]) == ("thread", "")
    given = TelemetryConfig(
        host_sampler="process", counters_interval_s=0.002, counters_link_rate="eth0=25gbit"
    )
    env = traced_env(tmp_path, TraceConfig(dir=str(tmp_path)), left, ControllerConfig(), given)
    assert env["SYNCPACE_HOST_SAMPLER"] == "process"
    assert env["SYNCPACE_COUNTERS_INTERVAL_S"] == "0.002"
    assert env["SYNCPACE_COUNTERS_LINK_RATE"] == "eth0=25gbit"
    assert from_env(TelemetryConfig, env) == given  # what a rank reads back


def test_run_passes_the_host_samplers_flags_to_the_ranks(tmp_path, monkeypatch):
    seen = {}

    def run_command(command, env):
        seen.update(env)
        return 0

    monkeypatch.setattr("syncpace.cli.run.run_command", run_command)
    argv = ["run", "--quiet", "--out", str(tmp_path / "r"), "--host-sampler", "process"]
    code = main([*argv, "--counters-nics", "eth*,ib0", "--", "true"])
    assert code == 0
    assert seen["SYNCPACE_HOST_SAMPLER"] == "process"
    assert seen["SYNCPACE_COUNTERS_NICS"] == "eth*,ib0"
    assert seen["SYNCPACE_COUNTERS_SLOW_INTERVAL_S"] == "0.1"  # the default


def test_a_bad_link_rate_flag_is_one_line(tmp_path, capsys):
    argv = ["run", "--out", str(tmp_path / "r"), "--counters-link-rate", "fast", "--", "true"]
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        "syncpace run: error: counters_link_rate: expected a rate such as 25gbit or 100mbit, "
        "got 'fast'"
    ]
    assert not (tmp_path / "r").exists()


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
