"""What the hosts counted: NIC utilisation and loss, TCP retransmissions, InfiniBand port
counters, GPU clocks and throttling, and where each rank sits against its GPU and NIC.

Measured from ``trace.counters`` and the host files (docs/telemetry.md), without
judgement. Rows are written only where a series changes, with both ends of every
unchanged span, so consecutive rows of a counter give exact per-interval increments
and a gauge's value holds until its next row. Counter decreases (a driver reset) count
as zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

#: Windows of this length are the default unit of "peak" utilisation (bursts shorter
#: than a window are in ``util_peak_sample``, at the sampler's own cadence).
WINDOW_NS = 100_000_000
#: At most this many windows per series are kept for plots (longer runs use wider ones).
MAX_WINDOWS = 4000

_THROTTLE_POWER = 0x4 | 0x80  # software power cap, hardware power brake
_THROTTLE_THERMAL = 0x20 | 0x40
_THROTTLE_HW = 0x8
_IB_WORD = 4  # port_xmit_data / port_rcv_data count 4-byte words
_IB_NOTABLE = (
    "port_xmit_wait",
    "port_xmit_discards",
    "port_rcv_errors",
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_rcv_remote_physical_errors",
    "np_ecn_marked_roce_packets",
    "np_cnp_sent",
    "rp_cnp_handled",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "out_of_buffer",
)
_CLASS_ORDER = {"X": 0, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}


@dataclass(frozen=True)
class HostMetrics:
    """``nic``: one row per (host, device, direction) with utilisation and loss;
    ``windows``: per (host, device, direction) and window: utilisation, the bytes
    counted, drops and the host's TCP retransmissions; ``hosts``: per host, TCP, qdisc,
    InfiniBand and GPU summaries; ``ranks``: per rank, its GPU, NUMA nodes and NIC path."""

    window_ns: int
    nic: pl.DataFrame
    windows: pl.DataFrame
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: the CPU and cgroup rows as sampled, for the CPU over a part of the run
    cpu_rows: pl.DataFrame = field(default_factory=pl.DataFrame, compare=False)

    def cpu_within(self, window: tuple[int, int]) -> dict[str, dict[str, Any]]:
        """Per host, its CPU summary (as ``hosts[h]["cpu"]``) over ``window`` (ns) only:
        what a part of the run shows, for judging whether a host stands out in each
        part: each series cut at the window's ends, its value there read between its
        rows (a series is written only where it changes, with both ends of an unchanged
        span). A series that saw less than half of the window has none of it."""
        if self.cpu_rows.height == 0:
            return {}
        rows = _within(self.cpu_rows, window)
        out = {}
        for host in sorted(rows["host"].unique().to_list()):
            got = _cpu(rows, host)
            if got:
                out[str(host)] = got
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "window_ms": self.window_ns / 1e6,
            "nics": self.nic.to_dicts(),
            "hosts": self.hosts,
            "ranks": {str(k): v for k, v in self.ranks.items()},
        }


def _within(rows: pl.DataFrame, window: tuple[int, int]) -> pl.DataFrame:
    """``rows`` (counter samples) of each series that saw at least half of ``window``
    (ns), cut to the part it saw: its rows inside, and its value at each end read
    linearly between the rows around it (a cumulative counter grows evenly between two
    samples; a gauge holds). Shares are of the span, so the part stands for the whole."""
    keys = ["host", "source", "device", "counter"]
    parts = []
    for _key, series in rows.sort("time_ns").group_by(keys, maintain_order=True):
        t = series["time_ns"].to_numpy()
        if len(t) < 2:
            continue
        # the part of the window the series saw; at least half of it, or none
        t0, t1 = max(window[0], int(t[0])), min(window[1], int(t[-1]))
        if 2 * (t1 - t0) < window[1] - window[0]:
            continue
        v = series["value"].to_numpy().astype(np.float64)
        inside = series.filter(pl.col("time_ns").is_between(t0, t1, closed="none"))
        ends = series.head(2).with_columns(
            time_ns=pl.Series([t0, t1]).cast(series["time_ns"].dtype),
            value=pl.Series(np.interp([t0, t1], t, v)).cast(series["value"].dtype),
        )
        parts.append(pl.concat([ends.head(1), inside, ends.tail(1)]))
    return pl.concat(parts) if parts else rows.clear()


def _series(counters: pl.DataFrame, source: str, counter: str) -> pl.DataFrame:
    return counters.filter(pl.col("source") == source, pl.col("counter") == counter).sort(
        "host", "device", "port", "time_ns"
    )


def _increase(values: np.ndarray) -> int:
    """Total increase of a counter, resets counted as zero."""
    if len(values) < 2:
        return 0
    return int(np.clip(np.diff(values), 0, None).sum())


def _totals(counters: pl.DataFrame, source: str) -> dict[tuple[str, str, int, str], int]:
    """(host, device, port, counter) -> increase over the run, for every counter of source."""
    part = counters.filter(pl.col("source") == source).sort("time_ns")
    out: dict[tuple[str, str, int, str], int] = {}
    for key, frame in part.group_by("host", "device", "port", "counter"):
        out[(str(key[0]), str(key[1]), int(key[2]), str(key[3]))] = _increase(  # type: ignore[arg-type]
            frame["value"].to_numpy()
        )
    return out


def _gauge_at(times: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """A gauge's value in force at each of ``at`` (its last row at or before; the first
    row before it)."""
    if len(times) == 0:
        return np.full(len(at), np.nan)
    idx = np.clip(np.searchsorted(times, at, side="right") - 1, 0, len(times) - 1)
    return values[idx].astype(np.float64)


def _window_grid(t0: int, t1: int, window_ns: int) -> tuple[np.ndarray, int]:
    span = max(t1 - t0, 1)
    width = max(window_ns, -(-span // MAX_WINDOWS))
    edges = np.arange(t0, t1 + 1, width, dtype=np.int64)
    if len(edges) < 2 or edges[-1] < t1:
        edges = np.append(edges, edges[-1] + width if len(edges) else t0 + width)
    return edges, width


def _per_window(times: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Increase of a cumulative counter within each window (linear between rows)."""
    if len(times) < 2:
        return np.zeros(len(edges) - 1)
    clean = np.concatenate([[0], np.cumsum(np.clip(np.diff(values), 0, None))]).astype(float)
    cumulative = np.interp(edges, times, clean)
    return np.diff(cumulative)


