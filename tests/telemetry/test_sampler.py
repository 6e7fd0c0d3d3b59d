"""The host sampler: its sources on fake host trees with the real layout, its change
encoding, its file as the reader loads it, and on this machine's real kernel."""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from syncpace.analysis.hostcounters import host_metrics
from syncpace.capture.clock import LocalClock
from syncpace.telemetry import TelemetryConfig, cpustats, netstats
from syncpace.telemetry.sampler import HostSampler, start_host_sampler
from syncpace.trace import schema
from syncpace.trace.reader import load_host_files
from sysfs_trees import (
    CGROUP,
    JOB_PID,
    switch_host,
    two_socket_host,
    write_cpu,
    write_netdev,
    write_netstat,
    write_snmp,
)


class FakeQdiscs:
    def __init__(self) -> None:
        self.roots: dict[int, netstats.QdiscStats] = {}

    def dump(self) -> dict[int, netstats.QdiscStats]:
        return dict(self.roots)

    def close(self) -> None:
        pass


def tbf(bytes_: int, packets: int, drops: int, rate_bps: int | None = 50_000_000):
    return netstats.QdiscStats("tbf", bytes_, packets, drops, 0, 0, 0, 0, rate_bps)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000_000

    def __call__(self) -> int:
        return self.t


@pytest.fixture
def host(tmp_path):
    tree = switch_host(tmp_path / "root")
    write_netdev(tree, {"lo": {}, "eth0": {}, "eth1": {}, "eth2": {}})
    write_snmp(tree, {"OutSegs": 100, "RetransSegs": 0})
    write_netstat(tree, {"TCPTimeouts": 0})
    return tree


def _sampler(tmp_path, tree, clock, qdiscs, **kw):
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    kw.setdefault("job_pid", JOB_PID)
    return HostSampler(
        run, "node-a", root=tree.root, now=clock, qdisc_dumper=qdiscs, use_nvml=False, **kw
    )


