"""What a host's kernel counts about its network: the sources the host sampler reads.

Every source is built once (its files opened, its series fixed) and then read many
times: ``series`` names what it measures, ``read()`` returns one value per series
(``None`` where a value could not be read this time). Files are kept open and re-read
with ``pread`` at offset 0, which regenerates procfs and sysfs files without an
open/close per sample. Paths are taken under ``root`` so that tests can build the
same layout in a directory.

* :class:`NetDev`: ``/proc/net/dev`` -- the counters of ``/sys/class/net/*/statistics``
  (``dev_get_stats``), every interface in one read.
* :class:`Qdisc`: the root queueing discipline of each interface over rtnetlink (what
  ``tc -s qdisc`` prints): drops, overlimits, backlog, and a shaper's rate.
* :class:`ProcTable`: ``/proc/net/snmp`` and ``/proc/net/netstat`` fields (TCP
  retransmissions, timeouts, UDP buffer errors, ECN marks).
* :class:`NicAttrs`: ``speed``, ``operstate``, ``mtu``, ``carrier_changes`` of each interface.
* :class:`Infiniband`: ``/sys/class/infiniband/*/ports/*/{counters,hw_counters}``.

Five small classes of one shape (built once, read many times) in one module of ~670
lines: a reader of the host sampler finds every network source side by side.
"""

from __future__ import annotations

import fnmatch
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Series = tuple[str, str, int, str]  # source, device, port, counter
Values = list[int | None]

NO_PORT = -1
_READ_SIZE = 1 << 17


class PFile:
    """A file kept open and re-read from its start."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

    def read(self) -> bytes:
        data = os.pread(self.fd, _READ_SIZE, 0)
        if len(data) == _READ_SIZE:  # larger than one read: take the rest too
            chunks = [data]
            while len(chunks[-1]) == _READ_SIZE:
                chunks.append(os.pread(self.fd, _READ_SIZE, _READ_SIZE * len(chunks)))
            data = b"".join(chunks)
        return data

    def close(self) -> None:
        os.close(self.fd)


def _int(text: bytes | str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


# Interfaces --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Nic:
    name: str
    ifindex: int
    pci: str | None  # PCI address of the function behind it, when there is one
    numa_node: int | None
    driver: str | None
    virtual: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ifindex": self.ifindex,
            "pci": self.pci,
            "numa_node": self.numa_node,
            "driver": self.driver,
            "virtual": self.virtual,
        }


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def pci_address_of(device_dir: Path) -> str | None:
    """The PCI function a sysfs device sits on (walking up: a virtio NIC is a child of
    its PCI function), or None for a virtual device."""
    try:
        real = Path(os.path.realpath(device_dir))
    except OSError:
        return None
    for part in (real, *real.parents):
        if _is_bdf(part.name):
            return part.name
    return None


def _is_bdf(name: str) -> bool:
    # 0000:00:1f.3
    return len(name) == 12 and name[4] == ":" and name[7] == ":" and name[10] == "."


def discover_nics(root: str | os.PathLike[str] = "/", patterns: str = "") -> list[Nic]:
    """Interfaces to sample: those matching ``patterns`` (comma-separated names or
    globs), else the interfaces with a PCI function behind them, else -- a container, a
    network namespace, a VM with virtual NICs only -- every interface that is up."""
    net = Path(root, "sys/class/net")
    found: list[Nic] = []
    try:
        names = sorted(p.name for p in net.iterdir())
    except OSError:
        return []
    for name in names:
        if name == "lo" and not patterns:
            continue
        dev = net / name
        pci = pci_address_of(dev / "device") if (dev / "device").exists() else None
        numa = _int(_read_text(dev / "device" / "numa_node") or "") if pci else None
        driver = None
        if (dev / "device" / "driver").exists():
            driver = Path(os.path.realpath(dev / "device" / "driver")).name
        found.append(
            Nic(
                name=name,
                ifindex=_int(_read_text(dev / "ifindex") or "") or 0,
                pci=pci,
                numa_node=numa if numa is not None and numa >= 0 else None,
                driver=driver,
                virtual=pci is None,
            )
        )
    if patterns:
        wanted = [p.strip() for p in patterns.split(",") if p.strip()]
        return [n for n in found if any(fnmatch.fnmatchcase(n.name, p) for p in wanted)]
    physical = [n for n in found if not n.virtual]
    if physical:
        return physical
    return [n for n in found if _read_text(net / n.name / "operstate") in ("up", "unknown")]


# /proc/net/dev -------------------------------------------------------------------------

#: Column of /proc/net/dev -> counter name (as in /sys/class/net/*/statistics).
NETDEV_FIELDS = {
    "rx_bytes": 0,
    "rx_packets": 1,
    "rx_errors": 2,
    "rx_dropped": 3,
    "rx_fifo_errors": 4,
    "rx_frame_errors": 5,
    "multicast": 7,
    "tx_bytes": 8,
    "tx_packets": 9,
    "tx_errors": 10,
    "tx_dropped": 11,
    "tx_fifo_errors": 12,
    "collisions": 13,
    "tx_carrier_errors": 14,
}


class NetDev:
    def __init__(self, root: str | os.PathLike[str], nics: Sequence[str]) -> None:
        self.file = PFile(Path(root, "proc/net/dev"))
        self.nics = list(nics)
        self.series: list[Series] = [
            ("nic", nic, NO_PORT, name) for nic in self.nics for name in NETDEV_FIELDS
        ]
        self._columns = list(NETDEV_FIELDS.values())

    def read(self) -> Values:
        rows: dict[bytes, list[bytes]] = {}
        for line in self.file.read().split(b"\n")[2:]:
            name, sep, rest = line.partition(b":")
            if sep:
                rows[name.strip()] = rest.split()
        out: Values = []
        for nic in self.nics:
            fields = rows.get(nic.encode())
            if fields is None or len(fields) < 16:
                out.extend([None] * len(self._columns))
            else:
                out.extend(int(fields[c]) for c in self._columns)
        return out

    def close(self) -> None:
        self.file.close()


# /proc/net/snmp and /proc/net/netstat ------------------------------------------------------

SNMP_FIELDS = {
    "tcp": (
        "Tcp",
        (
            "InSegs",
            "OutSegs",
            "RetransSegs",
            "InErrs",
            "OutRsts",
            "EstabResets",
            "AttemptFails",
            "CurrEstab",
        ),
    ),
    "udp": ("Udp", ("InDatagrams", "OutDatagrams", "InErrors", "RcvbufErrors", "SndbufErrors")),
}
NETSTAT_FIELDS = {
    "tcpext": (
        "TcpExt",
        (
            "TCPTimeouts",
            "TCPLostRetransmit",
            "TCPFastRetrans",
            "TCPSlowStartRetrans",
            "TCPSynRetrans",
            "TCPLossProbes",
            "TCPSpuriousRTOs",
            "TCPBacklogDrop",
            "TCPRcvQDrop",
            "TCPOFOQueue",
            "ListenOverflows",
            "ListenDrops",
            "TCPRetransFail",
        ),
    ),
    "ipext": ("IpExt", ("InCEPkts", "InECT0Pkts", "InECT1Pkts", "InNoECTPkts")),
}


class ProcTable:
    """Named fields of a ``Prefix: name name …`` / ``Prefix: value value …`` file."""

    def __init__(
        self, path: str | os.PathLike[str], wanted: dict[str, tuple[str, tuple[str, ...]]]
    ) -> None:
        self.file = PFile(path)
        self.series: list[Series] = []
        # (line prefix, field name) per series, in order
        self._keys: list[tuple[bytes, bytes]] = []
        for source, (prefix, names) in wanted.items():
            for name in names:
                self.series.append((source, "", NO_PORT, name))
                self._keys.append((prefix.encode() + b":", name.encode()))
        self._index: dict[bytes, dict[bytes, int]] = {}

    def read(self) -> Values:
        lines = self.file.read().split(b"\n")
        values: dict[bytes, list[bytes]] = {}
        for header, data in zip(lines[::2], lines[1::2], strict=False):
            prefix, _, names = header.partition(b" ")
            if not data.startswith(prefix):
                continue
            if prefix not in self._index:  # the layout of a kernel's file never changes
                self._index[prefix] = {n: i for i, n in enumerate(names.split())}
            values[prefix] = data.split()[1:]
        out: Values = []
        for prefix, name in self._keys:
            index = self._index.get(prefix, {}).get(name)
            row = values.get(prefix)
            out.append(_int(row[index]) if row is not None and index is not None else None)
        return out

    def close(self) -> None:
        self.file.close()


def snmp(root: str | os.PathLike[str]) -> ProcTable:
    return ProcTable(Path(root, "proc/net/snmp"), SNMP_FIELDS)


def netstat(root: str | os.PathLike[str]) -> ProcTable:
    return ProcTable(Path(root, "proc/net/netstat"), NETSTAT_FIELDS)


# Interface attributes ------------------------------------------------------------------------


class NicAttrs:
    """Slowly changing facts of each interface, from sysfs."""

    FIELDS = ("speed_mbps", "oper_up", "mtu", "carrier_changes")

    def __init__(self, root: str | os.PathLike[str], nics: Sequence[str]) -> None:
        base = Path(root, "sys/class/net")
        self.nics = list(nics)
        self.series: list[Series] = [
            ("nic", nic, NO_PORT, name) for nic in self.nics for name in self.FIELDS
        ]
        self._files: list[PFile | None] = []
        for nic in self.nics:
            for name in ("speed", "operstate", "mtu", "carrier_changes"):
                try:
                    self._files.append(PFile(base / nic / name))
                except OSError:
                    self._files.append(None)
        self.speed_mbps: dict[str, int | None] = dict.fromkeys(self.nics)

    def read(self) -> Values:
        out: Values = []
        for i, f in enumerate(self._files):
            if f is None:
                out.append(None)
                continue
            try:
                text = f.read().strip()
            except OSError:  # speed of a link that is down reads EINVAL
                out.append(None)
                continue
            if i % 4 == 1:
                out.append(1 if text == b"up" else 0)
            else:
                value = _int(text)
                out.append(value if value is not None and value >= 0 else None)
        for j, nic in enumerate(self.nics):
            self.speed_mbps[nic] = out[4 * j]
        return out

    def close(self) -> None:
        for f in self._files:
            if f is not None:
                f.close()


# Queueing disciplines over rtnetlink ------------------------------------------------------

_NLMSG_HDR = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=BxxxiIII")
_RTATTR = struct.Struct("=HH")
_RTM_GETQDISC = 38
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_TC_H_ROOT = 0xFFFFFFFF
_TCA_KIND = 1
_TCA_OPTIONS = 2
_TCA_STATS2 = 7
_TCA_STATS_BASIC = 1
_TCA_STATS_QUEUE = 3
_TCA_TBF_PARMS = 1
_TCA_TBF_RATE64 = 4
#: Root qdiscs that shape to a rate: their rate is the link's rate as the host sees it.
SHAPERS = ("tbf",)


@dataclass(slots=True)
class QdiscStats:
    kind: str
    bytes: int
    packets: int
    drops: int
    overlimits: int
    requeues: int
    backlog_bytes: int
    qlen: int
    rate_bps: int | None  # a shaper's rate, None for other kinds


def _attrs(data: bytes, start: int, end: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while start + 4 <= end:
        length, kind = _RTATTR.unpack_from(data, start)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[start + 4 : start + length]
        start += (length + 3) & ~3
    return out


def parse_qdisc_message(data: bytes, offset: int, length: int) -> tuple[int, int, QdiscStats]:
    """(ifindex, parent, stats) of one RTM_NEWQDISC message at ``offset``."""
    _family, ifindex, _handle, parent, _info = _TCMSG.unpack_from(data, offset + 16)
    attrs = _attrs(data, offset + 16 + _TCMSG.size, offset + length)
    kind = attrs.get(_TCA_KIND, b"").split(b"\0", 1)[0].decode("ascii", "replace")
    nbytes = packets = drops = overlimits = requeues = backlog = qlen = 0
    stats2 = attrs.get(_TCA_STATS2)
    if stats2 is not None:
        nested = _attrs(stats2, 0, len(stats2))
        basic = nested.get(_TCA_STATS_BASIC)
        if basic is not None and len(basic) >= 12:
            nbytes, packets = struct.unpack_from("=QI", basic)
        queue = nested.get(_TCA_STATS_QUEUE)
        if queue is not None and len(queue) >= 20:
            qlen, backlog, drops, requeues, overlimits = struct.unpack_from("=5I", queue)
    rate = None
    options = attrs.get(_TCA_OPTIONS)
    if kind in SHAPERS and options is not None:
        nested = _attrs(options, 0, len(options))
        if _TCA_TBF_RATE64 in nested and len(nested[_TCA_TBF_RATE64]) >= 8:
            rate = struct.unpack_from("=Q", nested[_TCA_TBF_RATE64])[0] * 8
        elif _TCA_TBF_PARMS in nested and len(nested[_TCA_TBF_PARMS]) >= 12:
            # struct tc_ratespec: cell_log, linklayer, overhead, cell_align, mpu, rate (B/s)
            rate = struct.unpack_from("=BBHhHI", nested[_TCA_TBF_PARMS])[5] * 8
    return (
        ifindex,
        parent,
        QdiscStats(kind, nbytes, packets, drops, overlimits, requeues, backlog, qlen, rate),
    )


class NetlinkQdiscs:
    """Dumps every qdisc of the network namespace: one request, a few replies."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
        self.sock.bind((0, 0))
        self.sock.settimeout(1.0)  # a dump is answered at once; never block a tick for long
        self.seq = 0

    def dump(self) -> dict[int, QdiscStats]:
        """ifindex -> statistics of its root qdisc."""
        self.seq += 1
        request = _NLMSG_HDR.pack(
            _NLMSG_HDR.size + _TCMSG.size, _RTM_GETQDISC, _NLM_F_REQUEST | _NLM_F_DUMP, self.seq, 0
        ) + _TCMSG.pack(0, 0, 0, 0, 0)
        self.sock.send(request)
        roots: dict[int, QdiscStats] = {}
        while True:
            data = self.sock.recv(1 << 16)
            offset = 0
            while offset + _NLMSG_HDR.size <= len(data):
                length, kind, _flags, seq, _pid = _NLMSG_HDR.unpack_from(data, offset)
                if length < _NLMSG_HDR.size:
                    return roots
                if seq == self.seq:
                    if kind == _NLMSG_DONE:
                        return roots
                    if kind == _NLMSG_ERROR:
                        code = struct.unpack_from("=i", data, offset + 16)[0]
                        raise OSError(-code, os.strerror(-code))
                    # only root qdiscs are parsed (mq's and htb's children are not)
                    _f, ifindex, _h, parent, _i = _TCMSG.unpack_from(data, offset + 16)
                    if parent == _TC_H_ROOT:
                        roots[ifindex] = parse_qdisc_message(data, offset, length)[2]
                offset += (length + 3) & ~3

    def close(self) -> None:
        self.sock.close()


