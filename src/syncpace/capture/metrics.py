"""Prometheus metrics of one rank, served over HTTP for the cluster's scraper.

One endpoint per rank, on ``metrics_port + LOCAL_RANK`` (so the ranks of a node never
collide, and a scrape config lists ``host:port`` per local rank). Every series carries
the labels clusters already join on — ``rank``, ``host``, ``local_rank`` — and the
collective series add ``group`` and ``op``, as NCCL's inspector and the DCGM exporter
label theirs. Names follow Prometheus conventions (base units, ``_total`` counters).

The hot path never touches a Prometheus object: per-collective bytes and time are
summed into a plain dict and folded into the counters once a step.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from syncpace.capture.log import warn_once
from syncpace.trace.busbw import bus_factor

#: Step-time histogram buckets, seconds: 1 ms … ~100 s, four per decade.
STEP_BUCKETS = tuple(round(10 ** (e / 4 - 3), 6) for e in range(21))


class PrometheusMetrics:
    """Owns a private registry and its HTTP server; every update is cheap and local."""

    def __init__(self, port: int, addr: str, *, rank: int, host: str, local_rank: int) -> None:
        # prometheus-client is the optional [monitor] extra.
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            start_http_server,
        )

        self.labels = {"rank": str(rank), "host": host, "local_rank": str(local_rank)}
        names = list(self.labels)
        registry = self.registry = CollectorRegistry()
        # A count that only grows is a counter (rate() and increase() apply); the
        # client library adds the `_total` suffix to the exposed name.
        self._steps = Counter(
            "syncpace_steps", "Iterations this rank completed.", names, registry=registry
        ).labels(**self.labels)
        self._steps_done = 0
        self._step_s = Histogram(
            "syncpace_step_duration_seconds",
            "Iteration time seen by this rank.",
            names,
            buckets=STEP_BUCKETS,
            registry=registry,
        ).labels(**self.labels)
        self._last_step_s = Gauge(
            "syncpace_last_step_seconds",
            "This rank's latest iteration time.",
            names,
            registry=registry,
        ).labels(**self.labels)
        self._lateness = Gauge(
            "syncpace_arrival_lateness_seconds",
            "Mean time this rank reached the step's sync point after the first rank "
            "(last monitor window).",
            names,
            registry=registry,
        ).labels(**self.labels)
        self._wait = Gauge(
            "syncpace_wait_ratio",
            "Mean share of the step this rank waited for the last rank (last monitor window).",
            names,
            registry=registry,
        ).labels(**self.labels)
        self._finding = Gauge(
            "syncpace_finding_cost_ratio",
            "Share of the iteration a live finding about this rank costs, 0 to 1 (0 when none).",
            names + ["mode"],
            registry=registry,
        )
        self._finding.labels(**self.labels, mode="straggler").set(0.0)
        coll = names + ["group", "op"]
        self._bytes = Counter(
            "syncpace_collective_bytes",
            "Bytes this rank's collectives moved (nccl-tests size).",
            coll,
            registry=registry,
        )
        self._seconds = Counter(
            "syncpace_collective_seconds",
            "Time this rank spent inside collectives.",
            coll,
            registry=registry,
        )
        self._calls = Counter(
            "syncpace_collective_calls",
            "Collective calls this rank completed.",
            coll,
            registry=registry,
        )
        self._algbw = Gauge(
            "syncpace_collective_algbw_bytes_per_second",
            "Bytes over time inside the call, per op and group, over the last step.",
            coll,
            registry=registry,
        )
        self._busbw = Gauge(
            "syncpace_collective_busbw_bytes_per_second",
            "Bus bandwidth (nccl-tests' definition: algbw times the op's bus factor for the "
            "group size), per op and group, over the last step.",
            coll,
            registry=registry,
        )
        _register_cpu(registry, self.labels)
        self._pending: dict[tuple[str, str], list[float]] = {}
        self._group_sizes: dict[str, int] = {}
        self._lock = threading.Lock()  # completions arrive on the backends' threads too
        self.server: Any = None
        self.url = ""
        try:
            started = start_http_server(port, addr=addr, registry=registry)
            self.server = started[0] if isinstance(started, tuple) else None
            self.url = f"http://{addr}:{port}/metrics"
        except OSError as exc:
            warn_once("metrics-port", "no Prometheus endpoint on port %d: %s", port, exc)

    # Hot path: plain arithmetic only ----------------------------------------------------
    def on_collective(
        self, group: str, op: str, nbytes: int, seconds: float, group_size: int = 0
    ) -> None:
        with self._lock:
            self._group_sizes[group] = group_size
            slot = self._pending.get((group, op))
            if slot is None:
                self._pending[(group, op)] = [float(nbytes), seconds, 1.0]
            else:
                slot[0] += nbytes
                slot[1] += seconds
                slot[2] += 1

    # Once a step / window -----------------------------------------------------------------
    def on_step(self, step: int, step_s: float) -> None:
        if step + 1 > self._steps_done:  # a repeated or earlier step never moves it back
            self._steps.inc(step + 1 - self._steps_done)
            self._steps_done = step + 1
        self._step_s.observe(step_s)
        self._last_step_s.set(step_s)
        with self._lock:
            pending, self._pending = self._pending, {}
        for (group, op), (nbytes, seconds, calls) in pending.items():
            labels = {**self.labels, "group": group, "op": op}
            self._bytes.labels(**labels).inc(nbytes)
            self._seconds.labels(**labels).inc(seconds)
            self._calls.labels(**labels).inc(calls)
            if seconds > 0:
                self._algbw.labels(**labels).set(nbytes / seconds)
                size = self._group_sizes.get(group, 0)
                factor = bus_factor(op, size) if size >= 1 else None
                if factor is not None:
                    self._busbw.labels(**labels).set(nbytes / seconds * factor)

    def on_window(self, lateness_s: float, wait_fraction: float, straggler_cost: float) -> None:
        self._lateness.set(lateness_s)
        self._wait.set(wait_fraction)
        self._finding.labels(**self.labels, mode="straggler").set(straggler_cost)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


class _RankCpu:
    """This rank's threads' CPU time, and the time they were runnable but waited for a
    CPU (``/proc/self/task/*/schedstat``), read when scraped: nothing on the hot path.
    A rank whose wait grows as fast as its run time is starved of CPU (a CPU limit, more
    busy threads than cores)."""

    def __init__(self, source: Any, labels: dict[str, str]) -> None:
        self.source = source
        self.labels = labels

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        run, wait = self.source.read()
        names = list(self.labels)
        for name, doc, value in (
            ("syncpace_cpu_run_seconds", "CPU time this rank's threads ran.", run),
            (
                "syncpace_cpu_wait_seconds",
                "Time this rank's threads were runnable but waited for a CPU.",
                wait,
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=names)
            if value is not None:
                family.add_metric(list(self.labels.values()), value / 1e9)
            yield family


def _register_cpu(registry: Any, labels: dict[str, str]) -> None:
    from syncpace.telemetry.cpustats import JobSched

    try:
        source = JobSched("/", os.getpid())
    except (OSError, ValueError):  # no schedstat here (not Linux, or no schedstats)
        return
    registry.register(_RankCpu(source, labels))
