"""The rank's CPU counters on its Prometheus endpoint: read from the kernel at each
scrape, they grow with the CPU the rank's threads really used."""

from __future__ import annotations

import os
import threading
import time
import urllib.request

import pytest

pytest.importorskip("prometheus_client")

from multirank import free_port  # noqa: E402
from syncpace.capture.metrics import PrometheusMetrics  # noqa: E402
from syncpace.telemetry.cpustats import JobSched  # noqa: E402


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


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux procfs")
def test_the_counters_keep_what_an_ended_thread_ran():
    """A thread that ends takes its schedstat with it; the counters must not fall."""
    source = JobSched("/", os.getpid())
    before = source.read()
    spun, may_end = threading.Event(), threading.Event()

    def spin() -> None:
        deadline = time.thread_time() + 0.2  # this thread's own CPU time
        while time.thread_time() < deadline:
            pass
        spun.set()
        may_end.wait(timeout=30)

    worker = threading.Thread(target=spin)
    worker.start()
    assert spun.wait(timeout=30)
    during = source.read()  # the worker has run 0.2 s and is still there
    may_end.set()
    worker.join(timeout=30)
    # join returns when Python's thread state is released; the kernel task leaves a
    # moment later, so wait (bounded) until procfs no longer lists it
    task = f"/proc/self/task/{worker.native_id}"
    gone_by = time.monotonic() + 30
    while os.path.exists(task) and time.monotonic() < gone_by:
        time.sleep(0.005)
    assert not os.path.exists(task)
    after = source.read()
    assert during[0] - before[0] >= 0.15e9
    # what the ended thread ran when last seen stays counted
    assert after[0] >= during[0] and after[1] >= during[1], (during, after)


def test_a_reused_thread_id_starts_a_new_count(tmp_path):
    task = tmp_path / "proc/7/task"
    for tid, (run, wait) in {"7": (100, 10), "8": (500, 50)}.items():
        (task / tid).mkdir(parents=True)
        (task / tid / "schedstat").write_text(f"{run} {wait} 1\n")
    source = JobSched(tmp_path, 7)
    assert source.read() == [600, 60]
    (task / "8/schedstat").write_text("20 2 1\n")  # thread 8 ended, a new one got its id
    assert source.read() == [620, 62]
    (task / "8/schedstat").unlink()
    (task / "8").rmdir()
    assert source.read() == [620, 62]