def _possible(util: float | None) -> float | None:
    """A utilisation, or ``None`` above the link rate (no real link carries more)."""
    return util if util is None or util <= 1.0 else None


def _nic_tables(counters: pl.DataFrame, window_ns: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    nic = counters.filter(pl.col("source") == "nic")
    if nic.height == 0:
        return pl.DataFrame(), pl.DataFrame()
    t0 = int(counters["time_ns"].min())  # type: ignore[arg-type]
    t1 = int(counters["time_ns"].max())  # type: ignore[arg-type]
    edges, width = _window_grid(t0, t1, window_ns)
    qdisc = counters.filter(pl.col("source") == "qdisc")
    retrans = _series(counters, "tcp", "RetransSegs")
    rows, windows = [], []
    for (host, device), frame in nic.group_by("host", "device", maintain_order=True):
        get = {
            name: f.sort("time_ns")
            for (name,), f in frame.group_by("counter")  # type: ignore[misc]
        }
        rate = get.get("link_rate_bps")
        rate_t = rate["time_ns"].to_numpy() if rate is not None else np.array([], np.int64)
        rate_v = rate["value"].to_numpy() if rate is not None else np.array([])
        q = {
            name: f.sort("time_ns")
            for (name,), f in qdisc.filter(
                pl.col("host") == host, pl.col("device") == device
            ).group_by("counter")  # type: ignore[misc]
        }
        host_retrans = retrans.filter(pl.col("host") == host)
        tcp_windows = _per_window(
            host_retrans["time_ns"].to_numpy(), host_retrans["value"].to_numpy(), edges
        )
        for direction in ("rx", "tx"):
            b = get.get(f"{direction}_bytes")
            if b is None or b.height < 1:
                continue
            bt, bv = b["time_ns"].to_numpy(), b["value"].to_numpy()
            total_bytes = _increase(bv)

            def total(name: str, table: dict = get) -> int:
                return _increase(table[name]["value"].to_numpy()) if name in table else 0

            packets = total(f"{direction}_packets")
            dropped = total(f"{direction}_dropped")
            errors = total(f"{direction}_errors")
            qdrops = 0
            if direction == "tx" and "drops" in q:
                qdrops = _increase(q["drops"]["value"].to_numpy())
            per_window = _per_window(bt, bv, edges)
            w_rate = _gauge_at(rate_t, rate_v, edges[:-1])
            util = np.where(w_rate > 0, per_window * 8 / (width / 1e9) / w_rate, np.nan)
            # above the link rate is no measurement (counters read at uneven times):
            # left out, and counted (analysis.limits)
            impossible = util > 1.0
            util[impossible] = np.nan
            # at the sampler's cadence: between consecutive rows
            sample_peak = None
            if len(bt) >= 2:
                dt = np.diff(bt) / 1e9
                inc = np.clip(np.diff(bv), 0, None)
                r = _gauge_at(rate_t, rate_v, bt[1:])
                ok = (dt > 0) & (r > 0)
                if ok.any():
                    sample_peak = float(np.max(inc[ok] * 8 / dt[ok] / r[ok]))
                    sample_peak = sample_peak if sample_peak <= 1.0 else None
            drop_w = np.zeros(len(edges) - 1)
            if f"{direction}_dropped" in get:
                d = get[f"{direction}_dropped"]
                drop_w = _per_window(d["time_ns"].to_numpy(), d["value"].to_numpy(), edges)
            if direction == "tx" and "drops" in q:
                d = q["drops"]
                drop_w = drop_w + _per_window(d["time_ns"].to_numpy(), d["value"].to_numpy(), edges)
            span_s = max((bt[-1] - bt[0]) / 1e9, 1e-9) if len(bt) > 1 else 0.0
            mean_rate = float(np.nanmean(rate_v)) if len(rate_v) else float("nan")
            valid = util[~np.isnan(util)]
            rows.append(
                {
                    "host": host,
                    "device": device,
                    "direction": direction,
                    "link_rate_bps": int(rate_v[-1]) if len(rate_v) else None,
                    "bytes": total_bytes,
                    "packets": packets,
                    "dropped": dropped,
                    "errors": errors,
                    "qdisc_drops": qdrops,
                    "drop_ratio": (dropped + qdrops) / max(packets + dropped + qdrops, 1),
                    "util_mean": _possible(
                        total_bytes * 8 / span_s / mean_rate if span_s and mean_rate > 0 else None
                    ),
                    "util_peak": float(valid.max()) if len(valid) else None,
                    "util_peak_sample": sample_peak,
                    "saturated_share": float((valid >= 0.95).mean()) if len(valid) else None,
                    "util_windows": int(len(valid) + impossible.sum()),
                    "util_unmeasurable_windows": int(impossible.sum()),
                }
            )
            windows.append(
                pl.DataFrame(
                    {
                        "host": [host] * len(util),
                        "device": [device] * len(util),
                        "direction": [direction] * len(util),
                        "start_ns": edges[:-1],
                        "end_ns": edges[1:],
                        "util": util,
                        # what was counted, whatever the NIC declares: a NIC without a
                        # speed (a veth) measures no utilisation but still its bytes
                        "bytes": per_window.astype(np.float64),
                        "drops": drop_w,
                        "tcp_retrans": tcp_windows,
                    }
                )
            )
    return pl.DataFrame(rows), (pl.concat(windows) if windows else pl.DataFrame())


def _tcp(totals: dict, ext: dict, host: str) -> dict[str, Any]:
    def get(name: str, table: dict = totals) -> int:
        return int(table.get((host, "", -1, name), 0))

    out_segs, retrans = get("OutSegs"), get("RetransSegs")
    return {
        "out_segs": out_segs,
        "in_segs": get("InSegs"),
        "retrans_segs": retrans,
        "retrans_ratio": retrans / out_segs if out_segs else 0.0,
        "in_errs": get("InErrs"),
        "out_rsts": get("OutRsts"),
        "timeouts": get("TCPTimeouts", ext),
        "lost_retransmits": get("TCPLostRetransmit", ext),
        "fast_retrans": get("TCPFastRetrans", ext),
        "backlog_drops": get("TCPBacklogDrop", ext),
    }


def _ib(counters: pl.DataFrame, host: str) -> list[dict[str, Any]]:
    part = counters.filter(pl.col("host") == host, pl.col("source").is_in(["ib", "ib_hw"]))
    ports = []
    for (device, port), frame in part.group_by("device", "port", maintain_order=True):
        entry: dict[str, Any] = {"device": device, "port": int(port)}  # type: ignore[arg-type]
        for (name,), f in frame.sort("time_ns").group_by("counter"):  # type: ignore[misc]
            values = f["value"].to_numpy()
            if name in ("rate_bps", "state", "phys_state"):
                entry[str(name)] = int(values[-1])
            elif name in ("port_xmit_data", "port_rcv_data"):
                entry[f"{name}_bytes"] = _increase(values) * _IB_WORD
            elif name in _IB_NOTABLE or name in ("port_xmit_packets", "port_rcv_packets"):
                entry[str(name)] = _increase(values)
        ports.append(entry)
    return ports


def _gpus(counters: pl.DataFrame, host: str) -> dict[str, dict[str, Any]]:
    """Per GPU (PCI address): time-weighted throttle shares and clock/power percentiles."""
    part = counters.filter(pl.col("host") == host, pl.col("source") == "gpu")
    out: dict[str, dict[str, Any]] = {}
    for (device,), frame in part.group_by("device", maintain_order=True):  # type: ignore[misc]
        entry: dict[str, Any] = {}
        for (name,), f in frame.sort("time_ns").group_by("counter"):  # type: ignore[misc]
            t, v = f["time_ns"].to_numpy(), f["value"].to_numpy()
            weights = np.diff(t).astype(float) if len(t) > 1 else np.ones(1)
            held = v[:-1] if len(t) > 1 else v
            if weights.sum() <= 0:
                weights, held = np.ones(len(v)), v
            if name == "throttle_reasons":
                bits = held.astype(np.int64)
                for key, mask in (
                    ("power_capped_share", _THROTTLE_POWER),
                    ("thermal_share", _THROTTLE_THERMAL),
                    ("hw_slowdown_share", _THROTTLE_HW),
                ):
                    entry[key] = float(weights[(bits & mask) != 0].sum() / weights.sum())
            elif name in ("sm_clock_mhz", "power_mw", "utilization_pct"):
                entry[f"{name}_p50"] = float(_weighted_median(held, weights))
            elif name == "temperature_c":
                entry["temperature_c_max"] = int(v.max())
            elif name in ("power_limit_mw", "max_sm_clock_mhz"):
                entry[str(name)] = int(v[-1])
        out[str(device)] = entry
    return out


def _cpu(counters: pl.DataFrame, host: str) -> dict[str, Any] | None:
    """The host's CPUs over the sampled span: how busy (host-wide), how much time tasks
    waited for a CPU (pressure), the share of the time the sampling rank's threads were
    runnable that they waited for a CPU, and the rank's cgroup: its CPU quota, the share
    of the span it was throttled at it, and the share of scheduling periods that
    throttled it. None when neither was sampled."""
    mine = counters.filter(pl.col("host") == host, pl.col("source").is_in(["cpu", "cgroup"]))
    if mine.height == 0:
        return None
    out: dict[str, Any] = {}

    def grow(source: str, counter: str) -> tuple[int, int] | None:
        rows = mine.filter(pl.col("source") == source, pl.col("counter") == counter)
        if rows.height < 2:
            return None
        rows = rows.sort("time_ns")
        t = rows["time_ns"].to_numpy()
        return _increase(rows["value"].to_numpy()), int(t[-1] - t[0])

    states = {}
    for state in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"):
        got = grow("cpu", f"{state}_ns")
        if got is not None:
            states[state] = got[0]
    total = sum(states.values())
    if total > 0:
        out["busy_share"] = round(1 - (states.get("idle", 0) + states.get("iowait", 0)) / total, 4)
        out["steal_share"] = round(states.get("steal", 0) / total, 4)
    pressure = grow("cpu", "pressure_some_us")
    if pressure is not None and pressure[1] > 0:
        out["pressure_share"] = round(min(pressure[0] * 1000 / pressure[1], 1.0), 4)
    run, wait = grow("cpu", "job_run_ns"), grow("cpu", "job_wait_ns")
    if run is not None and wait is not None and run[0] + wait[0] > 0:
        out["job_wait_share"] = round(wait[0] / (run[0] + wait[0]), 4)
    throttled, periods = grow("cgroup", "throttled_ns"), grow("cgroup", "nr_periods")
    hit = grow("cgroup", "nr_throttled")
    if throttled is not None and throttled[1] > 0:
        out["throttled_share"] = round(min(throttled[0] / throttled[1], 1.0), 4)
    if periods is not None and hit is not None and periods[0] > 0:
        out["throttled_periods_share"] = round(hit[0] / periods[0], 4)
    quota = mine.filter(pl.col("counter") == "quota_millicpu", pl.col("value") > 0)
    if quota.height:
        out["quota_cpus"] = int(quota["value"].min()) / 1000  # type: ignore[operator]
    groups = mine.filter(pl.col("source") == "cgroup")["device"].unique().to_list()
    if groups:
        out["cgroup"] = str(groups[0])
    ranks = _rank_cpu(mine)
    if ranks:
        out["ranks"] = ranks
    return out or None


def _rank_cpu(mine: pl.DataFrame) -> dict[str, dict[str, float]]:
    """Each rank the sampler measured on its own (device ``rankR``, by rank as text):
    the share of the sampled span its main thread, and its threads summed, waited for a
    CPU (``main_wait_rate``, ``wait_rate``: ns waited per ns of the span), and the share
    of the time its threads could run that they waited (``wait_share``)."""
    part = mine.filter(pl.col("source") == "cpu", pl.col("device").str.starts_with("rank"))
    out: dict[str, dict[str, float]] = {}
    for (device,), frame in part.group_by("device", maintain_order=True):  # type: ignore[misc]
        got: dict[str, tuple[int, int]] = {}
        for (name,), f in frame.sort("time_ns").group_by("counter"):  # type: ignore[misc]
            if f.height >= 2:
                t = f["time_ns"].to_numpy()
                got[str(name)] = (_increase(f["value"].to_numpy()), int(t[-1] - t[0]))
        entry: dict[str, float] = {}
        rates = (("rank_main_wait_ns", "main_wait_rate"), ("rank_wait_ns", "wait_rate"))
        for counter, key in rates:
            if counter in got and got[counter][1] > 0:
                entry[key] = round(got[counter][0] / got[counter][1], 4)
        run, wait = got.get("rank_run_ns"), got.get("rank_wait_ns")
        if run is not None and wait is not None and run[0] + wait[0] > 0:
            entry["wait_share"] = round(wait[0] / (run[0] + wait[0]), 4)
        if entry:
            out[str(device)[len("rank") :]] = entry
    return out


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, cum[-1] / 2)])


def _cpus(text: str | None) -> set[int]:
    cpus: set[int] = set()
    for part in (text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _named_nic(topology: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | None:
    """The NIC the job's libraries were told to use (NCCL_IB_HCA, NCCL_SOCKET_IFNAME,
    GLOO_SOCKET_IFNAME: first name, ``=`` exact and ``^`` exclusion prefixes ignored)."""
    for key, field_name in (
        ("NCCL_IB_HCA", "ib_devices"),
        ("NCCL_SOCKET_IFNAME", "netdevs"),
        ("GLOO_SOCKET_IFNAME", "netdevs"),
    ):
        value = env.get(key, "")
        if not value or value.startswith("^"):
            continue
        wanted = value.lstrip("=").split(",")[0].split(":")[0].strip()
        for nic in topology.get("nics", []):
            if any(n == wanted or n.startswith(wanted) for n in nic.get(field_name, [])):
                return nic
    return None


def rank_locality(meta: dict[str, Any], host: dict[str, Any] | None) -> dict[str, Any]:
    """Where one rank runs: its GPU, the NUMA nodes of its CPUs and of its GPU, the NIC
    it uses (named in its environment, else the nearest) and their PCIe class."""
    topo = (host or {}).get("topology") or {}
    facts = meta.get("topology") or {}
    affinity = set(facts.get("cpu_affinity") or [])
    nodes = {int(k): _cpus(v) for k, v in (topo.get("numa_nodes") or {}).items()}
    cpu_nodes = sorted(n for n, cpus in nodes.items() if cpus & affinity)
    out: dict[str, Any] = {"host": meta.get("host"), "cpu_numa_nodes": cpu_nodes}
    gpu = None
    bus = meta.get("pci_bus_id")
    for g in topo.get("gpus", []):
        if bus and g.get("pci") == str(bus).lower():
            gpu = g
    nic = _named_nic(topo, facts.get("nic_env") or {})
    if gpu is not None:
        row = topo.get("matrix", {}).get(gpu["name"], {})
        nics = [n for n in topo.get("nics", []) if n["name"] in row]
        nearest = min(nics, key=lambda n: _rank_class(row[n["name"]]), default=None)
        nic = nic or nearest
        out.update(gpu=gpu["name"], gpu_pci=gpu["pci"], gpu_numa_node=gpu.get("numa_node"))
        if nic is not None:
            out.update(nic=_nic_label(nic), gpu_nic_class=row.get(nic["name"]))
        if nearest is not None and nic is not None and nearest["name"] != nic["name"]:
            out.update(nearest_nic=_nic_label(nearest), nearest_class=row.get(nearest["name"]))
    elif nic is not None:
        out.update(nic=_nic_label(nic))
    anchor = out.get("gpu_numa_node")
    if anchor is None and nic is not None:
        anchor = nic.get("numa_node")
        out["nic_numa_node"] = anchor
    if anchor is not None and cpu_nodes:
        out["numa"] = (
            "local" if cpu_nodes == [anchor] else "spans" if anchor in cpu_nodes else "remote"
        )
    return out


def _rank_class(cls: str) -> int:
    return 1 if cls.startswith("NV") else _CLASS_ORDER.get(cls, 9)


def _nic_label(nic: dict[str, Any]) -> str:
    names = nic.get("ib_devices") or nic.get("netdevs") or []
    return f"{nic['name']} ({names[0]})" if names else str(nic["name"])


def host_metrics(
    counters: pl.DataFrame,
    hosts: dict[str, dict[str, Any]],
    meta: dict[int, dict[str, Any]],
    window_ns: int = WINDOW_NS,
) -> HostMetrics | None:
    """Everything the hosts recorded, or None when no host ran a sampler."""
    if not hosts and counters.height == 0:
        return None
    nic, windows = _nic_tables(counters, window_ns)
    snmp = _totals(counters, "tcp")
    ext = _totals(counters, "tcpext")
    qdisc = _totals(counters, "qdisc")
    summary: dict[str, dict[str, Any]] = {}
    for host in sorted(set(hosts) | set(counters["host"].unique().to_list())):
        facts = hosts.get(host, {})
        summary[host] = {
            "tcp": _tcp(snmp, ext, host),
            "qdisc": {
                d: {
                    "drops": qdisc.get((h, d, -1, "drops"), 0),
                    "overlimits": qdisc.get((h, d, -1, "overlimits"), 0),
                }
                for (h, d, _p, c) in qdisc
                if h == host and c == "drops"
            },
            "ib": _ib(counters, host),
            "gpus": _gpus(counters, host),
            "cpu": _cpu(counters, host),
            "nvml": facts.get("nvml"),
            "sampler": {
                k: facts.get(k) for k in ("interval_s", "ticks", "late_ticks", "cpu_s", "errors")
            },
        }
    ranks = {r: rank_locality(m, hosts.get(str(m.get("host")))) for r, m in meta.items()}
    for r, loc in ranks.items():
        pci = loc.get("gpu_pci")
        host = str(meta[r].get("host"))
        if pci and pci in summary.get(host, {}).get("gpus", {}):
            loc["gpu_state"] = summary[host]["gpus"][pci]
    cpu_rows = counters.filter(pl.col("source").is_in(["cpu", "cgroup"]))
    return HostMetrics(window_ns, nic, windows, summary, ranks, cpu_rows)
