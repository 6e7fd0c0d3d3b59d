"""NVML at its module boundary: a stand-in with the nvidia-ml-py API (no GPU here), the
real module failing cleanly without a driver, and the GPU state in the analysis.

Unverified on real GPUs: no device machine was available for these tests."""

from __future__ import annotations

from types import SimpleNamespace

import polars as pl
import pytest

from fake_nvml import BUS, FakeNvml, gpu_states
from syncpace.analysis.hostcounters import host_metrics
from syncpace.telemetry import nvml
from syncpace.telemetry.sampler import HostSampler
from syncpace.trace.reader import load_host_files
from sysfs_trees import switch_host, write_netdev, write_netstat, write_snmp


def test_inventory_and_nvlinks_direct_and_through_switches():
    direct = FakeNvml({0: [(BUS[1], 0)] * 4, 1: [(BUS[0], 0)] * 4}, gpu_states())
    gpus = nvml.Gpus(direct)
    assert [g["pci"] for g in gpus.inventory] == [
        "0000:05:00.0",
        "0000:06:00.0",
        "0000:09:00.0",
        "0000:0a:00.0",
    ]
    assert gpus.nvlink_counts()["0000:05:00.0"] == {"0000:06:00.0": 4}
    switched = FakeNvml({i: [("00000000:C1:00.0", 2)] * 18 for i in range(4)}, gpu_states())
    counts = nvml.Gpus(switched).nvlink_counts()
    assert counts["0000:09:00.0"] == {"0000:05:00.0": 18, "0000:06:00.0": 18, "0000:0a:00.0": 18}


def test_a_query_the_gpu_refuses_is_dropped_after_once():
    fake = FakeNvml({}, gpu_states(1))
    gpus = nvml.Gpus(fake)
    first = dict(zip((s[3] for s in gpus.series), gpus.read(), strict=True))
    assert first["sm_clock_mhz"] == 1980 and first["power_limit_mw"] == 700_000
    assert first["utilization_pct"] is None
    assert "0.util" in gpus._unsupported  # not asked again


def test_the_real_module_without_a_driver_says_why():
    pytest.importorskip("pynvml")
    module, why = nvml.open_nvml()
    if module is not None:
        pytest.skip("this machine has an NVIDIA driver")
    assert why.startswith("NVML unavailable")


def test_gpu_state_and_nvlink_reach_the_trace_and_the_analysis(tmp_path):
    tree = switch_host(tmp_path / "root")
    write_netdev(tree, {"eth0": {}, "eth1": {}, "eth2": {}})
    write_snmp(tree, {})
    write_netstat(tree, {})
    states = gpu_states()
    fake = FakeNvml({0: [(BUS[1], 0)] * 4, 1: [(BUS[0], 0)] * 4}, states)
    clock = SimpleNamespace(t=0)
    sampler = HostSampler(
        tmp_path / "run",
        "gpu-host",
        root=tree.root,
        now=lambda: clock.t,
        nvml_module=fake,
        qdisc_dumper=SimpleNamespace(dump=dict, close=lambda: None),
    )
    for tick in range(10):
        # GPU 2 is power-capped and slow from the fourth sample on
        if tick == 3:
            states[2].update(sm=1410, power=700_000, reasons=0x4)
        sampler.step(slow=True)
        clock.t += 100_000_000
    sampler.close()
    assert fake.initialised is False  # shut down at close
    counters, hosts = load_host_files(tmp_path / "run", [])
    meta = hosts["gpu-host"]
    assert meta["nvml"] == {"available": True}
    assert meta["topology"]["matrix"]["GPU0"]["GPU1"] == "NV4"
    sm = counters.filter(pl.col("counter") == "sm_clock_mhz", pl.col("device") == "0000:09:00.0")
    assert sm["value"].to_list() == [1980, 1980, 1410, 1410]
    ranks = {
        r: {"host": "gpu-host", "pci_bus_id": BUS[r][4:].lower(), "topology": {}} for r in range(4)
    }
    metrics = host_metrics(counters, hosts, ranks)
    state = metrics.ranks[2]["gpu_state"]
    # capped from 0.3 s to the last sample at 0.9 s: 6 of the 9 intervals
    assert state["power_capped_share"] == pytest.approx(6 / 9)
    assert state["sm_clock_mhz_p50"] == 1410
    assert metrics.ranks[0]["gpu_state"]["power_capped_share"] == 0.0
    assert metrics.ranks[0]["gpu"] == "GPU0" and metrics.ranks[0]["gpu_nic_class"] == "PXB"
