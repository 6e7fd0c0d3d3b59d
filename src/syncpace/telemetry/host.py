"""Facts about where a rank runs: host, local rank, device, CPU/NUMA/NIC affinity."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from syncpace.telemetry.launchers import launch_place

#: Variables that name the NICs NCCL and gloo use.
NIC_VARIABLES = ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "GLOO_SOCKET_IFNAME")


def env_int(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.lstrip("-").isdigit() else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _nics() -> list[dict[str, Any]]:
    nics = []
    net = Path("/sys/class/net")
    if not net.is_dir():
        return nics
    for dev in sorted(net.iterdir()):
        if dev.name == "lo":
            continue
        numa = _read(dev / "device" / "numa_node")
        nics.append(
            {
                "name": dev.name,
                "numa_node": int(numa) if numa and numa.lstrip("-").isdigit() else None,
                "speed_mbps": _int_or_none(_read(dev / "speed")),
            }
        )
    return nics


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text and text.lstrip("-").isdigit() else None


def rank_facts(rank: int, world_size: int, device: str) -> dict[str, Any]:
    """Metadata of this rank (keys documented in docs/trace-format.md)."""
    place = launch_place(os.environ, rank)
    facts: dict[str, Any] = {
        "rank": rank,
        "world_size": world_size,
        "host": socket.gethostname(),
        "node_rank": place.node_rank,
        "local_rank": place.local_rank,
        "local_world_size": place.local_world_size,
        "pid": os.getpid(),
        "device": device,
    }
    topology: dict[str, Any] = {}
    try:
        topology["cpu_affinity"] = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    topology["nics"] = _nics()
    # the interfaces the job's libraries were told to use, if any
    chosen = {k: os.environ[k] for k in NIC_VARIABLES if os.environ.get(k)}
    if chosen:
        topology["nic_env"] = chosen
    facts["topology"] = topology
    return facts


def device_facts(local_rank: int | None) -> tuple[str, dict[str, Any]]:
    """This rank's device and, for a GPU, its name and NUMA node."""
    try:
        import torch

        if torch.cuda.is_available():
            index = torch.cuda.current_device() if local_rank is None else local_rank
            index %= max(torch.cuda.device_count(), 1)
            props = torch.cuda.get_device_properties(index)
            extra: dict[str, Any] = {"device_name": props.name}
            bus = getattr(props, "pci_bus_id", None)
            if bus is None and hasattr(props, "pci_domain_id"):
                bus = (
                    f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
                )
            if isinstance(bus, str):
                extra["pci_bus_id"] = bus.lower()
                numa = _read(Path("/sys/bus/pci/devices") / bus.lower() / "numa_node")
                extra["numa_node"] = _int_or_none(numa)
            return f"cuda:{index}", extra
    except Exception:  # device facts are best effort
        pass
    return "cpu", {}
