"""Fake host trees with the real sysfs/procfs layout, for the host sampler's tests.

Devices live at ``sys/devices/pciDDDD:BB/<root port>/<bridges…>/<function>`` with their
``class``, ``vendor`` and ``numa_node`` files; ``sys/bus/pci/devices/<address>`` and
``sys/class/{net,infiniband}/<name>`` are symlinks into that tree, exactly as the kernel
lays them out, so the code under test resolves paths as it does on a real host.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BRIDGE = "0x060400"
GPU_3D = "0x030200"
ETHERNET = "0x020000"
INFINIBAND = "0x020700"


class SysfsTree:
    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in ("sys/bus/pci/devices", "sys/class/net", "sys/class/infiniband", "proc/net"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        write_cpu(self)  # an idle host, its sampler in an unlimited cgroup

    def numa(self, node: int, cpulist: str) -> None:
        path = self.root / "sys/devices/system/node" / f"node{node}"
        path.mkdir(parents=True, exist_ok=True)
        (path / "cpulist").write_text(cpulist + "\n")

    def pci(
        self,
        host_bridge: str,
        chain: list[str],
        cls: str,
        *,
        vendor: str = "0x10de",
        numa: int = 0,
        cpulist: str = "",
    ) -> Path:
        """The function ``chain[-1]`` below bridges ``chain[:-1]`` of ``host_bridge``."""
        path = self.root / "sys/devices" / host_bridge
        for i, address in enumerate(chain):
            path = path / address
            last = i == len(chain) - 1
            if not path.exists():
                path.mkdir(parents=True)
                (path / "class").write_text((cls if last else BRIDGE) + "\n")
                (path / "vendor").write_text((vendor if last else "0x8086") + "\n")
                (path / "numa_node").write_text(f"{numa}\n")
                (path / "local_cpulist").write_text(cpulist + "\n")
                link = self.root / "sys/bus/pci/devices" / address
                link.symlink_to(os.path.relpath(path, link.parent))
        return path

    def netdev(self, device: Path | None, name: str, ifindex: int, **attrs: str) -> Path:
        """An interface; a virtual one when ``device`` is None."""
        if device is None:
            real = self.root / "sys/devices/virtual/net" / name
        else:
            real = device / "net" / name
        real.mkdir(parents=True)
        if device is not None:
            (real / "device").symlink_to(os.path.relpath(device, real))
        defaults = {"ifindex": str(ifindex), "operstate": "up", "mtu": "1500", "speed": "-1"}
        defaults["carrier_changes"] = "2"
        for key, value in {**defaults, **attrs}.items():
            (real / key).write_text(value + "\n")
        link = self.root / "sys/class/net" / name
        link.symlink_to(os.path.relpath(real, link.parent))
        return real

    def ibdev(self, device: Path, name: str, ports: dict[int, dict[str, dict[str, str]]]) -> Path:
        """An InfiniBand device: per port, ``counters``, ``hw_counters`` and attributes."""
        real = device / "infiniband" / name
        real.mkdir(parents=True)
        (real / "device").symlink_to(os.path.relpath(device, real))
        for number, files in ports.items():
            port = real / "ports" / str(number)
            for sub in ("counters", "hw_counters"):
                (port / sub).mkdir(parents=True)
                for key, value in files.get(sub, {}).items():
                    (port / sub / key).write_text(value + "\n")
            for key, value in files.get("attrs", {}).items():
                (port / key).write_text(value + "\n")
        link = self.root / "sys/class/infiniband" / name
        link.symlink_to(os.path.relpath(real, link.parent))
        return real

    def proc(self, name: str, text: str) -> None:
        (self.root / "proc/net" / name).write_text(text)


def two_socket_host(root: Path) -> SysfsTree:
    """Two sockets, 8 GPUs and 4 InfiniBand NICs behind PCIe switches.

    Socket 0 has two host bridges (pci0000:17, pci0000:3a), each with one root port and
    one switch holding two GPUs and a NIC. Socket 1 has one host bridge (pci0000:ae)
    with two root ports, each with such a switch."""
    t = SysfsTree(root)
    t.numa(0, "0-23,48-71")
    t.numa(1, "24-47,72-95")
    gpu = 0
    for numa, host_bridge, rp, usp, bus in (
        (0, "pci0000:17", "0000:17:00.0", "0000:18:00.0", 0x19),
        (0, "pci0000:3a", "0000:3a:00.0", "0000:3b:00.0", 0x3C),
        (1, "pci0000:ae", "0000:ae:00.0", "0000:af:00.0", 0xB0),
        (1, "pci0000:ae", "0000:ae:02.0", "0000:c0:00.0", 0xC1),
    ):
        cpus = "0-23,48-71" if numa == 0 else "24-47,72-95"
        for slot in range(2):
            dsp = f"0000:{bus:02x}:{slot * 4:02x}.0"
            address = f"0000:{bus + 1 + slot:02x}:00.0"
            t.pci(host_bridge, [rp, usp, dsp, address], GPU_3D, numa=numa, cpulist=cpus)
            gpu += 1
        dsp = f"0000:{bus:02x}:08.0"
        address = f"0000:{bus + 3:02x}:00.0"
        chain = [rp, usp, dsp, address]
        nic = t.pci(host_bridge, chain, INFINIBAND, vendor="0x15b3", numa=numa, cpulist=cpus)
        index = len(list((root / "sys/class/infiniband").iterdir()))
        t.ibdev(nic, f"mlx5_{index}", {1: {"attrs": {"rate": "200 Gb/sec (4X HDR)"}}})
        t.netdev(nic, f"ib{index}", 10 + index)
    return t


def switch_host(root: Path) -> SysfsTree:
    """One socket; a two-level PCIe switch (a top switch with two lower switches of two
    GPUs each, and a dual-port Ethernet NIC on the top switch); a management NIC on a
    second root port."""
    t = SysfsTree(root)
    t.numa(0, "0-31")
    hb, rp, top = "pci0000:00", "0000:00:01.0", "0000:01:00.0"
    for dsp, usp, lower, gpus in (
        ("0000:02:00.0", "0000:03:00.0", "0000:04", ("0000:05:00.0", "0000:06:00.0")),
        ("0000:02:01.0", "0000:07:00.0", "0000:08", ("0000:09:00.0", "0000:0a:00.0")),
    ):
        for i, address in enumerate(gpus):
            t.pci(hb, [rp, top, dsp, usp, f"{lower}:{i:02x}.0", address], GPU_3D, cpulist="0-31")
    for fn, name in ((0, "eth0"), (1, "eth1")):
        nic = t.pci(hb, [rp, top, "0000:02:02.0", f"0000:0b:00.{fn}"], ETHERNET, vendor="0x15b3")
        t.netdev(nic, name, 2 + fn, speed="100000")
    mgmt = t.pci(hb, ["0000:00:02.0", "0000:0c:00.0"], ETHERNET, vendor="0x8086")
    t.netdev(mgmt, "eth2", 4, speed="1000")
    t.netdev(None, "lo", 1, operstate="unknown")
    return t


_NETDEV_HEADER = (
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|"
    "bytes    packets errs drop fifo colls carrier compressed\n"
)
_TCP = (
    "RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets "
    "CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors"
).split()
_UDP = (
    "InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors "
    "IgnoredMulti MemErrors"
).split()
_TCPEXT = (
    "SyncookiesSent DelayedACKs ListenOverflows ListenDrops TCPLostRetransmit TCPFastRetrans "
    "TCPSlowStartRetrans TCPTimeouts TCPLossProbes TCPBacklogDrop TCPSpuriousRTOs "
    "TCPRcvQDrop TCPOFOQueue TCPSynRetrans TCPRetransFail"
).split()
_IPEXT = "InNoRoutes InOctets InNoECTPkts InECT1Pkts InECT0Pkts InCEPkts".split()


def write_netdev(tree: SysfsTree, nics: dict[str, dict[str, int]]) -> None:
    """/proc/net/dev with the given counters (the /sys/class/net statistics names)."""
    order = [
        "rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "rx_fifo_errors",
        "rx_frame_errors", "rx_compressed", "multicast", "tx_bytes", "tx_packets",
        "tx_errors", "tx_dropped", "tx_fifo_errors", "collisions", "tx_carrier_errors",
        "tx_compressed",
    ]  # fmt: skip
    lines = [
        f"{name:>6}: " + " ".join(str(values.get(k, 0)) for k in order)
        for name, values in nics.items()
    ]
    tree.proc("dev", _NETDEV_HEADER + "\n".join(lines) + "\n")


def _table(prefix: str, names: list[str], values: dict[str, int]) -> str:
    return (
        f"{prefix}: {' '.join(names)}\n{prefix}: "
        + " ".join(str(values.get(n, 0)) for n in names)
        + "\n"
    )


def write_snmp(tree: SysfsTree, tcp: dict[str, int], udp: dict[str, int] | None = None) -> None:
    ip = "Ip: Forwarding DefaultTTL InReceives\nIp: 2 64 100\n"
    tree.proc("snmp", ip + _table("Tcp", _TCP, tcp) + _table("Udp", _UDP, udp or {}))


def write_netstat(
    tree: SysfsTree, tcpext: dict[str, int], ipext: dict[str, int] | None = None
) -> None:
    tree.proc("netstat", _table("TcpExt", _TCPEXT, tcpext) + _table("IpExt", _IPEXT, ipext or {}))


#: The cgroup of the fake hosts' sampler (cgroup v1, the cpu and cpuacct controllers
#: mounted apart, as on this machine).
CGROUP = "job/rank0"
#: The pid of the fake hosts' sampling rank.
JOB_PID = 4242


def write_cpu(
    tree: SysfsTree,
    ticks: dict[str, int] | None = None,
    *,
    cpus: int = 2,
    pressure_us: int = 0,
    periods: int = 0,
    throttled: int = 0,
    throttled_ns: int = 0,
    usage_ns: int = 0,
    quota_us: int = -1,
    period_us: int = 100_000,
    job_run_ns: int = 0,
    job_wait_ns: int = 0,
) -> None:
    """/proc/stat (``ticks`` per state, in clock ticks), /proc/pressure/cpu, the job's
    process (:data:`JOB_PID`, one thread) and the sampler's cgroup (v1) with its
    throttling and quota."""
    states = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    values = ticks or {}
    line = "cpu  " + " ".join(str(values.get(k, 0)) for k in states) + " 0 0\n"
    per_cpu = "".join(f"cpu{i} 0 0 0 0 0 0 0 0 0 0\n" for i in range(cpus))
    (tree.root / "proc").mkdir(parents=True, exist_ok=True)
    (tree.root / "proc/stat").write_text(line + per_cpu + "intr 0\nctxt 0\n")
    (tree.root / "proc/pressure").mkdir(exist_ok=True)
    (tree.root / "proc/pressure/cpu").write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={pressure_us}\n"
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    task = tree.root / f"proc/{JOB_PID}/task/{JOB_PID}"
    task.mkdir(parents=True, exist_ok=True)
    (task / "schedstat").write_text(f"{job_run_ns} {job_wait_ns} 10\n")
    (tree.root / "proc/self").mkdir(exist_ok=True)
    (tree.root / "proc/self/cgroup").write_text(
        f"4:memory:/{CGROUP}\n2:cpuacct:/{CGROUP}\n1:cpu:/{CGROUP}\n0::/\n"
    )
    cpu = tree.root / "sys/fs/cgroup/cpu" / CGROUP
    acct = tree.root / "sys/fs/cgroup/cpuacct" / CGROUP
    cpu.mkdir(parents=True, exist_ok=True)
    acct.mkdir(parents=True, exist_ok=True)
    (cpu / "cpu.stat").write_text(
        f"nr_periods {periods}\nnr_throttled {throttled}\nthrottled_time {throttled_ns}\n"
    )
    (cpu / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (cpu / "cpu.cfs_period_us").write_text(f"{period_us}\n")
    (acct / "cpuacct.usage").write_text(f"{usage_ns}\n")


def write_cpu_shares(
    tree: SysfsTree, tick: int, wait: float, throttled: float = 0.0, quota_us: int = 50_000
) -> None:
    """:func:`write_cpu` at sample ``tick`` (100 ms each) of a host whose job threads
    waited ``wait`` of the time they could run, and whose cgroup's CPU limit
    (``quota_us`` a period, where ``throttled``) held them throttled ``throttled`` of
    the time, in every period."""
    ns = 100_000_000 * tick
    write_cpu(
        tree,
        periods=tick,
        throttled=tick if throttled else 0,
        throttled_ns=int(throttled * ns),
        quota_us=quota_us if throttled else -1,
        job_run_ns=int((1 - wait) * ns),
        job_wait_ns=int(wait * ns),
    )


def sample_host(
    run: Path,
    host: str,
    tree: SysfsTree,
    ticks: int,
    script: Callable[[int], None] | None = None,
    **kw: Any,
) -> None:
    """The real host sampler over ``tree`` for ``ticks`` slow samples 100 ms apart on a
    clock of its own, writing ``run``'s host files; ``script(tick)`` rewrites the tree's
    counters before each sample (and once before the sampler opens them). No qdiscs."""
    from syncpace.telemetry.sampler import HostSampler

    clock = SimpleNamespace(t=1_000_000_000)
    if script is not None:
        script(0)  # the host's files exist before the sampler opens them
    no_qdiscs = SimpleNamespace(dump=dict, close=lambda: None)
    sampler = HostSampler(
        run, host, root=tree.root, now=lambda: clock.t, qdisc_dumper=no_qdiscs, **kw
    )
    for tick in range(ticks):
        if script is not None:
            script(tick)
        sampler.step(slow=True)
        clock.t += 100_000_000
    sampler.close()
