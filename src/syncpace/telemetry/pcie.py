"""Where the GPUs and NICs of a host sit: PCIe paths, distance classes and NUMA nodes.

Read from sysfs alone (no driver, no root): every PCI function's directory under
``/sys/devices/pciDDDD:BB/…`` is nested inside the bridges between it and its host
bridge, so ``realpath(/sys/bus/pci/devices/<address>)`` *is* its PCIe path. Two devices
are classified at their common ancestor with the classes ``nvidia-smi topo -m`` prints:

* ``X``    the device itself;
* ``PIX``  at most one PCIe switch between them (both below the same switch, or two
  functions of one device);
* ``PXB``  several switches between them, without the host bridge;
* ``PHB``  through a PCIe host bridge (different root ports of one host bridge);
* ``NODE`` through the interconnect between host bridges of one NUMA node;
* ``SYS``  across the interconnect between NUMA nodes (QPI/UPI, Infinity Fabric);
* ``NV#``  for GPU pairs joined by ``#`` NVLinks (from NVML, see :mod:`.nvml`).

A PCIe switch appears in sysfs as two bridge levels (its upstream port, then one of its
downstream ports); below the root port, bridges are taken in such pairs, as NCCL does
when it reads the same tree. ``root`` lets tests build the real layout in a directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Distance classes from nearest to farthest (NV# comes before all of them).
CLASSES = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")

_VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}


@dataclass(frozen=True, slots=True)
class PciDevice:
    address: str  # 0000:3b:00.0
    host_bridge: str  # pci0000:3a
    bridges: tuple[str, ...]  # addresses from the root port down, the device excluded
    class_code: int
    vendor: str
    numa_node: int | None
    local_cpulist: str | None

    @property
    def levels(self) -> tuple[str, ...]:
        """The root port, then one id per PCIe switch (its upstream port)."""
        if not self.bridges:
            return ()
        below = self.bridges[1:]
        return (self.bridges[0], *below[::2])

    @property
    def slot(self) -> str:
        """Domain, bus and device: functions of one device share it."""
        return self.address.rsplit(".", 1)[0]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _is_bdf(name: str) -> bool:
    return len(name) == 12 and name[4] == ":" and name[7] == ":" and name[10] == "."


def read_device(root: str | os.PathLike[str], address: str) -> PciDevice | None:
    """The PCI function ``address`` with its path, or None if sysfs does not know it."""
    link = Path(root, "sys/bus/pci/devices", address.lower())
    try:
        real = Path(os.path.realpath(link))
    except OSError:
        return None
    if not real.exists():
        return None
    parts = real.parts
    bridges = [p for p in parts if _is_bdf(p)]
    hosts = [p for p in parts if p.startswith("pci") and ":" in p]
    if not bridges or bridges[-1] != address.lower():
        return None
    class_text = _read(real / "class") or "0x0"
    try:
        class_code = int(class_text, 16)
    except ValueError:
        class_code = 0
    numa = _read(real / "numa_node")
    numa_node = int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None
    return PciDevice(
        address=address.lower(),
        host_bridge=hosts[-1] if hosts else "pci?",
        bridges=tuple(bridges[:-1]),
        class_code=class_code,
        vendor=_VENDORS.get(_read(real / "vendor") or "", _read(real / "vendor") or "?"),
        numa_node=numa_node,
        local_cpulist=_read(real / "local_cpulist"),
    )


def classify(a: PciDevice, b: PciDevice) -> str:
    """The ``nvidia-smi topo -m`` class of the path between ``a`` and ``b`` over PCIe."""
    if a.address == b.address:
        return "X"
    if a.host_bridge != b.host_bridge:
        if a.numa_node is not None and b.numa_node is not None and a.numa_node != b.numa_node:
            return "SYS"
        return "NODE"
    if a.slot == b.slot and a.bridges == b.bridges:
        return "PIX"  # two functions of one device (the ports of a dual-port NIC)
    la, lb = a.levels, b.levels
    if not la or not lb or la[0] != lb[0]:
        return "PHB"
    common = 0
    for x, y in zip(la, lb, strict=False):
        if x != y:
            break
        common += 1
    if common >= 2 and len(la) == common and len(lb) == common:
        return "PIX"
    return "PXB"


def is_gpu(dev: PciDevice) -> bool:
    base, sub = dev.class_code >> 16, (dev.class_code >> 8) & 0xFF
    if base != 0x03:
        return False
    return sub == 0x02 or dev.vendor in ("nvidia", "amd")  # 3D controller, or a vendor's VGA


def is_nic(dev: PciDevice) -> bool:
    return dev.class_code >> 16 == 0x02


def numa_nodes(root: str | os.PathLike[str] = "/") -> dict[int, str]:
    """NUMA node -> its CPU list (``0-19,40-59``)."""
    base = Path(root, "sys/devices/system/node")
    out: dict[int, str] = {}
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return out
    for entry in entries:
        if entry.name.startswith("node") and entry.name[4:].isdigit():
            out[int(entry.name[4:])] = _read(entry / "cpulist") or ""
    return out


def parse_cpulist(text: str | None) -> set[int]:
    """``'0-3,8'`` -> {0, 1, 2, 3, 8}."""
    cpus: set[int] = set()
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            cpus.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            continue
    return cpus


def _children_names(device_dir: Path, sub: str) -> list[str]:
    """Names under ``sub`` of the device, or of a child device (virtio puts its
    interface one level down: ``0000:00:03.0/virtio2/net/eth0``)."""
    names = [p.name for p in device_dir.glob(f"{sub}/*")]
    names += [p.name for p in device_dir.glob(f"*/{sub}/*")]
    return sorted(set(names))


def host_topology(
    root: str | os.PathLike[str] = "/", nvlinks: dict[str, dict[str, int]] | None = None
) -> dict[str, Any]:
    """Every GPU and NIC of the host, their pairwise classes and the NUMA nodes.

    GPUs are named ``GPU<i>`` and NICs ``NIC<i>`` in PCI address order (the order NVML
    numbers GPUs by default). ``nvlinks`` (PCI address -> peer address -> link count)
    turns GPU pairs into ``NV#``."""
    base = Path(root, "sys/bus/pci/devices")
    try:
        addresses = sorted(p.name for p in base.iterdir() if _is_bdf(p.name))
    except OSError:
        addresses = []
    devices = [d for d in (read_device(root, a) for a in addresses) if d is not None]
    gpus = [d for d in devices if is_gpu(d)]
    nics = [d for d in devices if is_nic(d)]
    named: list[tuple[str, PciDevice]] = [(f"GPU{i}", d) for i, d in enumerate(gpus)]
    named += [(f"NIC{i}", d) for i, d in enumerate(nics)]
    links = nvlinks or {}
    matrix: dict[str, dict[str, str]] = {}
    for name_a, a in named:
        row = matrix.setdefault(name_a, {})
        for name_b, b in named:
            count = links.get(a.address, {}).get(b.address, 0)
            row[name_b] = f"NV{count}" if count and a is not b else classify(a, b)

    def describe(name: str, d: PciDevice) -> dict[str, Any]:
        real = Path(os.path.realpath(base / d.address))
        entry = {
            "name": name,
            "pci": d.address,
            "vendor": d.vendor,
            "numa_node": d.numa_node,
            "local_cpulist": d.local_cpulist,
            "host_bridge": d.host_bridge,
            "path": [*d.bridges, d.address],
        }
        if name.startswith("NIC"):
            entry["netdevs"] = _children_names(real, "net")
            entry["ib_devices"] = _children_names(real, "infiniband")
        return entry

    return {
        "gpus": [describe(n, d) for n, d in named if n.startswith("GPU")],
        "nics": [describe(n, d) for n, d in named if n.startswith("NIC")],
        "numa_nodes": {str(k): v for k, v in numa_nodes(root).items()},
        "matrix": matrix,
    }


def format_matrix(topology: dict[str, Any]) -> str:
    """The matrix as ``nvidia-smi topo -m`` lays it out, with the NIC legend."""
    names = [d["name"] for d in (*topology["gpus"], *topology["nics"])]
    info = {d["name"]: d for d in (*topology["gpus"], *topology["nics"])}
    lines = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity"]
    for a in names:
        cells = [topology["matrix"][a][b].center(4) for b in names]
        numa = info[a]["numa_node"]
        extra = ""
        if a.startswith("GPU"):
            extra = f"\t{info[a]['local_cpulist'] or 'N/A'}\t{'N/A' if numa is None else numa}"
        lines.append(f"{a}\t" + "\t".join(cells) + extra)
    nics = topology["nics"]
    if nics:
        lines += ["", "NIC Legend:", ""]
        for nic in nics:
            label = (nic.get("ib_devices") or nic.get("netdevs") or [nic["pci"]])[0]
            lines.append(f"  {nic['name']}: {label}")
    return "\n".join(lines)
