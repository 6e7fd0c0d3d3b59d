"""The live monitor in a real 4-rank gloo job, scraped by a real Prometheus server.

Rank 1 straggles from step SLOW_FROM to SLOW_TO (a sleep in its loop, nothing else
differs). The truth is the job's own schedule: the live line, the detections in the
trace and the gauge Prometheus scraped must show the straggler within the documented
delay of its start and clear within it of its end, and name nobody else.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import NamedTuple

import numpy as np
import polars as pl
import pytest
from tests.monitor.prometheus_server import find_prometheus, prometheus, query_range

from multirank import run_ranks
from syncpace.capture.monitor import LAG_STEPS
from syncpace.monitor import OnlineDetector
from syncpace.trace import load_trace

WORKER = Path(__file__).resolve().parent / "workers" / "straggle.py"
DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "syncpace-dashboard.json"
ALERTS = Path(__file__).resolve().parents[2] / "examples" / "prometheus" / "syncpace-alerts.yml"
WORLD, STEPS, SLOW_FROM, SLOW_TO, EVERY = 4, 130, 40, 85, 5
SCRAPE_S = 0.25


def free_port_block(n: int) -> int:
    """A base port with ``n`` consecutive free ports."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        try:
            socks = []
            for i in range(n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError("no block of free ports")


#: The example alert rules with minutes as seconds (the run lasts seconds, not hours),
#: and every ``for`` at the evaluation interval.
FOR_S = 0.5


def fast_rules(text: str) -> str:
    text = re.sub(r"\bfor: \d+[mh]\b", f"for: {int(FOR_S * 1000)}ms", text)
    text = re.sub(r"\[(\d+)m\]", r"[\1s]", text)
    text = re.sub(r"\[(\d+)h\]", lambda m: f"[{int(m.group(1)) * 60}s]", text)
    return re.sub(r"offset (\d+)m\b", r"offset \1s", text)


def delay_bound() -> int:
    """Steps from a change to its detection: the window, the gather lag and the CUSUM."""
    detector = OnlineDetector(WORLD)
    return EVERY + LAG_STEPS + math.ceil(detector.h / (1 - detector.k))


def step_lines(stdout: str) -> list[tuple[int, float, float, float]]:
    """The worker's ``STEP s t run wait`` lines, its ``START t run wait`` as step -1."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("STEP "):
            _, step, t, run, wait = line.split()
            out.append((int(step), float(t), float(run), float(wait)))
        elif line.startswith("START "):
            _, t, run, wait = line.split()
            out.append((-1, float(t), float(run), float(wait)))
    return out


class LiveRun(NamedTuple):
    results: list
    times: dict[int, float]  # step -> wall time of its end (rank 1)
    series: list
    steps_seen: list
    trace_dir: Path
    dashboard: dict
    bandwidth: dict
    alerts: list
    #: rank -> (wall time, seconds run, seconds waited for a CPU) from the rank's start
    #: and at each step's end, as the kernel counted the rank's threads
    cpu: dict[int, list[tuple[float, float, float]]]


@pytest.fixture(scope="module")
def live_run(tmp_path_factory):
    binary = find_prometheus()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but prometheus is not installed (apt-get install prometheus)")
        pytest.skip("prometheus is not installed (apt-get install -y prometheus)")
    work = tmp_path_factory.mktemp("live")
    base = free_port_block(WORLD)
    targets = [f"127.0.0.1:{base + r}" for r in range(WORLD)]
    env = {
        "TRACE_DIR": str(work / "trace"),
        "SYNCPACE_MONITOR_EVERY": str(EVERY),
        "SYNCPACE_METRICS_PORT": str(base),
        "SYNCPACE_METRICS_ADDR": "127.0.0.1",
    }
    rules = work / "syncpace-alerts.yml"
    rules.write_text(fast_rules(ALERTS.read_text()))
    with prometheus(binary, targets, work, SCRAPE_S, rules) as url:
        results = run_ranks(
            WORKER, WORLD, [str(STEPS), str(SLOW_FROM), str(SLOW_TO)], timeout=120, env=env
        )
        times = {step: t for step, t, _, _ in step_lines(results[1].stdout) if step >= 0}
        cpu = {r.rank: [line[1:] for line in step_lines(r.stdout)] for r in results}
        series = query_range(
            url,
            'syncpace_finding_cost_ratio{mode="straggler"}',
            min(times.values()) - 1,
            max(times.values()) + 1,
            SCRAPE_S,
        )
        steps_seen = query_range(
            url, "syncpace_steps_total", min(times.values()), max(times.values()) + 1, SCRAPE_S
        )
        bandwidth = {
            kind: query_range(
                url,
                f'syncpace_collective_{kind}_bytes_per_second{{op="all_reduce"}}',
                min(times.values()),
                max(times.values()) + 1,
                SCRAPE_S,
            )
            for kind in ("algbw", "busbw")
        }
        dashboard = {}
        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$job", ".*").replace("$host", ".*")
                expr = expr.replace("[2m]", "[2s]")  # the run lasts seconds, not hours
                dashboard[(panel["title"], target["refId"])] = query_range(
                    url, expr, min(times.values()), max(times.values()) + 1, SCRAPE_S
                )
        alerts = query_range(
            url, 'ALERTS{alertstate="firing"}', min(times.values()), max(times.values()) + 1,
            SCRAPE_S,
        )  # fmt: skip
    return LiveRun(
        results, times, series, steps_seen, work / "trace", dashboard, bandwidth, alerts, cpu
    )


def step_at(times: dict[int, float], t: float) -> int:
    """The job's step under way at wall time ``t`` (steps end at ``times[step]``)."""
    return min((s for s, end in times.items() if end >= t), default=max(times))


@pytest.mark.multirank  # the live job's ranks
def test_the_live_line_names_the_straggler_within_the_delay(live_run):
    results = live_run.results
    log = results[0].stderr
    bound = delay_bound()
    start = re.search(
        r"syncpace step (\d+): straggler: rank 1 \(node (\S+), local rank 1\) "
        r"late in (\d+)% of the last (\d+) steps, costing ([\d.]+)%",
        log,
    )
    stop = re.search(r"syncpace step (\d+): straggler over: rank 1 ", log)
    assert start and stop, log[-3000:]
    assert SLOW_FROM <= int(start.group(1)) <= SLOW_FROM + bound
    assert SLOW_TO <= int(stop.group(1)) <= SLOW_TO + bound
    assert start.group(2) == socket.gethostname()
    assert int(start.group(3)) >= 90
    assert len(re.findall(r"straggler: rank", log)) == 1  # nobody else, once
    for other in results[1:]:  # only the lowest rank logs
        assert "straggler:" not in other.stderr


@pytest.mark.multirank  # the live job's ranks
def test_every_rank_records_the_same_detections(live_run):
    trace_dir = live_run.trace_dir
    records = [
        [
            json.loads(line)
            for line in (trace_dir / f"rank-{r:05d}.monitor.jsonl").read_text().splitlines()
        ]
        for r in range(WORLD)
    ]
    assert all(r == records[0] for r in records)
    stragglers = [r for r in records[0] if r["kind"] == "straggler"]
    assert [(r["state"], r["rank"]) for r in stragglers] == [("start", 1), ("stop", 1)]
    since = stragglers[0]["since_step"]
    assert since <= SLOW_FROM + 3
    if since < SLOW_FROM:  # a change point before the plant: rank 1 was late there too
        hits = last_by_a_gap(load_trace(trace_dir), rank=1, steps=range(since, SLOW_FROM))
        detector = OnlineDetector(WORLD)
        assert all(sum(hits[:n]) > detector.k * n for n in range(1, len(hits) + 1)), hits
    # A window is collected LAG_STEPS after its last step: the final one never is.
    assert load_trace(trace_dir).meta[0]["monitor"]["windows"] == STEPS // EVERY - 1


def last_by_a_gap(trace, rank: int, steps: range) -> list[bool]:
    """Whether ``rank`` arrived last at each step (its first call, from the trace), by at
    least the detector's smallest gap as a share of the step's longest duration: what
    the detector's statistic counts. The statistic stays above zero from a change
    point only while such steps are more than ``k`` of those since."""
    first = trace.events.group_by("rank", "step").agg(pl.col("enter_ns").min())
    span = trace.steps.with_columns(d=pl.col("end_ns") - pl.col("start_ns"))
    hits = []
    for step in steps:
        arrive = dict(first.filter(pl.col("step") == step).select("rank", "enter_ns").iter_rows())
        ahead = max(t for r, t in arrive.items() if r != rank)
        longest = span.filter(pl.col("step") == step)["d"].max()
        gap = (arrive[rank] - ahead) / longest
        hits.append(gap >= OnlineDetector(WORLD).min_gap)
    return hits


@pytest.mark.multirank  # the live job's ranks
def test_prometheus_scraped_the_gauge_rise_and_clear(live_run):
    times, series, steps_seen = live_run.times, live_run.series, live_run.steps_seen
    by_rank = {s["metric"]["rank"]: [(float(t), float(v)) for t, v in s["values"]] for s in series}
    assert set(by_rank) == {str(r) for r in range(WORLD)}
    for rank in ("0", "2", "3"):
        assert max(v for _, v in by_rank[rank]) == 0.0
    raised = [t for t, v in by_rank["1"] if v > 0]
    assert raised, by_rank["1"]
    # plus the scrape: up to one interval until the next, one more of scrape jitter
    bound = delay_bound() + 2 * math.ceil(SCRAPE_S / 0.03)
    first, last = step_at(times, raised[0]), step_at(times, raised[-1])
    assert SLOW_FROM <= first <= SLOW_FROM + bound
    assert SLOW_TO - 5 <= last <= SLOW_TO + bound
    peak = max(v for _, v in by_rank["1"])
    assert 0.15 < peak < 0.7  # 20 ms of a 50–70 ms step waited for rank 1 alone
    labels = next(s["metric"] for s in series if s["metric"]["rank"] == "1")
    assert labels["host"] == socket.gethostname() and labels["local_rank"] == "1"
    final = {s["metric"]["rank"]: max(float(v) for _, v in s["values"]) for s in steps_seen}
    assert all(v >= STEPS - 10 for v in final.values()), final


@pytest.mark.multirank  # the live job's ranks
def test_every_query_of_the_example_dashboard_runs_and_finds_series(live_run):
    dashboard = live_run.dashboard
    assert len(dashboard) >= 8
    empty = [key for key, result in dashboard.items() if not result]
    assert empty == [], f"dashboard queries with no series on a live job: {empty}"


@pytest.mark.multirank  # the live job's ranks
def test_bus_bandwidth_is_the_algorithm_bandwidth_times_the_ops_bus_factor(live_run):
    """nccl-tests' definition: an all-reduce over n ranks moves 2(n-1)/n of its bytes
    over each rank's link."""
    bandwidth = live_run.bandwidth
    series = {
        kind: {s["metric"]["rank"]: dict(s["values"]) for s in result}
        for kind, result in bandwidth.items()
    }
    assert set(series["busbw"]) == {str(r) for r in range(WORLD)}
    for rank, alg in series["algbw"].items():
        bus = series["busbw"][rank]
        common = sorted(set(alg) & set(bus))
        assert len(common) >= 3
        for t in common:
            assert float(bus[t]) == pytest.approx(float(alg[t]) * 2 * (WORLD - 1) / WORLD)


@pytest.mark.multirank  # the live job's ranks
def test_the_example_straggler_alert_fires_for_the_straggler_alone_and_resolves(live_run):
    times, alerts = live_run.times, live_run.alerts
    firing: dict[str, dict[str, list[float]]] = {}
    for s in alerts:
        name, rank = s["metric"]["alertname"], s["metric"].get("rank", "")
        firing.setdefault(name, {}).setdefault(rank, []).extend(float(t) for t, _ in s["values"])
    assert set(firing.get("SyncpaceStraggler", {})) == {"1"}, firing
    # while the job steps (its teardown, every rank at once, is left out): a rank that
    # keeps stepping is never stalled (the rule's window: 10 s here)
    steady = times[STEPS - 10]
    stalled = firing.get("SyncpaceRankStalled", {})
    early = {r: [t for t in ts if t <= steady] for r, ts in stalled.items()}
    assert not any(early.values()), early
    stamps = sorted(firing["SyncpaceStraggler"]["1"])
    first, last = step_at(times, stamps[0]), step_at(times, stamps[-1])
    # the gauge's delay, then the rule's ``for`` and one evaluation, in ~30 ms steps
    bound = delay_bound() + 2 * math.ceil(SCRAPE_S / 0.03) + math.ceil(2 * FOR_S / 0.03)
    assert SLOW_FROM <= first <= SLOW_FROM + bound, (first, bound)
    assert last <= SLOW_TO + bound, (last, bound)
    assert max(times) - last > 5, "the alert must resolve before the run ends"


@pytest.mark.multirank  # the live job's ranks
def test_the_example_cpu_alert_fires_only_where_the_kernel_saw_a_rank_starved(live_run):
    """Ranks that sleep and wake together wait most of their short runs, at no cost
    worth a page; on a busy machine they can be starved for real. The truth is the
    kernel's own count of each rank's threads (read by the job itself, apart from the
    exporter): wherever the alert fired while the job stepped, the rule's two
    conditions held there over its window, give or take the scrapes' timing."""
    times, cpu = live_run.times, live_run.cpu
    steady = times[STEPS - 10]
    for s in live_run.alerts:
        if s["metric"]["alertname"] != "SyncpaceCpuStarved":
            continue
        rank = int(s["metric"]["rank"])
        for stamp in (float(t) for t, _ in s["values"]):
            if stamp <= steady:
                assert starved_window(cpu[rank], stamp) is not None, (rank, stamp)


#: The rule's window once minutes are seconds (``fast_rules``).
CPU_WINDOW_S = 5.0


def starved_window(series: list[tuple[float, float, float]], stamp: float) -> tuple | None:
    """A window over which the kernel's counts meet the rule (waiting over half the time
    runnable, and over a quarter of a second every second): ending at most three
    scrapes before ``stamp`` (the evaluation, and the sample it read), lasting the
    rule's window within a scrape, or from the rank's start where that is later (what
    ``rate`` does with a counter younger than its window). ``None`` where none does."""
    t, run, wait = (np.array(c) for c in zip(*series, strict=True))
    for end in stamp - np.arange(0.0, 3 * SCRAPE_S + 1e-9, 0.05):
        for span in CPU_WINDOW_S + np.arange(-SCRAPE_S, SCRAPE_S + 1e-9, 0.05):
            start = max(end - span, t[0])
            if end > t[-1] or end - start < 2 * SCRAPE_S:
                continue
            d_run = np.interp(end, t, run) - np.interp(start, t, run)
            d_wait = np.interp(end, t, wait) - np.interp(start, t, wait)
            if d_wait / (end - start) > 0.25 and d_wait > 0.5 * (d_run + d_wait):
                return start, end, d_wait / (end - start), d_wait / (d_run + d_wait)
    return None


def test_the_alert_rules_pass_promtool_and_its_rule_tests():
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but promtool is not installed (apt-get install prometheus)")
        pytest.skip("promtool is not installed (apt-get install -y prometheus)")
    check = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True,
                           text=True, timeout=60)  # fmt: skip
    assert check.returncode == 0 and "SUCCESS: 6 rules found" in check.stdout, check
    tests = Path(__file__).with_name("alert_rules.test.yml")
    run = subprocess.run([promtool, "test", "rules", tests.name], capture_output=True,
                         text=True, timeout=60, cwd=tests.parent)  # fmt: skip
    assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr
