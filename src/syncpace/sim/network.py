"""Settings shared by both network tiers, and the pieces they have in common."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from syncpace.config import check_choice, check_numbers, setting
from syncpace.errors import ConfigError
from syncpace.sim.collectives import ALGORITHMS, Phase
from syncpace.sim.topology import GB, Topology

TIERS = ("analytical", "flow", "packet", "auto")
TCP_VARIANTS = ("cubic", "newreno", "bbr")
SHAPERS = ("wire", "tbf")
_FLOW = re.compile(r"\s*(\d+)\s*->\s*(\d+)\s*(?:@\s*(\S+?)\s*)?")
_FLOW_SYNTAX = "expected 'SRC->DST' (greedy) or 'SRC->DST@F' (F of the NIC rate, 0 < F < 1)"
#: ``Topology.route``'s columns of a flow between nodes in the order its packets cross
#: them (NIC up, leaf up, pod up, pod down, leaf down, NIC down), without the far-GPU
#: detours (columns 2 and 3: host traffic does not start at a GPU).
PATH_ORDER = [0, 4, 6, 7, 5, 1]
MIN_LEFT = 0.05  # share of a link fixed-rate traffic always leaves (on_load caps at 0.95)


@dataclass(frozen=True)
class HostFlow:
    """A persistent flow between two of the job's nodes: greedy when ``share`` is None
    (max-min fair share, infinite demand), else ``share`` x the NIC rate, never backing off."""

    src: int
    dst: int
    share: float | None


def parse_host_flow(entry: object) -> HostFlow:
    """``"SRC->DST"`` or ``"SRC->DST@F"``; a ConfigError names the entry otherwise."""
    m = _FLOW.fullmatch(entry) if isinstance(entry, str) else None
    if m is None:
        raise ConfigError(f"background_flows entry {entry!r}: {_FLOW_SYNTAX}")
    src, dst = int(m[1]), int(m[2])
    if src == dst:
        raise ConfigError(f"background_flows entry {entry!r}: source and destination are one node")
    share = None
    if m[3] is not None:
        try:
            share = float(m[3])
        except ValueError:
            raise ConfigError(f"background_flows entry {entry!r}: {_FLOW_SYNTAX}") from None
        if not 0 < share < 1:
            raise ConfigError(
                f"background_flows entry {entry!r}: rate share must be in (0, 1), got {m[3]}"
            )
    return HostFlow(src, dst, share)


@dataclass(kw_only=True, slots=True)
class NetworkSpec:
    tier: str = setting(
        "analytical",
        "analytical (vectorised, big sweeps), flow (max-min fair), packet (TCP on ns-3) "
        "or auto (picked per run by syncpace.sim.tierpick).",
    )
    auto_budget_s: float = setting(
        60.0, "auto: seconds a finer tier may be estimated to take before a coarser one is used."
    )
    algorithm: str = setting("hierarchical", "All-reduce algorithm: ring, tree, rhd, hierarchical.")
    alpha_us: float = setting(8.0, "Latency per step of a collective across nodes, us.")
    alpha_intra_us: float = setting(2.0, "Latency per step inside a node, us.")
    background_load: float = setting(0.0, "Mean share of switch uplinks used by other jobs.")
    background_duty: float = setting(0.5, "Share of time another job's traffic is on a link.")
    background_steps: float = setting(5.0, "analytical: mean on/off period, iterations.")
    background_flow_mb: float = setting(64.0, "flow: mean size of another job's flow, MiB.")
    exit_jitter_us: float = setting(2.0, "Spread of per-rank completion after a collective, us.")
    background_flows: tuple[str, ...] = setting(
        (),
        "Persistent flows between the job's nodes: 'SRC->DST' greedy (max-min fair share), "
        "'SRC->DST@F' fixed at F (0 < F < 1) of the NIC rate.",
    )
    packet_tcp: str = setting(
        "cubic",
        "TCP congestion control, cubic (Linux's default), newreno or bbr "
        "(net.ipv4.tcp_congestion_control of the hosts modelled): the packet tier runs it; "
        "the fast tiers take from it how full greedy background_flows keep their queue.",
    )
    packet_delayed_ack: int = setting(
        2, "packet: segments per delayed ACK (2: Linux's default; 1: an ACK per segment)."
    )
    packet_queue_ms: float = setting(
        50.0,
        "Each link's FIFO holds this much of its rate plus a tbf bucket: the packet tier's "
        "queues, and the most a greedy flow's standing queue holds in the fast tiers.",
    )
    standing_queue: bool = setting(
        True,
        "analytical, flow: a greedy background flow keeps the queue of the link it saturates "
        "standing, and every job transfer crossing it waits its drain time per step.",
    )
    bbr_queue_ms: float = setting(
        7.0,
        "analytical, flow: the standing queue one greedy bbr flow keeps, in ms of its "
        "bottleneck's rate (loss-based flows fill the queue up to their socket buffer).",
    )
    packet_shaper: str = setting(
        "wire",
        "packet: wire (each link sends every packet at its rate, as a NIC does) or tbf "
        "(Linux's token bucket in front of a veth, as the emulated fabric shapes its links: "
        "a rested link passes its bucket at once).",
    )
    packet_mtu: int = setting(1500, "packet: MTU of every link, bytes.")
    packet_warm: int = setting(
        0,
        "packet: steps (the step's collectives, back to back) run before the measured one, "
        "each after the step's compute, so its connections carry the state a job's keep.",
    )
    packet_samples: int = setting(
        4, "packet: runs per collective at random offsets when background_flows compete."
    )
    packet_settle_s: float = setting(
        1.0, "packet: simulated seconds background_flows run before the job's first offset."
    )
    packet_span_s: float = setting(
        2.0, "packet: the offsets spread over this many simulated seconds after the settling."
    )
    service_quantiles: tuple[float, ...] = setting(
        (),
        "Per iteration, every collective's time times a draw from these quantiles (evenly "
        "spaced probabilities 0..1): the measured spread of communication; empty: none.",
    )

    def __post_init__(self) -> None:
        check_numbers(
            self,
            alpha_us="[0, 1e7]",
            alpha_intra_us="[0, 1e7]",
            background_load="[0, 1)",
            background_duty="(0, 1]",
            background_steps="[1, 1e7]",
            background_flow_mb="(0, 1e7]",
            exit_jitter_us="[0, 1e7]",
            service_quantiles="(0, 1000]",
            packet_delayed_ack="[1, 64]",
            packet_queue_ms="(0, 10000]",
            bbr_queue_ms="[0, 10000]",
            packet_mtu="[576, 9000]",
            packet_warm="[0, 100]",
            packet_samples="[1, 1000]",
            packet_settle_s="[0, 3600]",
            auto_budget_s="(0, 1e9]",
            packet_span_s="[0, 3600]",
        )
        check_choice(self, "tier", TIERS)
        check_choice(self, "packet_tcp", TCP_VARIANTS)
        check_choice(self, "packet_shaper", SHAPERS)
        self.service_quantiles = tuple(float(q) for q in self.service_quantiles)
        if len(self.service_quantiles) == 1 or any(
            b < a for a, b in zip(self.service_quantiles, self.service_quantiles[1:], strict=False)
        ):
            raise ConfigError("service_quantiles: at least 2, and they must not decrease")
        check_choice(self, "algorithm", ALGORITHMS)
        flows = self.background_flows
        if isinstance(flows, str):  # one string: a comma-separated list
            flows = [f.strip() for f in flows.split(",") if f.strip()]
        self.background_flows = tuple(flows)
        for entry in self.background_flows:
            parse_host_flow(entry)

    def host_flows(self) -> list[HostFlow]:
        return [parse_host_flow(entry) for entry in self.background_flows]

    @property
    def on_load(self) -> float:
        """Share of a link other jobs take while their traffic is on."""
        return min(self.background_load / self.background_duty, 0.95)


def latency_s(phase: Phase, topo: Topology, spec: NetworkSpec) -> float:
    """α part of a phase: steps x (inter- or intra-node α), plus the far-GPU detour."""
    if phase.intra_only:
        return phase.steps * spec.alpha_intra_us * 1e-6
    far = topo.far[topo.local_of(phase.src)].any() or topo.far[topo.local_of(phase.dst)].any()
    extra = topo.spec.far_latency_us if far else 0.0
    return phase.steps * (spec.alpha_us + extra) * 1e-6


def phase_hashes(topo: Topology, phase: Phase, salt: np.ndarray | int) -> np.ndarray:
    """ECMP hash of every flow; ``salt`` varies per collective only for per_collective."""
    if topo.spec.ecmp != "per_collective":
        salt = 0
    salt = np.atleast_1d(np.asarray(salt, dtype=np.int64))
    return np.stack([topo.flow_hash(phase.src, phase.dst, int(s)) for s in salt])


@dataclass(frozen=True)
class HostTraffic:
    """``background_flows`` laid on a topology: the link capacities fixed-rate flows leave,
    and the links of every greedy flow."""

    capacity: np.ndarray  # (L,) bytes/s
    greedy: list[np.ndarray]  # link ids of each greedy flow, in path order

    def greedy_count(self) -> np.ndarray | None:
        """(L,) number of greedy flows on each link, None when there are none."""
        if not self.greedy:
            return None
        return np.bincount(np.concatenate(self.greedy), minlength=self.capacity.size).astype(float)


def host_traffic(topo: Topology, spec: NetworkSpec) -> HostTraffic:
    """Route ``spec.background_flows`` NIC to NIC: node ``n``'s first NIC (the one of its
    local GPU 0) to the destination node's, over the links a job flow between ranks
    ``n * gpus_per_node`` of both nodes takes, less the private far-GPU links (host
    traffic does not start at a GPU). The spine (and core) come from the topology's ECMP
    hash with salt 0: a persistent connection keeps one path, as a job connection under
    ``static`` ECMP does, whatever ``ecmp`` says."""
    flows = spec.host_flows()
    if not flows:
        return HostTraffic(topo.capacity, [])
    nodes = topo.spec.nodes
    for f, entry in zip(flows, spec.background_flows, strict=True):
        if max(f.src, f.dst) >= nodes:
            raise ConfigError(
                f"background_flows entry {entry!r}: node {max(f.src, f.dst)} is outside the "
                f"job ({nodes} nodes: 0..{nodes - 1})"
            )
    g = topo.spec.gpus_per_node
    src = np.array([f.src for f in flows], dtype=np.int64) * g
    dst = np.array([f.dst for f in flows], dtype=np.int64) * g
    routes = topo.route(src, dst, topo.flow_hash(src, dst, 0))[:, PATH_ORDER]
    nic = topo.spec.nic_gbps * GB
    fixed = np.zeros(topo.n_links)
    greedy = []
    for f, r in zip(flows, routes, strict=True):
        links = r[r >= 0]
        if f.share is None:
            greedy.append(links)
        else:
            fixed[links] += f.share * nic
    capacity = np.maximum(topo.capacity - fixed, MIN_LEFT * topo.capacity)
    return HostTraffic(capacity, greedy)
