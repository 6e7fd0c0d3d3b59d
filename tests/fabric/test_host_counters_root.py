"""The host sampler on the emulated fabric, as root: a shaped host link with greedy TCP
across it shows up in the hosts' own counters, and in the diagnosis, by host.

Truth comes from outside the sampler: the fabric's shapers count every byte and drop
of every link direction (``fabric-links.arrow``, read with ``tc -s``), and the sampler
runs inside the hosts' namespaces, seeing only what a real host sees.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from syncpace.analysis.api import analyze
from syncpace.analysis.detectors.hosts import NETWORK_MODES
from syncpace.capture.config import TraceConfig
from syncpace.capture.launch import traced_env
from syncpace.fabric import build_spec, bulk
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.counters import LINKS_FILE
from syncpace.fabric.faults import parse_fault
from syncpace.fabric.lifecycle import down, up
from syncpace.fabric.plan import stats_command
from syncpace.fabric.runner import RunOptions, run_job
from syncpace.fabric.state import STATE_DIR_ENV
from syncpace.telemetry import TelemetryConfig
from syncpace.trace import load_trace

pytestmark = pytest.mark.root

HERE = Path(__file__).resolve().parent
RATE = 50_000_000
SHAPED = 30_000_000  # h0's link, reshaped below the others


@pytest.fixture(scope="module")
def shaped_run(tmp_path_factory):
    """Two hosts on one switch; h0's link shaped to 30 Mbit/s for the whole run; a
    traced 2-rank job of 1 MiB all-reduces (26 steps); after 6 clean steps a greedy TCP flow from
    h1 into h0 starts, the job waiting for it, and crosses the shaped link until the job
    ends."""
    state_dir = tmp_path_factory.mktemp("state")
    previous = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(state_dir)
    backend = SystemBackend()
    state = up(build_spec(topology="star", hosts=2, host_rate="50mbit"), backend, state_dir)
    out = tmp_path_factory.mktemp("shaped")
    try:
        env = traced_env(
            out, TraceConfig(dir=str(out)), None, TelemetryConfig(counters_interval_s=0.01)
        )
        env["STEPS_JOB_GATE_S"] = "30"
        command = [sys.executable, str(HERE / "steps_job.py"), str(out), "26", "6"]
        options = RunOptions(
            timeout_s=120, grace_s=5, faults=[parse_fault("rate h0-sw 30mbit at=0")]
        )
        box: dict = {}
        job = threading.Thread(
            target=lambda: box.update(r=run_job(state, command, out, backend, options, env, None))
        )
        job.start()
        flows = []
        poller = ShaperPoller(state.fabric).__enter__()
        try:
            deadline = time.monotonic() + 90
            while not (out / "baseline-done").exists() and job.is_alive():
                assert time.monotonic() < deadline, "the job never finished its baseline"
                time.sleep(0.05)
            # the job goes on once the sender sends: the flow's start-up on a busy
            # machine can outlast the job's last steps
            flows = bulk.start_flows(state.fabric, [("h1", "h0")], 60.0, 5401, sending=True)
            (out / "traffic-on").touch()
            job.join(timeout=150)
        finally:
            for flow in flows:
                flow.stop()
            poller.__exit__()
        assert box["r"].returncode == 0, box["r"]
        yield out, poller.rows
    finally:
        down(state, backend)
        if previous is None:
            os.environ.pop(STATE_DIR_ENV, None)
        else:
            os.environ[STATE_DIR_ENV] = previous


class ShaperPoller:
    """The shapers' byte and drop counters of both directions of h0's link, read with
    ``tc -s`` every second, each reading timed on its own: the fabric's sampler stamps
    all namespaces of one sample with one time, which on a busy machine can lie 100 ms
    away from when a namespace was read. Readings that took longer than 30 ms are
    dropped, so every kept one is placed in time within 15 ms."""

    def __init__(self, fabric) -> None:
        h0 = fabric.host("h0")
        link = fabric.link("h0-sw")
        self.ends = {"rx": (link.b.namespace, link.b.dev), "tx": (h0.namespace, h0.ifname)}
        self.rows: dict[str, list[tuple[int, int, int]]] = {"rx": [], "tx": []}
        self.backend = SystemBackend()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _read(self, direction: str) -> None:
        namespace, dev = self.ends[direction]
        before = time.time_ns()
        out = self.backend.run(stats_command(namespace).argv, check=False).stdout
        after = time.time_ns()
        if after - before > 30_000_000:
            return
        for q in json.loads(out or "[]"):
            if q.get("kind") == "tbf" and q.get("root") and q.get("dev") == dev:
                self.rows[direction].append(((before + after) // 2, q["bytes"], q["drops"]))

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            for direction in self.ends:
                self._read(direction)

    def __enter__(self) -> ShaperPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _host_counter(trace, host: str, source: str, device: str, counter: str) -> pl.DataFrame:
    c = trace.counters
    return c.filter(
        pl.col("host") == host,
        pl.col("source") == source,
        pl.col("device") == device,
        pl.col("counter") == counter,
    ).sort("time_ns")


def _at(times: np.ndarray, series: pl.DataFrame) -> np.ndarray:
    """A cumulative counter's value at ``times`` (linear between its rows: exact where
    it stayed constant, within one sampling interval elsewhere)."""
    return np.interp(times, series["time_ns"].to_numpy(), series["value"].to_numpy())


def test_loss_shows_in_the_hosts_counters(shaped_run):
    out, shaper = shaped_run
    trace = load_trace(out)
    assert set(trace.hosts) == {"h0", "h1"}
    assert all(h["finished"] and not h["errors"] for h in trace.hosts.values())
    links = pl.read_ipc_stream(out / LINKS_FILE)
    into_h0 = links.filter(pl.col("src") == "sw", pl.col("dst") == "h0")["drops"]
    switch_drops = int(into_h0.max() - into_h0.min())
    retrans = _host_counter(trace, "h1", "tcp", "", "RetransSegs")["value"]
    sent_retrans = int(retrans.max() - retrans.min())
    h0 = _host_counter(trace, "h0", "tcp", "", "RetransSegs")["value"]
    seen = (
        f"switch -> h0 dropped {switch_drops} packets; h1 retransmitted {sent_retrans}, "
        f"h0 {int(h0.max() - h0.min())}; h1's samples {len(retrans)}"
    )
    print(seen)
    assert switch_drops > 0, seen
    # every segment the switch dropped on the way to h0 was sent by h1, and sent again
    assert sent_retrans >= 0.5 * switch_drops, seen
    # the shaped rate is what the host measures its link against
    rate = _host_counter(trace, "h0", "nic", "eth0", "link_rate_bps")["value"]
    assert rate.to_list()[0] == SHAPED


@pytest.mark.parametrize("direction", ["rx", "tx"])
def test_utilisation_matches_the_shapers_counters(shaped_run, direction):
    out, shaper = shaped_run
    trace = load_trace(out)
    mine = _host_counter(trace, "h0", "nic", "eth0", f"{direction}_bytes")
    rows = np.array(shaper[direction], dtype=np.int64)
    inside = (rows[:, 0] >= mine["time_ns"].min()) & (rows[:, 0] <= mine["time_ns"].max())
    rows = rows[inside]
    times = rows[:, 0]
    seconds = np.diff(times) / 1e9
    theirs = np.diff(rows[:, 1]) * 8 / seconds / SHAPED
    ours = np.diff(_at(times, mine)) * 8 / seconds / SHAPED
    busy = theirs > 0.2
    errors = np.abs(ours[busy] - theirs[busy]) / theirs[busy]
    print(
        f"h0 {direction}: {busy.sum()} busy intervals, peak utilisation host "
        f"{ours.max():.3f} shaper {theirs.max():.3f}, median error {np.median(errors):.3%}"
    )
    assert busy.sum() >= 4
    assert abs(ours.max() - theirs.max()) <= 0.05 * theirs.max()
    assert np.median(errors) <= 0.05
    # the analysis' own peak (100 ms windows) sees the same saturation
    nic = analyze(trace).runs[0].hosts.nic
    row = nic.filter(pl.col("host") == "h0", pl.col("direction") == direction).row(0, named=True)
    assert row["util_peak"] >= 0.95 * theirs.max()


def test_the_finding_names_the_host(shaped_run):
    """Whichever network finding the timing gives (contention, or communication that
    dominates the iteration: that is the detectors' judgement), it carries the hosts'
    counters and names the host that retransmitted."""
    out, _ = shaped_run
    analysis = analyze(out)
    network = [f for f in analysis.findings if f.mode in NETWORK_MODES]
    assert network, [f.summary for f in analysis.findings]
    for finding in network:
        print(f"{finding.mode}: {finding.summary}")
        e = finding.evidence
        assert e["tcp_retransmitted_segments_by_host"]["h1"] > 0
        assert e["nic_peak_utilisation_share"]["h0 eth0 receive"] >= 0.9
        assert "host h1: TCP retransmitted" in finding.summary
