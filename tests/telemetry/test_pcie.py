"""PCIe distance classes on sysfs trees with the real layout, against the matrices
``nvidia-smi topo -m`` prints for such hosts (its legend: X self; PIX at most one PCIe
switch; PXB several switches, no host bridge; PHB through a host bridge; NODE between
host bridges of one NUMA node; SYS across NUMA nodes; NV# bonded NVLinks)."""

from __future__ import annotations

from syncpace.telemetry import pcie
from sysfs_trees import switch_host, two_socket_host

TWO_SOCKET = """
      GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7 NIC0 NIC1 NIC2 NIC3
GPU0   X   PIX  NODE NODE SYS  SYS  SYS  SYS  PIX  NODE SYS  SYS
GPU1  PIX   X   NODE NODE SYS  SYS  SYS  SYS  PIX  NODE SYS  SYS
GPU2  NODE NODE  X   PIX  SYS  SYS  SYS  SYS  NODE PIX  SYS  SYS
GPU3  NODE NODE PIX   X   SYS  SYS  SYS  SYS  NODE PIX  SYS  SYS
GPU4  SYS  SYS  SYS  SYS   X   PIX  PHB  PHB  SYS  SYS  PIX  PHB
GPU5  SYS  SYS  SYS  SYS  PIX   X   PHB  PHB  SYS  SYS  PIX  PHB
GPU6  SYS  SYS  SYS  SYS  PHB  PHB   X   PIX  SYS  SYS  PHB  PIX
GPU7  SYS  SYS  SYS  SYS  PHB  PHB  PIX   X   SYS  SYS  PHB  PIX
NIC0  PIX  PIX  NODE NODE SYS  SYS  SYS  SYS   X   NODE SYS  SYS
NIC1  NODE NODE PIX  PIX  SYS  SYS  SYS  SYS  NODE  X   SYS  SYS
NIC2  SYS  SYS  SYS  SYS  PIX  PIX  PHB  PHB  SYS  SYS   X   PHB
NIC3  SYS  SYS  SYS  SYS  PHB  PHB  PIX  PIX  SYS  SYS  PHB   X
"""

SWITCH = """
      GPU0 GPU1 GPU2 GPU3 NIC0 NIC1 NIC2
GPU0   X   NV4  PXB  PXB  PXB  PXB  PHB
GPU1  NV4   X   PXB  PXB  PXB  PXB  PHB
GPU2  PXB  PXB   X   PIX  PXB  PXB  PHB
GPU3  PXB  PXB  PIX   X   PXB  PXB  PHB
NIC0  PXB  PXB  PXB  PXB   X   PIX  PHB
NIC1  PXB  PXB  PXB  PXB  PIX   X   PHB
NIC2  PHB  PHB  PHB  PHB  PHB  PHB   X
"""


def parse(table: str) -> dict[str, dict[str, str]]:
    lines = [line.split() for line in table.strip().splitlines()]
    names = lines[0]
    return {row[0]: dict(zip(names, row[1:], strict=True)) for row in lines[1:]}


def test_two_socket_host_with_eight_gpus_and_four_nics(tmp_path):
    two_socket_host(tmp_path)
    topo = pcie.host_topology(tmp_path)
    assert topo["matrix"] == parse(TWO_SOCKET)
    assert [g["pci"] for g in topo["gpus"]][:3] == ["0000:1a:00.0", "0000:1b:00.0", "0000:3d:00.0"]
    assert [n["ib_devices"] for n in topo["nics"]] == [[f"mlx5_{i}"] for i in range(4)]
    assert topo["nics"][0]["netdevs"] == ["ib0"]
    path = ["0000:ae:02.0", "0000:c0:00.0", "0000:c1:00.0", "0000:c2:00.0"]
    assert topo["gpus"][6]["path"] == path
    assert topo["numa_nodes"] == {"0": "0-23,48-71", "1": "24-47,72-95"}
    assert [g["numa_node"] for g in topo["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_pcie_switch_host_and_nvlink(tmp_path):
    switch_host(tmp_path)
    links = {"0000:05:00.0": {"0000:06:00.0": 4}, "0000:06:00.0": {"0000:05:00.0": 4}}
    topo = pcie.host_topology(tmp_path, links)
    assert topo["matrix"] == parse(SWITCH)
    # without NVML the same pair is two GPUs on one switch
    assert pcie.host_topology(tmp_path)["matrix"]["GPU0"]["GPU1"] == "PIX"
    assert [n["netdevs"] for n in topo["nics"]] == [["eth0"], ["eth1"], ["eth2"]]


def test_the_matrix_prints_as_nvidia_smi_does(tmp_path):
    switch_host(tmp_path)
    text = pcie.format_matrix(pcie.host_topology(tmp_path))
    lines = text.splitlines()
    assert lines[0].split("\t")[1:] == [
        *"GPU0 GPU1 GPU2 GPU3 NIC0 NIC1 NIC2".split(),
        "CPU Affinity",
        "NUMA Affinity",
    ]
    assert lines[1].split() == ["GPU0", "X", "PIX", "PXB", "PXB", "PXB", "PXB", "PHB", "0-31", "0"]
    assert lines[-3:] == ["  NIC0: eth0", "  NIC1: eth1", "  NIC2: eth2"]


def test_devices_sysfs_does_not_know_are_none(tmp_path):
    switch_host(tmp_path)
    assert pcie.read_device(tmp_path, "0000:ff:00.0") is None
    gpu = pcie.read_device(tmp_path, "0000:05:00.0")
    assert gpu is not None and gpu.levels == ("0000:00:01.0", "0000:01:00.0", "0000:03:00.0")
    assert pcie.parse_cpulist("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert pcie.host_topology(tmp_path / "nowhere")["gpus"] == []
