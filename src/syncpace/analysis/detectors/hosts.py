"""What the hosts saw, attached to the findings that timing alone produced.

Runs after the detectors: network findings get the counters of the hosts involved
(TCP retransmissions, NIC and qdisc drops, utilisation peaks, InfiniBand transmit
waits and errors), and a ``healthy`` verdict gets them too when some host lost packets
or saturated a link; locality findings get each late rank's GPU–NIC PCIe class and
NUMA placement; straggler findings get the late ranks' GPU clocks, power and
throttling when NVML was sampled. A host, NIC or GPU is *named* in the summary when
its numbers pass the thresholds (``host_loss_ratio``, ``link_peak_utilisation``,
``gpu_throttle_share``); the involved hosts' numbers are in the evidence, as flat maps
(host, NIC direction or rank -> number) the report prints in units. Every host's full
numbers are in the run's metrics (``hosts``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from syncpace.analysis import modes
from syncpace.analysis.findings import Finding
from syncpace.analysis.hostcounters import HostMetrics
from syncpace.analysis.metrics import RunMetrics
from syncpace.analysis.thresholds import Thresholds

#: The built-in modes about the network, which the hosts' counters bear on (the
#: registry's ``network`` field; kept for callers that import the name).
NETWORK_MODES = modes.names(lambda m: m.network, built_in=True)
#: At most this many hosts (the worst first) in a finding's evidence.
MAX_HOSTS = 8
#: At most this many notes appended to a summary.
MAX_NOTES = 4

_CLASS_WORDS = {
    "SYS": "across the CPU sockets (SYS)",
    "NODE": "across host bridges of a NUMA node (NODE)",
    "PHB": "through the CPU's host bridge (PHB)",
    "PXB": "through several PCIe switches (PXB)",
}
_FAR = ("SYS", "NODE", "PHB")


def attach_host_evidence(
    findings: list[Finding], metrics: RunMetrics, thresholds: Thresholds
) -> list[Finding]:
    hosts = metrics.hosts
    if hosts is None:
        return findings
    out = []
    for f in findings:
        if modes.get(f.mode).network:
            f = _network(f, hosts, thresholds)
        elif f.mode == "healthy":
            f = _network(f, hosts, thresholds, only_if_named=True)
        elif f.mode == "locality_variance":
            f = _placement(f, hosts)
        elif f.mode == "straggler":
            f = _gpu_state(_placement(f, hosts), hosts, thresholds)
        out.append(f)
    return out


def _with(f: Finding, evidence: dict[str, Any], notes: list[str]) -> Finding:
    """``f`` with more evidence (flat maps of plain numbers and names, the way the
    report reads them) and its notes appended to the summary."""
    summary = f.summary
    if notes:
        summary += "; " + "; ".join(notes[:MAX_NOTES])
    return replace(f, evidence={**f.evidence, **evidence}, summary=summary)


# Network ---------------------------------------------------------------------------------


def host_counter_evidence(hosts: HostMetrics, names: list[str] | tuple[str, ...]) -> dict:
    """Per host: TCP loss, and per NIC utilisation and drops (JSON-able)."""
    out: dict[str, dict[str, Any]] = {}
    for host in names:
        summary = hosts.hosts.get(host)
        if summary is None:
            continue
        tcp = summary["tcp"]
        entry: dict[str, Any] = {
            "tcp_retrans_segs": tcp["retrans_segs"],
            "tcp_retrans_ratio": round(tcp["retrans_ratio"], 6),
            "tcp_out_segs": tcp["out_segs"],
            "tcp_timeouts": tcp["timeouts"],
        }
        nics: dict[str, dict[str, Any]] = {}
        if hosts.nic.height:
            for row in hosts.nic.filter(pl.col("host") == host).iter_rows(named=True):
                nic = nics.setdefault(row["device"], {"link_rate_bps": row["link_rate_bps"]})
                d = row["direction"]
                nic[f"{d}_util_peak"] = _round(row["util_peak"])
                nic[f"{d}_util_peak_sample"] = _round(row["util_peak_sample"])
                nic[f"{d}_util_mean"] = _round(row["util_mean"])
                nic[f"{d}_drops"] = row["dropped"] + row["qdisc_drops"]
                nic[f"{d}_drop_ratio"] = round(row["drop_ratio"], 6)
                nic[f"{d}_errors"] = row["errors"]
        entry["nics"] = nics
        ib = [
            {k: v for k, v in port.items() if v or k in ("device", "port")}
            for port in summary["ib"]
        ]
        if ib:
            entry["ib"] = ib
        out[host] = entry
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _host_notes(evidence: dict[str, dict[str, Any]], th: Thresholds) -> list[tuple[float, str]]:
    """(weight, note) for each number that passes a threshold; heavier is worse."""
    notes: list[tuple[float, str]] = []
    for host, e in evidence.items():
        ratio = e["tcp_retrans_ratio"]
        if e["tcp_retrans_segs"] and ratio >= th.host_loss_ratio:
            notes.append(
                (
                    1 + ratio,
                    f"host {host}: TCP retransmitted {_pct(ratio)} of segments "
                    f"({e['tcp_retrans_segs']}, {e['tcp_timeouts']} timeouts)",
                )
            )
        for dev, nic in e["nics"].items():
            for d, word in (("rx", "receive"), ("tx", "transmit")):
                drops, dratio = nic.get(f"{d}_drops", 0), nic.get(f"{d}_drop_ratio", 0.0)
                if drops and dratio >= th.host_loss_ratio:
                    notes.append(
                        (1 + dratio, f"host {host} {dev} dropped {_pct(dratio)} of {word} packets")
                    )
                peak = nic.get(f"{d}_util_peak")
                if peak is not None and peak >= th.link_peak_utilisation:
                    rate = nic.get("link_rate_bps")
                    of = f" of {_rate(rate)}" if rate else ""
                    notes.append((peak / 2, f"host {host} {dev} {word} peaked at {peak:.0%}{of}"))
        for port in e.get("ib", []):
            bad = {
                k: port[k]
                for k in ("port_xmit_wait", "symbol_error", "link_downed", "port_rcv_errors")
                if port.get(k)
            }
            if bad:
                what = ", ".join(f"{k} +{v}" for k, v in bad.items())
                notes.append((0.9, f"host {host} {port['device']}/{port['port']}: {what}"))
    return sorted(notes, key=lambda n: -n[0])


def _pct(ratio: float) -> str:
    return f"{ratio:.2%}" if ratio < 0.1 else f"{ratio:.1%}"


def _rate(bps: float) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:g} {unit}"
    return f"{bps:g} bit/s"


def _network(
    f: Finding, hosts: HostMetrics, th: Thresholds, only_if_named: bool = False
) -> Finding:
    """``only_if_named``: attach nothing unless some host passes a threshold (a run
    whose timing looks healthy still says when a host lost packets)."""
    # the source's hosts first (whose traffic or loss causes it), then who suffers
    source = [s for s in f.source if s in hosts.hosts]
    names = list(dict.fromkeys([*source, *f.nodes])) or sorted(hosts.hosts)
    evidence = host_counter_evidence(hosts, names)
    if not evidence:
        return f

    def loss(host: str) -> float:
        e = evidence[host]
        drops = [n.get("rx_drop_ratio", 0) + n.get("tx_drop_ratio", 0) for n in e["nics"].values()]
        return e["tcp_retrans_ratio"] + max(drops, default=0)

    ranked = sorted(evidence, key=lambda h: -loss(h))
    evidence = {h: evidence[h] for h in ranked[:MAX_HOSTS]}
    notes = [n for _w, n in _host_notes(evidence, th)]
    if only_if_named and not notes:
        return f
    return _with(f, network_evidence(evidence), notes)


_WORDS = {"rx": "receive", "tx": "transmit"}
#: At most this many NIC directions per evidence map (the highest first).
MAX_NICS = 6


def network_evidence(per_host: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The per-host numbers as flat maps, worst first: every host's TCP retransmission
    ratio, and the NICs' peak utilisation, drops and errors where there are any."""
    out: dict[str, Any] = {
        "tcp_retrans_ratio_by_host": {
            h: e["tcp_retrans_ratio"] for h, e in per_host.items() if e["tcp_out_segs"]
        },
        "tcp_retransmitted_segments_by_host": {
            h: e["tcp_retrans_segs"] for h, e in per_host.items() if e["tcp_retrans_segs"]
        },
        "tcp_timeouts_by_host": {
            h: e["tcp_timeouts"] for h, e in per_host.items() if e["tcp_timeouts"]
        },
    }
    peaks, drops, errors = {}, {}, {}
    for host, e in per_host.items():
        for dev, nic in e["nics"].items():
            for d, word in _WORDS.items():
                name = f"{host} {dev} {word}"
                if nic.get(f"{d}_util_peak") is not None:
                    peaks[name] = nic[f"{d}_util_peak"]
                if nic.get(f"{d}_drops"):
                    drops[name] = nic[f"{d}_drop_ratio"]
                if nic.get(f"{d}_errors"):
                    errors[name] = nic[f"{d}_errors"]
    top = sorted(peaks, key=lambda k: -peaks[k])[:MAX_NICS]
    out["nic_peak_utilisation_share"] = {k: peaks[k] for k in top}
    out["nic_dropped_ratio"] = dict(sorted(drops.items(), key=lambda kv: -kv[1])[:MAX_NICS])
    out["nic_errors"] = dict(sorted(errors.items(), key=lambda kv: -kv[1])[:MAX_NICS])
    ib = {
        f"{host} {p['device']}/{p['port']}": {
            k: v for k, v in p.items() if k not in ("device", "port")
        }
        for host, e in per_host.items()
        for p in e.get("ib", [])
    }
    if ib:
        out["ib_port_counters"] = ib
    return {k: v for k, v in out.items() if v}


# Placement --------------------------------------------------------------------------------


def _placement(f: Finding, hosts: HostMetrics) -> Finding:
    late = {r: hosts.ranks[r] for r in f.ranks if r in hosts.ranks}
    if not late or not any(len(v) > 2 for v in late.values()):
        return f  # only the host and CPU nodes are known: nothing to say
    others = [v for r, v in hosts.ranks.items() if r not in f.ranks]
    other_classes = sorted({v["gpu_nic_class"] for v in others if v.get("gpu_nic_class")})
    notes = []
    by_class: dict[tuple[str, str], list[int]] = {}
    for r, v in late.items():
        cls = v.get("gpu_nic_class")
        if cls in _FAR and cls not in other_classes:
            by_class.setdefault((cls, str(v.get("nic"))), []).append(r)
    for (cls, nic), ranks in sorted(by_class.items()):
        who = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
        notes.append(f"{who} reach {nic} {_CLASS_WORDS[cls]}")
    remote = [r for r, v in late.items() if v.get("numa") == "remote"]
    if remote:
        v = late[remote[0]]
        anchor = "GPU" if v.get("gpu_numa_node") is not None else "NIC"
        node = v.get("gpu_numa_node", v.get("nic_numa_node"))
        cpus = ", ".join(map(str, v["cpu_numa_nodes"]))
        notes.append(
            f"rank{'s' if len(remote) > 1 else ''} {', '.join(map(str, remote))} run on CPUs "
            f"of NUMA node {cpus}, the {anchor} is on node {node}"
        )
    evidence: dict[str, Any] = {}
    for key, name in (
        ("gpu", "gpu_by_rank"),
        ("nic", "nic_by_rank"),
        ("gpu_nic_class", "gpu_nic_class_by_rank"),
        ("nearest_nic", "nearest_nic_by_rank"),
        ("numa", "numa_placement_by_rank"),
        ("cpu_numa_nodes", "cpu_numa_nodes_by_rank"),
        ("gpu_numa_node", "gpu_numa_node_by_rank"),
        ("nic_numa_node", "nic_numa_node_by_rank"),
    ):
        values = {r: v[key] for r, v in late.items() if v.get(key) is not None}
        if values:
            evidence[name] = values
    if other_classes:
        evidence["other_ranks_gpu_nic_classes"] = other_classes
    return _with(f, evidence, notes)


# GPU state --------------------------------------------------------------------------------


def _gpu_state(f: Finding, hosts: HostMetrics, th: Thresholds) -> Finding:
    states = {r: hosts.ranks.get(r, {}).get("gpu_state") for r in f.ranks}
    late = {r: s for r, s in states.items() if s is not None}
    if not late:
        return f
    others = [
        v["gpu_state"].get("sm_clock_mhz_p50")
        for r, v in hosts.ranks.items()
        if r not in f.ranks and "gpu_state" in v
    ]
    others = [c for c in others if c is not None]
    typical = sorted(others)[len(others) // 2] if others else None
    notes = []
    for r, state in late.items():
        parts = []
        for key, word in (
            ("power_capped_share", "power-capped"),
            ("thermal_share", "thermally throttled"),
            ("hw_slowdown_share", "in hardware slowdown"),
        ):
            share = state.get(key) or 0.0
            if share >= th.gpu_throttle_share:
                parts.append(f"{word} {share:.0%} of the time")
        clock = state.get("sm_clock_mhz_p50")
        if parts and clock is not None and typical:
            parts.append(f"SM clock {clock:.0f} MHz against {typical:.0f} MHz on the others")
        if parts:
            notes.append(f"rank {r}'s GPU was " + ", ".join(parts))
    evidence: dict[str, Any] = {}
    for key in (
        "power_capped_share",
        "thermal_share",
        "hw_slowdown_share",
        "sm_clock_mhz_p50",
        "power_mw_p50",
        "temperature_c_max",
    ):
        values = {r: state[key] for r, state in late.items() if state.get(key) is not None}
        if values:
            evidence[f"gpu_{key}_by_rank"] = values
    if typical is not None:
        evidence["other_gpus_sm_clock_mhz_p50"] = typical
    return _with(f, evidence, notes)