def test_ticks_are_written_where_values_change(tmp_path, host):
    clock, qdiscs = Clock(), FakeQdiscs()
    qdiscs.roots[2] = tbf(0, 0, 0)
    sampler = _sampler(tmp_path, host, clock, qdiscs, interval_s=0.01)
    assert sampler.meta["nics"][0]["rate_source"] == "root tbf rate"
    tx = 0
    for tick in range(10):
        if tick >= 5:  # the link carries 1 MB per tick from tick 5 on
            tx += 1_000_000
        eth0 = {"tx_bytes": tx, "tx_packets": tx // 1000}
        write_netdev(host, {"eth0": eth0, "eth1": {}, "eth2": {}})
        write_snmp(host, {"OutSegs": 100 + tick * 10, "RetransSegs": 3 if tick >= 7 else 0})
        sampler.step(slow=True)
        clock.t += 10_000_000
    sampler.close()
    counters, hosts = load_host_files(tmp_path / "run", [])
    meta = hosts["node-a"]
    assert meta["finished"] and meta["ticks"] == 10 and meta["errors"] == {}
    tx_rows = counters.filter(pl.col("device") == "eth0", pl.col("counter") == "tx_bytes")
    # ticks 0..4 unchanged at 0: their two ends, then every change, then nothing to add
    times = [(t - 1_000_000_000) // 10_000_000 for t in tx_rows["time_ns"]]
    assert times == [0, 4, 5, 6, 7, 8, 9]
    assert tx_rows["value"].to_list() == [0, 0, 1e6, 2e6, 3e6, 4e6, 5e6]
    retrans = counters.filter(pl.col("counter") == "RetransSegs")
    assert [(t - 1_000_000_000) // 10_000_000 for t in retrans["time_ns"]] == [0, 6, 7, 9]
    rx = counters.filter(pl.col("device") == "eth0", pl.col("counter") == "rx_bytes")
    assert rx["value"].to_list() == [0, 0]  # first and last sample only
    rate = counters.filter(pl.col("device") == "eth0", pl.col("counter") == "link_rate_bps")
    assert set(rate["value"]) == {50_000_000}
    # 1 MB per 10 ms is 800 Mbit/s: 16 times the 50 Mbit/s shaper, which no link carries:
    # every window that saw it is left out as unmeasurable, none is shown as a peak
    nic = host_metrics(counters, hosts, {}, window_ns=10_000_000).nic
    row = nic.filter(pl.col("device") == "eth0", pl.col("direction") == "tx").row(0, named=True)
    assert row["bytes"] == 5_000_000
    assert row["util_peak_sample"] is None
    assert row["util_unmeasurable_windows"] == 5


def test_unwritable_facts_are_said_once_and_the_counters_still_written(
    tmp_path, host, monkeypatch, caplog
):
    def full(path, meta):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("syncpace.telemetry.sampler.write_host_meta", full)
    clock = Clock()
    with caplog.at_level(logging.WARNING, logger="syncpace"):
        sampler = _sampler(tmp_path, host, clock, FakeQdiscs())  # writes its facts at start
        sampler.step(slow=True)
        clock.t += 10_000_000
        sampler.step(slow=True)
        sampler.close()  # and again at the end
    facts = tmp_path / "run" / "host-node-a.meta.json"
    assert [r.getMessage() for r in caplog.records] == [
        f"syncpace: cannot write {facts}: [Errno 28] No space left on device"
    ]
    rows = pl.read_ipc_stream(tmp_path / "run" / "host-node-a.counters.arrow")
    assert rows.height > 0 and sampler.meta["finished"]


def test_a_throttled_cgroup_and_busy_cpus_are_measured(tmp_path, host):
    """Ten ticks 10 ms apart: the sampler's cgroup runs at a quota of 0.05 CPU and is
    throttled in 8 of every 10 scheduling periods, 9.5 ms of every 10; the host's two
    CPUs are three-quarters busy and tasks wait for a CPU 2 ms of every 10."""
    clock, qdiscs = Clock(), FakeQdiscs()
    sampler = _sampler(tmp_path, host, clock, qdiscs, interval_s=0.01)
    assert sampler.meta["cgroup"] == {"available": True, "path": f"/{CGROUP}", "version": 1}
    for tick in range(10):
        busy, idle = 3 * tick, tick  # clock ticks of the two CPUs together
        write_cpu(
            host,
            {"user": busy, "idle": idle},
            pressure_us=2_000 * tick,
            periods=10 * tick,
            throttled=8 * tick,
            throttled_ns=9_500_000 * tick,
            usage_ns=500_000 * tick,
            quota_us=5_000,
            job_run_ns=500_000 * tick,
            job_wait_ns=9_500_000 * tick,
        )
        sampler.step(slow=True)
        clock.t += 10_000_000
    sampler.close()
    counters, hosts = load_host_files(tmp_path / "run", [])
    assert hosts["node-a"]["errors"] == {}
    cpu = host_metrics(counters, hosts, {}).hosts["node-a"]["cpu"]
    assert cpu["quota_cpus"] == 0.05
    assert cpu["throttled_periods_share"] == pytest.approx(0.8)
    assert cpu["throttled_share"] == pytest.approx(0.95)
    assert cpu["busy_share"] == pytest.approx(0.75)
    assert cpu["pressure_share"] == pytest.approx(0.2)
    assert cpu["cgroup"] == f"/{CGROUP}"
    assert cpu["job_wait_share"] == pytest.approx(0.95)  # of the time its threads were runnable


def test_the_real_cgroup_of_this_process_is_found():
    """On this machine's kernel: the sampler's own cgroup CPU controller and its quota
    (-1: unlimited, or a positive number of thousandths of a CPU)."""
    cgroup = cpustats.CgroupCpu("/")
    values = cgroup.read()
    assert len(values) == len(cgroup.series) == 4
    assert values[0] is not None and values[0] >= 0  # nr_periods
    quota = cpustats.CgroupQuota(cgroup).read()[0]
    assert quota == -1 or (quota is not None and quota > 0)
    own = Path("/proc/self/cgroup").read_text()
    assert cgroup.name.lstrip("/") in own


def test_the_cgroup_is_found_through_a_parent_outside_a_fresh_sysfs(tmp_path):
    """A process started by ``ip netns exec`` sees a sysfs without the cgroup
    filesystems, and in a container the first process's root may be unreadable: the
    cgroup is found as the parent that started it sees it."""
    root = tmp_path
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text("2:cpuacct:/fab/h1\n1:cpu:/fab/h1\n0::/\n")
    (root / "proc/self/status").write_text("Name:\tpython\nPPid:\t77\n")
    (root / "proc/77").mkdir()
    (root / "proc/77/status").write_text("Name:\tlauncher\nPPid:\t40\n")
    (root / "proc/40").mkdir()
    (root / "proc/40/status").write_text("Name:\trunner\nPPid:\t1\n")
    (root / "sys/fs/cgroup").mkdir(parents=True)  # the fresh sysfs: nothing mounted
    (root / "proc/77/root/sys/fs/cgroup").mkdir(parents=True)  # the launcher's: alike
    mounts = root / "proc/40/root/sys/fs/cgroup"
    cpu, acct = mounts / "cpu/fab/h1", mounts / "cpuacct/fab/h1"
    cpu.mkdir(parents=True)
    acct.mkdir(parents=True)
    (cpu / "cpu.stat").write_text("nr_periods 10\nnr_throttled 7\nthrottled_time 7000000\n")
    (cpu / "cpu.cfs_quota_us").write_text("30000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    (acct / "cpuacct.usage").write_text("3000000\n")
    cgroup = cpustats.CgroupCpu(root)
    assert (cgroup.path, cgroup.version, cgroup.name) == (cpu, 1, "/fab/h1")
    assert cgroup.read() == [10, 7, 7_000_000, 3_000_000]
    assert cpustats.CgroupQuota(cgroup).read() == [300]
    # no parent outside: not found, said
    (root / "proc/self/status").write_text("Name:\tpython\nPPid:\t1\n")
    with pytest.raises(FileNotFoundError, match="no cgroup CPU controller"):
        cpustats.CgroupCpu(root)


@pytest.mark.root
def test_a_capped_cgroup_is_measured_from_inside_a_network_namespace(tmp_path):
    """On this machine's kernel, as the fabric starts a host's job: a process in a
    cgroup capped at a tenth of a CPU, started in a network namespace by ``ip netns
    exec``, burning CPU for half a second; its sampler source finds the cgroup and
    counts it throttled."""
    from syncpace.fabric import cgroup as cg

    name = "t" + os.urandom(3).hex()
    path = cg.base_dir(name)
    cg.create(path)
    subprocess.run(["ip", "netns", "add", name], check=True)
    probe = textwrap.dedent(
        """
        import json, time
        from syncpace.telemetry import cpustats
        cgroup = cpustats.CgroupCpu("/")
        before = cgroup.read()
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            pass
        after = cgroup.read()
        quota = cpustats.CgroupQuota(cgroup).read()[0]
        print(json.dumps({"name": cgroup.name, "before": before, "after": after, "quota": quota}))
        """
    )
    try:
        cg.set_cpu_limit(path, 0.1)
        procs = cg.procs_file(path)
        proc = subprocess.run(
            ["ip", "netns", "exec", name, sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=60,
            # the child joins the cgroup before it execs: the job inherits it
            preexec_fn=lambda: procs.write_text(str(os.getpid())),
        )
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
        cg.remove(path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    print(got)
    assert got["name"].endswith(f"syncpace-{name}")
    assert got["quota"] == 100
    periods, throttled = (got["after"][i] - got["before"][i] for i in (0, 1))
    # half a second of 100 ms periods, throttled in each: the cap held it
    assert periods >= 4 and throttled >= periods // 2


def test_speed_is_the_rate_without_a_shaper_and_a_setting_beats_both(tmp_path, host):
    clock, qdiscs = Clock(), FakeQdiscs()
    sampler = _sampler(tmp_path, host, clock, qdiscs, link_rates={"eth2": 5_000_000})
    sampler.step(slow=True)
    sampler.close()
    counters, hosts = load_host_files(tmp_path / "run", [])
    rates = (
        counters.filter(pl.col("counter") == "link_rate_bps")
        .group_by("device")
        .agg(pl.col("value").first())
    )
    speed = 100_000_000_000  # the NICs' 100000 Mb/s
    assert dict(rates.iter_rows()) == {"eth0": speed, "eth1": speed, "eth2": 5_000_000}
    assert [n["rate_source"] for n in hosts["node-a"]["nics"]] == ["speed", "speed", "configured"]
    assert [n["name"] for n in hosts["node-a"]["nics"]] == ["eth0", "eth1", "eth2"]  # not lo


def test_qdisc_counters_kept_in_32_bits_are_unwrapped(tmp_path, host):
    qdiscs = FakeQdiscs()
    source = netstats.Qdisc(netstats.discover_nics(host.root, "eth0"), qdiscs)
    drops = source.series.index(("qdisc", "eth0", -1, "drops"))
    seen = []
    for value in (2**32 - 10, 2**32 - 1, 5, 20):
        qdiscs.roots[2] = tbf(0, 0, value)
        seen.append(source.read()[drops])
    assert seen == [2**32 - 10, 2**32 - 1, 2**32 + 5, 2**32 + 20]


def _rtattr(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def test_a_netlink_qdisc_message_is_parsed_as_the_kernel_lays_it_out():
    ratespec = struct.pack("=BBHhHI", 0, 1, 0, -1, 0, 6_250_000)  # 50 Mbit/s in bytes/s
    tbf_qopt = ratespec + ratespec + struct.pack("=III", 312_500, 100, 0)
    stats2 = _rtattr(1, struct.pack("=QIxxxx", 123_456_789, 4321)) + _rtattr(
        3, struct.pack("=5I", 7, 9000, 55, 2, 66)
    )
    attrs = _rtattr(1, b"tbf\0") + _rtattr(2, _rtattr(1, tbf_qopt)) + _rtattr(7, stats2)
    tcm = struct.pack("=BxxxiIII", 0, 3, 0x80010000, 0xFFFFFFFF, 2)
    body = tcm + attrs
    message = struct.pack("=IHHII", 16 + len(body), 36, 2, 1, 0) + body
    ifindex, parent, stats = netstats.parse_qdisc_message(message, 0, len(message))
    assert (ifindex, parent) == (3, 0xFFFFFFFF)
    assert stats == netstats.QdiscStats("tbf", 123_456_789, 4321, 55, 66, 2, 9000, 7, 50_000_000)


def test_the_netlink_dump_agrees_with_tc():
    """This machine's root qdiscs, read over netlink, against ``tc -s -j qdisc show``
    read just before and just after (their counters only grow)."""
    tc = ["tc", "-s", "-j", "qdisc", "show"]
    before = {q["dev"]: q for q in json.loads(subprocess.check_output(tc)) if q.get("root")}
    dumper = netstats.NetlinkQdiscs()
    ours = dumper.dump()
    dumper.close()
    after = {q["dev"]: q for q in json.loads(subprocess.check_output(tc)) if q.get("root")}
    index = {p.name: int((p / "ifindex").read_text()) for p in Path("/sys/class/net").iterdir()}
    assert before and set(ours) >= {index[d] for d in before}
    for dev, q in before.items():
        mine = ours[index[dev]]
        assert mine.kind == q["kind"]
        assert q["bytes"] <= mine.bytes <= after[dev]["bytes"]
        assert q["packets"] <= mine.packets <= after[dev]["packets"]
        assert q["drops"] <= mine.drops <= after[dev]["drops"]


def test_infiniband_port_and_hardware_counters(tmp_path):
    tree = two_socket_host(tmp_path)
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    for name, value in (("port_xmit_data", 1000), ("port_xmit_wait", 7), ("symbol_error", 0)):
        (port / "counters" / name).write_text(f"{value}\n")
    (port / "hw_counters" / "np_ecn_marked_roce_packets").write_text("3\n")
    (port / "hw_counters" / "lifespan").write_text("10\n")
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    ib = netstats.Infiniband(tree.root)
    assert [p.device for p in ib.ports] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    values = dict(zip(ib.series, ib.read(), strict=True))
    assert values[("ib", "mlx5_0", 1, "port_xmit_wait")] == 7
    assert values[("ib_hw", "mlx5_0", 1, "np_ecn_marked_roce_packets")] == 3
    assert values[("ib", "mlx5_0", 1, "rate_bps")] == 200_000_000_000
    assert values[("ib", "mlx5_0", 1, "state")] == 4
    assert values[("ib", "mlx5_1", 1, "state")] is None  # no such file there
    assert ("ib_hw", "mlx5_0", 1, "lifespan") not in values
    assert ib.ports[0].pci == "0000:1c:00.0"
    assert netstats.parse_ib_rate("25 Gb/sec (1X EDR)") == 25_000_000_000


def test_a_host_without_the_sources_fails_open(tmp_path):
    sampler = HostSampler(tmp_path, "bare", root=tmp_path / "empty", use_nvml=False)
    sampler.step(slow=True)
    sampler.close()
    meta = json.loads((tmp_path / "host-bare.meta.json").read_text())
    assert meta["finished"] and {"snmp", "netstat"} <= set(meta["errors"])
    assert "No such file" in meta["errors"]["snmp"]


def test_host_names_are_made_safe_for_file_names():
    assert schema.host_stem("node-1.cluster") == "host-node-1.cluster"
    assert schema.host_stem("a/b c") == "host-a_b_c"


# On this machine's kernel ------------------------------------------------------------


def _send_over_loopback(nbytes: int) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = []

    def receive() -> None:
        conn, _ = server.accept()
        total = 0
        while chunk := conn.recv(1 << 16):
            total += len(chunk)
        received.append(total)
        conn.close()

    thread = threading.Thread(target=receive)
    thread.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(b"\0" * nbytes)
    thread.join(timeout=30)
    server.close()
    assert received == [nbytes]


def _wait_for(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_loopback_traffic_shows_in_the_real_counters(tmp_path):
    """20 MB sent over loopback through the real kernel: the sampler sees at least that
    many bytes on ``lo`` and the TCP segments that carried them."""
    stop = threading.Event()
    sampler = HostSampler(
        tmp_path, "here", nics="lo", interval_s=0.005, slow_interval_s=0.005, use_nvml=False
    )
    thread = threading.Thread(target=sampler.run, args=(stop,))
    thread.start()
    _wait_for(lambda: sampler.ticks >= 2)  # samples before the traffic
    _send_over_loopback(20_000_000)
    after = sampler.ticks
    _wait_for(lambda: sampler.ticks >= after + 2)  # and after it
    stop.set()
    thread.join(timeout=10)
    counters, hosts = load_host_files(tmp_path, [])
    assert hosts["here"]["errors"] == {}
    rx = counters.filter(pl.col("device") == "lo", pl.col("counter") == "rx_bytes")["value"]
    assert rx.max() - rx.min() >= 20_000_000
    segs = counters.filter(pl.col("counter") == "OutSegs")["value"]
    assert segs.max() - segs.min() >= 20_000_000 // 65536


def test_one_sampler_per_host_and_it_ends_with_its_rank(tmp_path):
    config = TelemetryConfig(host_sampler="thread", counters_interval_s=0.005)
    meta = tmp_path / "rank-00000.meta.json"
    first = start_host_sampler(tmp_path, 0, config, LocalClock(), meta, lambda: 0)
    second = start_host_sampler(tmp_path, 1, config, LocalClock(), meta, lambda: 0)
    assert first is not None and second is None
    first.stop()
    third = start_host_sampler(tmp_path, 1, config, LocalClock(), meta, lambda: 0)
    assert third is not None
    third.stop()
    host = json.loads(next(tmp_path.glob("host-*.meta.json")).read_text())
    assert host["finished"] and host["rank"] == 1


_RANK = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from syncpace.capture.clock import LocalClock
    from syncpace.telemetry import TelemetryConfig
    from syncpace.telemetry.sampler import start_host_sampler
    run = Path(sys.argv[1])
    meta = run / "rank-00000.meta.json"
    meta.write_text(json.dumps({"clock": {"offset_ns": 5_000_000_000}}))
    config = TelemetryConfig(
        host_sampler="process", counters_interval_s=0.01, counters_slow_interval_s=0.05,
    )
    handle = start_host_sampler(run, 0, config, LocalClock(), meta, lambda: 0)
    print(handle.proc.pid, time.time_ns(), flush=True)
    deadline = time.monotonic() + 30
    def flushed():  # the child's first batch of rows is on disk
        files = list(run.glob("host-*.counters.arrow"))
        return files and files[0].stat().st_size > 2000
    while not flushed() and time.monotonic() < deadline:
        time.sleep(0.02)
    os._exit(0)  # as if killed: no close, no atexit
    """
)


@pytest.mark.slow
def test_the_child_process_ends_when_its_rank_dies(tmp_path):
    rank = subprocess.run(
        [sys.executable, "-c", _RANK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rank.returncode == 0, rank.stderr
    child, started = map(int, rank.stdout.split())
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists(), "the sampler outlived its rank"
    counters, hosts = load_host_files(tmp_path, [])
    (meta,) = hosts.values()
    assert meta["finished"] and meta["ticks"] > 10 and meta["errors"] == {}
    # timestamps are on rank 0's clock: the rank's offset (5 s) was applied
    first = int(counters["time_ns"].min())
    assert 4.5e9 < first - started < 10e9


@pytest.mark.root
def test_a_cpu_cap_shows_as_throttling_of_the_capped_process(tmp_path):
    """A busy process in a cgroup capped at 5 % of a CPU (what the fabric's straggler
    fault does to a host): its cgroup, found from its pid, counts throttled periods and
    time, and reads its quota back in thousandths of a CPU."""
    from syncpace.fabric import cgroup as cg

    path = cg.base_dir("t" + os.urandom(3).hex())
    cg.create(path)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        cg.set_cpu_limit(path, 0.05)
        cg.procs_file(path).write_text(str(busy.pid))
        source = cpustats.CgroupCpu("/", pid=busy.pid)
        assert source.name == f"/{path.name}"
        assert cpustats.CgroupQuota(source).read() == [50]
        deadline = time.monotonic() + 10
        periods, throttled, throttled_ns, _ = source.read()
        while (throttled or 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            periods, throttled, throttled_ns, _ = source.read()
        assert periods and throttled and throttled >= 3, (periods, throttled)
        # throttled for most of each period it ran in: 95 ms of every 100
        assert throttled_ns >= 0.5 * throttled * 95_000_000
        source.close()
    finally:
        busy.kill()
        busy.wait()
        cg.remove(path)


def test_every_rank_of_the_host_is_measured_on_its_own(tmp_path, host):
    """Ranks register their pid in the run directory; the sampler reads each rank's
    threads and main thread (``schedstat``) from then on: rank 1 registers two ticks
    late and joins then, a pid with no process is left out. Each rank's waiting reads
    back as what its schedstat counted."""
    clock = Clock()
    s = _sampler(tmp_path, host, clock, FakeQdiscs())
    run = tmp_path / "run"
    threads = {0: (5000, 5001), 1: (6000,)}  # rank 0: its main thread and another

    def tick(n: int) -> None:
        for rank, tids in threads.items():
            for i, tid in enumerate(tids):
                task = host.root / f"proc/{tids[0]}/task/{tid}"
                task.mkdir(parents=True, exist_ok=True)
                # 100 ms a tick: rank 0's main thread waits 20 ms of it, its other
                # thread 5 ms; rank 1's main thread 50 ms
                wait = {(0, 0): 20, (0, 1): 5, (1, 0): 50}[(rank, i)] * 1_000_000 * n
                (task / "schedstat").write_text(f"{10_000_000 * n} {wait} 7\n")

    (run / schema.rank_pid_name("node-a", 0)).write_text("5000")
    (run / schema.rank_pid_name("node-a", 7)).write_text("999999")  # no such process
    for n in range(6):
        if n == 2:
            (run / schema.rank_pid_name("node-a", 1)).write_text("6000")
        tick(n)
        s.step(slow=True)
        clock.t += 100_000_000
    s.close()
    counters, hosts = load_host_files(run, [])
    mine = counters.filter(pl.col("device").str.starts_with("rank"))
    assert sorted(mine["device"].unique().to_list()) == ["rank0", "rank1"]
    main0 = mine.filter(pl.col("device") == "rank0", pl.col("counter") == "rank_main_wait_ns")
    assert main0.sort("time_ns")["value"].to_list()[-1] == 5 * 20_000_000
    summary = host_metrics(counters, hosts, {}).hosts["node-a"]["cpu"]["ranks"]
    # waited per ns of the sampled span: rank 0's main thread 20 %, its threads 25 %;
    # rank 1, sampled from its third tick on, 50 %
    assert summary["0"]["main_wait_rate"] == pytest.approx(0.2)
    assert summary["0"]["wait_rate"] == pytest.approx(0.25)
    assert summary["0"]["wait_share"] == pytest.approx(25 / 45, abs=1e-4)
    assert summary["1"]["main_wait_rate"] == pytest.approx(0.5)
    assert "7" not in summary


def test_each_rank_registers_for_its_hosts_sampler(tmp_path):
    """Every rank leaves its pid for the sampler, the one that samples and the others."""
    config = TelemetryConfig(host_sampler="thread", counters_interval_s=0.005)
    meta = tmp_path / "rank-00000.meta.json"
    first = start_host_sampler(tmp_path, 0, config, LocalClock(), meta, lambda: 0)
    second = start_host_sampler(tmp_path, 3, config, LocalClock(), meta, lambda: 0)
    assert first is not None and second is None
    first.stop()
    host = socket.gethostname()
    for rank in (0, 3):
        path = tmp_path / schema.rank_pid_name(host, rank)
        assert path.read_text() == str(os.getpid())
