"""Traffic that is not the job's beside calls below the latency knee, on the real
emulated fabric, as root.

A 3-host star at 50 Mbit/s runs one 256 KiB all-reduce a step (one rank per host: its
bytes take 56 ms at the link's rate, far past the knee); once the job has made its
baseline steps, h1 sends 30 Mbit/s of UDP to h2. The hosts' NICs are veths that declare
no speed, so their counters are held to the host links' rate the fabric set.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from syncpace.analysis import analyze
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.fabric import build_spec, bulk
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.lifecycle import down, up
from syncpace.fabric.runner import RunOptions, run_job

pytestmark = [pytest.mark.root, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
STEPS, BASELINE, NBYTES = 60, 20, 256 << 10


def test_udp_beside_256_kib_all_reduces_is_contention_named_by_its_sender(state_dir, tmp_path):
    backend = SystemBackend()
    spec = build_spec(
        dict(topology="star", hosts=3, host_rate="50mbit", name=f"fs{os.getpid() % 9999}")
    )
    state = up(spec, backend, state_dir)
    out = tmp_path / "run"
    out.mkdir()
    flows = []
    try:
        env = traced_env(out, TraceConfig(dir=str(out)))
        command = [sys.executable, str(HERE / "steps_job.py"), str(out)]
        command += [str(STEPS), str(BASELINE), str(NBYTES)]
        options = RunOptions(timeout_s=180, grace_s=5)
        box: dict = {}
        job = threading.Thread(
            target=lambda: box.update(r=run_job(state, command, out, backend, options, env, None))
        )
        job.start()
        deadline = time.monotonic() + 120
        while not (out / "baseline-done").exists() and job.is_alive():
            assert time.monotonic() < deadline, "the job never finished its baseline"
            time.sleep(0.05)
        flows = bulk.start_flows(state.fabric, [("h1", "h2")], 60.0, 5501, rate_bps=30_000_000)
        job.join(timeout=180)
    finally:
        for flow in flows:
            flow.stop()
        down(state, backend)
    assert box["r"].returncode == 0, box["r"]
    analysis = analyze(out)
    found = [f for f in analysis.findings if f.mode == "fabric_contention"]
    print([f"{f.mode} {f.cost:.1%} {f.source[:3]}" for f in analysis.findings])
    assert found, [f.summary for f in analysis.findings]
    ev = found[0].evidence
    assert analysis.top is found[0], analysis.top.summary
    assert found[0].source[0] in ("h1", "h2"), found[0].source
    assert {"h1", "h2"} >= set(ev["foreign_senders"][:2])
    # the ring's transfers beside 30 of 50 Mbit/s get what is left: clearly slower
    assert ev["slower_beside_foreign"] >= 1.2
    assert ev["baseline"] == "their own pace outside those intervals"
