"""The rank's CPU counters on its Prometheus endpoint: read from the kernel at each
scrape, they grow with the CPU the rank's threads really used."""

from __future__ import annotations

import os
import time
import urllib.request

import pytest

pytest.importorskip("prometheus_client")

from multirank import free_port  # noqa: E402
from syncpace.capture.metrics import PrometheusMetrics  # noqa: E402


def _scrape(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("syncpace_cpu_"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = float(value)
    return out


def _process_cpu_s() -> float:
    """The CPU time of this process's threads together (the process clock)."""
    return time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux procfs")
def test_the_cpu_run_counter_follows_the_processs_cpu_time():
    metrics = PrometheusMetrics(free_port(), "127.0.0.1", rank=3, host="vm", local_rank=1)
    try:
        before, cpu0 = _scrape(metrics.url), _process_cpu_s()
        deadline = time.process_time() + 0.3
        while time.process_time() < deadline:  # 0.3 s of this thread's CPU
            pass
        after, cpu1 = _scrape(metrics.url), _process_cpu_s()
    finally:
        metrics.close()
    assert set(after) == {"syncpace_cpu_run_seconds_total", "syncpace_cpu_wait_seconds_total"}
    grew = after["syncpace_cpu_run_seconds_total"] - before["syncpace_cpu_run_seconds_total"]
    # schedstat and the process clock count the same run time (the scrape's own too)
    assert grew == pytest.approx(cpu1 - cpu0, rel=0.2, abs=0.02)
    assert after["syncpace_cpu_wait_seconds_total"] >= before["syncpace_cpu_wait_seconds_total"]
