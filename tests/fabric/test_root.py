"""The real fabric, as root: bring-up, rates, oversubscription, teardown, jobs, faults.

Each test builds fabrics with unique names and removes them in ``finally``; the
fixture checks that nothing of them is left (namespaces, links, qdiscs).
Rates are low (50 Mbit/s) so that the shapers, not the two CPUs, are measured.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from syncpace.fabric import build_spec, bulk
from syncpace.fabric.backend import SystemBackend
from syncpace.fabric.counters import sample
from syncpace.fabric.faults import Context, Scheduler, parse_fault
from syncpace.fabric.lifecycle import down, existing_namespaces, up
from syncpace.fabric.runner import RunOptions, run_job
from syncpace.fabric.state import STATE_DIR_ENV, load_state
from syncpace.trace.schema import LINKS_FILE

pytestmark = pytest.mark.root

HERE = Path(__file__).resolve().parent
RATE = 50_000_000
TOLERANCE = 0.10


def spec(**kw):
    values = dict(leaves=2, hosts=2, host_rate="50mbit", oversubscription=2.0)
    values.update(kw)
    return build_spec(values)


def leftovers(name: str) -> list[str]:
    """Anything of fabric ``name`` still on the machine, as seen from the root namespace."""
    found = [f"netns {ns}" for ns in existing_namespaces(SystemBackend()) if ns.startswith(name)]
    found += [f"/run/netns/{p.name}" for p in Path("/run/netns").glob(f"{name}-*")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=10).stdout
    found += [f"link {line}" for line in links.splitlines() if name in line]
    qdiscs = subprocess.run(["tc", "qdisc"], capture_output=True, text=True, timeout=10).stdout
    found += [f"qdisc {line}" for line in qdiscs.splitlines() if "tbf" in line or name in line]
    return found


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("fabric-state")
    previous = os.environ.get(STATE_DIR_ENV)
    os.environ[STATE_DIR_ENV] = str(path)
    yield path
    if previous is None:
        os.environ.pop(STATE_DIR_ENV, None)
    else:
        os.environ[STATE_DIR_ENV] = previous


@pytest.fixture(scope="module")
def fabric(state_dir):
    """One 2-leaf x 2-host fabric, 50 Mbit/s host links, 1:2 oversubscribed uplinks."""
    backend = SystemBackend()
    before = leftovers("sp")
    state = up(spec(), backend, state_dir)
    try:
        yield state
    finally:
        down(state, backend)
        assert leftovers(state.name) == []
        assert leftovers("sp") == before


def test_fabric_comes_up_with_addresses_and_shapers(fabric):
    backend = SystemBackend()
    assert set(fabric.fabric.namespaces) <= existing_namespaces(backend)
    for host in fabric.fabric.hosts:
        out = backend.run(("ip", "-n", host.namespace, "-4", "-o", "addr", "show", "eth0")).stdout
        assert f"inet {host.address}/24" in out
    rows = sample(fabric.fabric, backend)
    assert len(rows) == 2 * len(fabric.fabric.links)
    assert {r.rate_bps for r in rows} == {RATE}
    assert load_state(fabric.name).complete


@pytest.mark.parametrize("pair", [("h0", "h1"), ("h0", "h3"), ("h3", "h0")])
def test_pairwise_throughput_matches_the_configured_rate(fabric, pair):
    (result,) = bulk.measure(fabric.fabric, [pair], seconds=2.0)
    print(f"{pair[0]}->{pair[1]}: {result.bps / 1e6:.2f} Mbit/s of {RATE / 1e6:g}")
    assert abs(result.bps - RATE) / RATE <= TOLERANCE


def test_two_cross_leaf_flows_share_the_oversubscribed_uplink(fabric):
    backend = SystemBackend()
    before = {(r.src, r.dst): r.bytes for r in sample(fabric.fabric, backend)}
    results = bulk.measure(fabric.fabric, [("h0", "h2"), ("h1", "h3")], seconds=3.0)
    after = {(r.src, r.dst): r.bytes for r in sample(fabric.fabric, backend)}
    shares = [r.bps / RATE for r in results]
    print("cross-leaf flows through one 50 Mbit/s uplink:", [f"{s:.2f}" for s in shares])
    assert all(0.35 <= s <= 0.65 for s in shares)  # about half each (one FIFO, TCP)
    assert abs(sum(shares) - 1.0) <= TOLERANCE
    # both flows crossed the leaf0 uplink, and the counters saw them there
    uplink = after[("leaf0", "spine")] - before[("leaf0", "spine")]
    assert uplink >= 0.95 * sum(r.bytes for r in results)


def test_a_fixed_rate_flow_holds_its_rate_and_tcp_gets_the_rest(fabric):
    """UDP at 30 Mbit/s into h1 beside a greedy TCP flow into h1: the UDP flow keeps its
    rate (it never backs off) and TCP gets what is left of the 50 Mbit/s link."""
    udp = bulk.start_flows(fabric.fabric, [("h0", "h1")], 3.5, 5501, rate_bps=30_000_000)
    try:
        (tcp,) = bulk.measure(fabric.fabric, [("h3", "h1")], seconds=3.0)
        (fixed,) = [flow.result() for flow in udp]
    finally:
        for flow in udp:
            flow.stop()
    print(f"into h1: UDP {fixed.bps / 1e6:.2f} Mbit/s (set 30), TCP {tcp.bps / 1e6:.2f}")
    assert abs(fixed.bps - 30e6) / 30e6 <= TOLERANCE
    assert abs(tcp.bps - (RATE - 30e6)) / (RATE - 30e6) <= 2 * TOLERANCE


def measure_under_fault(fabric, fault: str, pair: tuple[str, str], log: Path, seconds: float = 2.0):
    """A greedy flow of ``seconds`` over ``pair`` once ``fault`` is in force (the
    scheduler logs its start), then the fault undone; the flow's result."""
    ctx = Context(fabric=fabric.fabric, backend=SystemBackend(), launcher_pids=list)
    scheduler = Scheduler([parse_fault(fault)], ctx, log)
    scheduler.start()
    try:
        deadline = time.monotonic() + 10
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        (result,) = bulk.measure(fabric.fabric, [pair], seconds=seconds)
    finally:
        scheduler.stop()
    return result