#: Counters of a root qdisc that the kernel keeps in 32 bits (``gnet_stats_queue``,
#: ``gnet_stats_basic.packets``): unwrapped by the sampler into 64-bit series.
QDISC_FIELDS = (
    "bytes",
    "packets",
    "drops",
    "overlimits",
    "requeues",
    "backlog_bytes",
    "qlen",
    "rate_bps",
)
_WRAP32 = ("packets", "drops", "overlimits", "requeues")


class Qdisc:
    def __init__(self, nics: Sequence[Nic], dumper: Any = None) -> None:
        self.dumper = dumper if dumper is not None else NetlinkQdiscs()
        self.nics = list(nics)
        self.series: list[Series] = [
            ("qdisc", n.name, NO_PORT, name) for n in self.nics for name in QDISC_FIELDS
        ]
        self._last32: dict[tuple[str, str], int] = {}
        self._wraps: dict[tuple[str, str], int] = {}
        self.rate_bps: dict[str, int | None] = {n.name: None for n in self.nics}
        self.kind: dict[str, str | None] = {n.name: None for n in self.nics}

    def read(self) -> Values:
        roots = self.dumper.dump()
        out: Values = []
        for nic in self.nics:
            stats = roots.get(nic.ifindex)
            self.rate_bps[nic.name] = stats.rate_bps if stats is not None else None
            self.kind[nic.name] = stats.kind if stats is not None else None
            if stats is None:
                out.extend([None] * len(QDISC_FIELDS))
                continue
            for name in QDISC_FIELDS:
                value = getattr(stats, name)
                if name in _WRAP32:
                    value = self._unwrap(nic.name, name, value)
                out.append(value)
        return out

    def _unwrap(self, nic: str, name: str, value: int) -> int:
        key = (nic, name)
        last = self._last32.get(key)
        if last is not None and value < last:
            self._wraps[key] = self._wraps.get(key, 0) + 1
        self._last32[key] = value
        return value + (self._wraps.get(key, 0) << 32)

    def close(self) -> None:
        self.dumper.close()