def test_a_fixed_rate_flow_fault_takes_its_share_and_ends(fabric, tmp_path):
    fault = "flow h0->h1 30mbit at=0 for=4"
    left = measure_under_fault(fabric, fault, ("h3", "h1"), tmp_path / "faults.jsonl")
    print(f"TCP into h1 beside a 30 Mbit/s flow fault: {left.bps / 1e6:.2f} Mbit/s")
    assert abs(left.bps - (RATE - 30e6)) / (RATE - 30e6) <= 2 * TOLERANCE
    log = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in log] == ["start", "end"]
    assert log[0]["detail"].startswith("flow (UDP at 30000000 bit/s) started on port")
    assert log[1]["detail"] == "flow stopped"


def test_a_rate_fault_changes_the_link_and_is_undone(fabric, tmp_path):
    fault = "rate h0-leaf0 10mbit at=0"
    # 4 s: at 10 Mbit/s the flow's start-up (connect, slow start) is a tenth of 2 s
    slow = measure_under_fault(fabric, fault, ("h0", "h1"), tmp_path / "faults.jsonl", 4.0)
    (fast,) = bulk.measure(fabric.fabric, [("h0", "h1")], seconds=2.0)
    print(f"rate fault: {slow.bps / 1e6:.2f} Mbit/s at 10mbit, {fast.bps / 1e6:.2f} after")
    assert abs(slow.bps - 10e6) / 10e6 <= TOLERANCE
    assert abs(fast.bps - RATE) / RATE <= TOLERANCE
    log = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["detail"]) for r in log] == [
        ("start", "rate 10000000 bit/s"),
        ("end", f"rate {RATE} bit/s"),
    ]


class _CrashingBackend(SystemBackend):
    def __init__(self, crash_at: int) -> None:
        super().__init__()
        self.count = 0
        self.crash_at = crash_at

    def run(self, argv, *, check=True):
        if self.count == self.crash_at:
            os._exit(9)  # like a SIGKILL: no rollback, no cleanup
        self.count += 1
        return super().run(argv, check=check)


def _crash_up(state_dir: str, name: str, crash_at: int) -> None:
    up(spec(name=name), _CrashingBackend(crash_at), Path(state_dir))


@pytest.mark.parametrize("crash_at", [3, 20])
def test_down_after_a_crash_half_way_through_up_leaves_nothing(state_dir, crash_at):
    name = f"sc{os.getpid() % 10000}{crash_at}"[:8]
    child = multiprocessing.get_context("fork").Process(
        target=_crash_up, args=(str(state_dir), name, crash_at)
    )
    child.start()
    child.join(timeout=30)
    try:
        assert child.exitcode == 9
        state = load_state(name, state_dir)
        assert not state.complete and leftovers(name) != []
    finally:
        down(load_state(name, state_dir), SystemBackend())
    assert leftovers(name) == []
    assert not (state_dir / f"{name}.json").exists()


def _traced_run(
    state_dir, out: Path, command: list[str], *extra: str
) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{STATE_DIR_ENV: str(state_dir)})
    cli = [sys.executable, "-m", "syncpace", "fabric", "run", "--quiet", "--trace"]
    cli += ["--out", str(out), "--host-rate", "50mbit", "--oversubscription", "2", *extra]
    return subprocess.run(
        [*cli, "--", *command], env=env, capture_output=True, text=True, timeout=240
    )