class LinkRate:
    """The rate each interface's utilisation is measured against, per sample: a
    configured rate, else the rate of a shaping root qdisc (on the emulated fabric and
    on hosts that shape their egress, the link as the host sees it), else the speed."""

    def __init__(
        self, nics: Sequence[str], configured: dict[str, int], qdisc: Qdisc | None, attrs: NicAttrs
    ) -> None:
        self.nics = list(nics)
        self.configured = {n: configured.get(n, configured.get("*")) for n in self.nics}
        self.qdisc = qdisc
        self.attrs = attrs
        self.series: list[Series] = [("nic", n, NO_PORT, "link_rate_bps") for n in self.nics]

    def source(self, nic: str) -> str:
        if self.configured.get(nic):
            return "configured"
        if self.qdisc is not None and self.qdisc.rate_bps.get(nic):
            return f"root {self.qdisc.kind.get(nic)} rate"
        return "speed" if self.attrs.speed_mbps.get(nic) else "unknown"

    def read(self) -> Values:
        out: Values = []
        for nic in self.nics:
            rate = self.configured.get(nic)
            if not rate and self.qdisc is not None:
                rate = self.qdisc.rate_bps.get(nic)
            if not rate:
                speed = self.attrs.speed_mbps.get(nic)
                rate = speed * 1_000_000 if speed else None
            out.append(rate)
        return out

    def close(self) -> None:
        pass