def test_four_rank_gloo_job_cross_leaf_all_reduce_is_slower(state_dir, tmp_path):
    """torchrun on every host; the trace shows the uplink-sharing all-reduces slower."""
    out = tmp_path / "run"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1"]
    proc = _traced_run(
        state_dir,
        out,
        [*torchrun, str(HERE / "collectives.py"), str(out / "timings.json")],
        "--timeout",
        "180",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert leftovers("sp") == [] or all(state_dir.name not in x for x in leftovers("sp"))

    from syncpace.trace import load_trace

    trace = load_trace(out)
    assert sorted(trace.meta) == [0, 1, 2, 3] and trace.missing_ranks == []
    assert {m["host"] for m in trace.meta.values()} == {"h0", "h1", "h2", "h3"}
    leaf = {r: m["node_rank"] // 2 for r, m in trace.meta.items()}
    groups = {}
    for meta in trace.meta.values():
        for name, group in meta["groups"].items():
            if len(group["ranks"]) == 2:
                groups[name] = "intra" if len({leaf[r] for r in group["ranks"]}) == 1 else "cross"
    transfer = (
        trace.events.filter(pl.col("op") == "all_reduce", pl.col("group").is_in(list(groups)))
        .group_by("group", "seq")
        .agg((pl.col("exit_ns").max() - pl.col("enter_ns").max()).alias("transfer_ns"))
        .with_columns(kind=pl.col("group").replace_strict(groups))
    )
    median = {
        kind: transfer.filter(pl.col("kind") == kind)["transfer_ns"].median() / 1e6
        for kind in ("intra", "cross")
    }
    print(f"all-reduce 1 MiB, traced median transfer: {median}")
    assert median["cross"] > 1.5 * median["intra"]
    # the job's own clock agrees with the trace
    own = json.loads((out / "timings.json").read_text())
    intra = statistics.median(t for r in own for t in r["intra"])
    cross = statistics.median(t for r in own for t in r["cross"])
    assert cross > 1.5 * intra
    # link counters were sampled into the run directory
    links = pl.read_ipc_stream(out / LINKS_FILE)
    assert set(links["link"]) == {
        "h0-leaf0",
        "h1-leaf0",
        "h2-leaf1",
        "h3-leaf1",
        "leaf0-spine",
        "leaf1-spine",
    }
    assert links["time_ns"].n_unique() >= 2
    up0 = links.filter(pl.col("src") == "leaf0", pl.col("dst") == "spine")["bytes"]
    assert up0.is_sorted() and up0[-1] - up0[0] > 5 * 2**20


def _run(state, out, command, faults, timeout=90.0, env=None, grace=5.0):
    return run_job(
        state,
        command,
        out,
        SystemBackend(),
        RunOptions(timeout_s=timeout, grace_s=grace, faults=[parse_fault(f) for f in faults]),
        env,
        echo=None,
    )


#: ~0.3 s a step: the steps outlast the outage (8-10 s after the launch) by seconds
#: however slowly the ranks start; before the outage is the start's own question
FLAP_STEPS = 40


def test_a_link_flap_during_a_job_is_survived_or_reported(fabric, tmp_path):
    command = [sys.executable, str(HERE / "steps_job.py"), str(tmp_path), str(FLAP_STEPS), "1"]
    start = time.monotonic()
    result = _run(fabric, tmp_path, command, ["flap h1-leaf0 at=8 for=2"], timeout=90)
    assert time.monotonic() - start < 90 + 15
    print(f"flap: {result.reason} after {result.elapsed_s:.1f} s {result.returncodes}")
    # TCP rides out a 2 s outage well inside gloo's 30 s timeout: the job completes
    assert result.reason == "completed", result.reason
    assert result.returncodes == {f"h{i}": 0 for i in range(4)}
    log = [json.loads(x) for x in (tmp_path / "fabric-faults.jsonl").read_text().splitlines()]
    assert [(r["phase"], r["detail"]) for r in log] == [("start", "link down"), ("end", "link up")]
    # down from when the link was down (its commands returned), up from when asked
    down, up = log[0]["applied_ns"], log[1]["time_ns"]
    assert log[0]["time_ns"] <= down and up <= log[1]["applied_ns"]
    spans = json.loads((tmp_path / "step-spans.json").read_text())
    assert len(spans) == FLAP_STEPS
    assert spans[0][0] < down and up < spans[-1][1], "the outage fell outside the steps"
    # no step completes while the link is down (one in flight may have sent its share
    # already), so the outage is one long step
    stalled = down + 0.6e9
    assert not [e for _, e in spans if stalled < e < up], "steps went on during the outage"
    assert max(e - b for b, e in spans) >= up - stalled


def test_killing_a_rank_ends_the_job_within_the_grace(fabric, tmp_path):
    command = [sys.executable, str(HERE / "steps_job.py"), str(tmp_path), "400", "1"]
    result = _run(fabric, tmp_path, command, ["kill rank=2 at=4"], timeout=60, grace=3)
    print(f"kill: {result.reason} after {result.elapsed_s:.1f} s {result.returncodes}")
    assert not result.timed_out and result.elapsed_s < 30
    assert result.returncodes["h2"] == -9
    assert result.returncode != 0


def test_a_cpu_straggler_is_slower(fabric, tmp_path):
    busy = (
        "import os, time, json; t = time.process_time(); s = time.perf_counter(); x = 0\n"
        "while time.process_time() - t < 0.5: x += 1\n"
        "open(os.path.join(os.environ['OUT'], os.environ['RANK']), 'w')"
        ".write(json.dumps(time.perf_counter() - s))"
    )
    env = dict(os.environ, OUT=str(tmp_path))
    result = _run(fabric, tmp_path, [sys.executable, "-c", busy], ["straggler h3 0.1"], env=env)
    assert result.returncode == 0, result
    wall = {r: json.loads((tmp_path / str(r)).read_text()) for r in range(4)}
    print("straggler wall times for 0.5 s of CPU:", wall)
    # A cap of 0.1 CPU makes 0.5 s of CPU take at least 5 s of wall time, however loaded
    # the machine is; the uncapped hosts may be slowed by load but never capped.
    assert wall[3] >= 0.9 * 0.5 / 0.1
    assert wall[3] > max(wall[0], wall[1], wall[2])
    assert not list(Path("/sys/fs/cgroup").glob(f"*/syncpace-{fabric.name}"))