# InfiniBand / RoCE ----------------------------------------------------------------------

#: At most this many counter files per port (drivers expose 20-80).
MAX_IB_FILES_PER_PORT = 96


@dataclass
class IbPort:
    device: str
    port: int
    link_layer: str | None
    netdev: str | None
    pci: str | None
    files: list[tuple[str, str, PFile]] = field(default_factory=list)  # source, name, file

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "port": self.port,
            "link_layer": self.link_layer,
            "netdev": self.netdev,
            "pci": self.pci,
            "counters": len(self.files),
        }


def parse_ib_rate(text: str) -> int | None:
    """``'100 Gb/sec (4X EDR)'`` -> 100_000_000_000."""
    head = text.split("Gb/sec", 1)
    try:
        return int(float(head[0].strip()) * 1e9) if len(head) == 2 else None
    except ValueError:
        return None


def parse_ib_state(text: str) -> int | None:
    """``'4: ACTIVE'`` -> 4; ``'5: LinkUp'`` -> 5."""
    return _int(text.split(":", 1)[0].strip())


class Infiniband:
    """Port and hardware counters of every InfiniBand / RoCE port, plus rate and state."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.ports: list[IbPort] = []
        self.series: list[Series] = []
        self._gauges: list[tuple[PFile, Any]] = []
        base = Path(root, "sys/class/infiniband")
        try:
            devices = sorted(p for p in base.iterdir())
        except OSError:
            devices = []
        for dev in devices:
            pci = pci_address_of(dev / "device") if (dev / "device").exists() else None
            try:
                ports = sorted((dev / "ports").iterdir(), key=lambda p: _int(p.name) or 0)
            except OSError:
                continue
            for port_dir in ports:
                number = _int(port_dir.name)
                if number is None:
                    continue
                self._add_port(dev.name, number, port_dir, pci)

    def _add_port(self, device: str, number: int, port_dir: Path, pci: str | None) -> None:
        ndevs = port_dir / "gid_attrs" / "ndevs" / "0"
        port = IbPort(
            device=device,
            port=number,
            link_layer=_read_text(port_dir / "link_layer"),
            netdev=_read_text(ndevs) if ndevs.exists() else None,
            pci=pci,
        )
        for sub, source in (("counters", "ib"), ("hw_counters", "ib_hw")):
            try:
                names = sorted(p.name for p in (port_dir / sub).iterdir() if p.is_file())
            except OSError:
                continue
            for name in names:
                if name == "lifespan" or len(port.files) >= MAX_IB_FILES_PER_PORT:
                    continue
                try:
                    port.files.append((source, name, PFile(port_dir / sub / name)))
                except OSError:
                    continue
                self.series.append((source, device, number, name))
        for name, parse in (
            ("rate", parse_ib_rate),
            ("state", parse_ib_state),
            ("phys_state", parse_ib_state),
        ):
            try:
                self._gauges.append((PFile(port_dir / name), parse))
            except OSError:
                self._gauges.append((None, parse))  # type: ignore[arg-type]
            self.series.append(("ib", device, number, "rate_bps" if name == "rate" else name))
        self.ports.append(port)

    def read(self) -> Values:
        out: Values = []
        gauges = iter(self._gauges)
        for port in self.ports:
            for _source, _name, f in port.files:
                try:
                    out.append(_int(f.read().strip()))
                except OSError:
                    out.append(None)
            for _ in range(3):
                f, parse = next(gauges)
                try:
                    out.append(parse(f.read().decode("ascii", "replace")) if f else None)
                except OSError:
                    out.append(None)
        return out

    def close(self) -> None:
        for port in self.ports:
            for _s, _n, f in port.files:
                f.close()
        for f, _parse in self._gauges:
            if f is not None:
                f.close()
