"""Cluster topologies: nodes of G GPUs, an intra-node fabric, NICs and switch tiers.

A topology is a table of directed links with capacities (bytes/s) and a vectorised
routing function: for arrays of (source rank, destination rank, ECMP hash) it returns
the link ids every flow crosses. Both network tiers (analytical and flow-level) share
it, so they see the same links.

Kinds:

* ``switch`` — every NIC on one non-blocking switch;
* ``leaf-spine`` (also ``leafspine``) — ``nodes_per_leaf`` nodes under a leaf; each leaf has
  one uplink to
  each of ``spines`` spines, together ``oversub`` times thinner than the leaf's NICs;
* ``fat-tree`` (also ``fattree``) — three tiers: leaves (edge) under aggregation switches in
  pods of
  ``leaves_per_pod`` leaves, pods joined by core links, oversubscribed ``oversub`` at
  the edge and ``core_oversub`` at the core.

Inside a node, GPU ``g`` uses NIC ``g * nics // G``. Local ranks in ``far_gpus`` reach
their NIC across the CPU interconnect: their network traffic passes a private link of
``far_bw_factor`` times the NIC rate and each step of their collectives pays
``far_latency_us`` more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from syncpace.config import check_choice, check_numbers, setting
from syncpace.errors import ConfigError

KINDS = ("switch", "leaf-spine", "fat-tree")
#: Earlier spellings, still read (flags and scenario files), so every verb spells a
#: topology as the emulated fabric does.
KIND_ALIASES = {"leafspine": "leaf-spine", "fattree": "fat-tree"}
INTRA = ("nvlink", "pcie")
ECMP = ("static", "per_collective", "ideal")
PLACEMENTS = ("contiguous", "scattered")
GB = 1e9


@dataclass(kw_only=True, slots=True)
class TopologySpec:
    #: The largest job the simulator takes, in nodes.
    MAX_NODES: ClassVar[int] = 100_000

    kind: str = setting("leaf-spine", "Topology: switch, leaf-spine or fat-tree.")
    nodes: int = setting(8, "Nodes of the job.")
    gpus_per_node: int = setting(8, "GPUs (ranks) per node.")
    nics_per_node: int = setting(8, "NICs per node; GPU g uses NIC g*nics//G.")
    nic_gbps: float = setting(25.0, "NIC rate in GB/s (bytes, not bits) per direction.")
    intra: str = setting("nvlink", "Intra-node fabric: nvlink (per-GPU ports) or pcie (shared).")
    intra_gbps: float = setting(150.0, "nvlink: per-GPU port rate; pcie: the node's shared rate.")
    nodes_per_leaf: int = setting(8, "Nodes under one leaf (edge) switch.")
    spines: int = setting(4, "leaf-spine: spines; fat-tree: aggregation switches per pod.")
    oversub: float = setting(1.0, "Leaf downlink : uplink capacity ratio (1 = non-blocking).")
    leaves_per_pod: int = setting(4, "fat-tree: leaves per pod.")
    cores: int = setting(4, "fat-tree: core switches.")
    core_oversub: float = setting(1.0, "fat-tree: pod-to-core oversubscription.")
    cluster_nodes: int = setting(0, "Nodes of the whole cluster (0 = the job's nodes).")
    placement: str = setting(
        "contiguous", "Job nodes in the cluster: contiguous, or scattered (random, unordered)."
    )
    ecmp: str = setting("static", "ECMP: static hash per connection, per_collective, ideal.")
    far_gpus: tuple[int, ...] = setting((), "Local ranks far from their NIC.")
    far_bw_factor: float = setting(0.5, "Share of the NIC rate a far GPU reaches.")
    far_latency_us: float = setting(2.0, "Extra latency per collective step for a far GPU.")
    far_compute_penalty: float = setting(
        0.0, "Extra compute time of a far GPU (host-device copies across the socket)."
    )

    def __post_init__(self) -> None:
        check_numbers(
            self,
            nodes=f"[1, {self.MAX_NODES}]",
            gpus_per_node="[1, 1024]",
            nics_per_node="[1, 1024]",
            nic_gbps="(0, 1e6]",
            intra_gbps="(0, 1e6]",
            nodes_per_leaf=f"[1, {self.MAX_NODES}]",
            spines="[1, 10000]",
            oversub="[1, 1000]",
            leaves_per_pod="[1, 10000]",
            cores="[1, 10000]",
            core_oversub="[1, 1000]",
            cluster_nodes=f"[0, {10 * self.MAX_NODES}]",
            far_gpus="[0, 1023]",
            far_bw_factor="(0, 1]",
            far_latency_us="[0, 1e6]",
            far_compute_penalty="[0, 100]",
        )
        self.kind = KIND_ALIASES.get(self.kind, self.kind)
        check_choice(self, "kind", KINDS)
        check_choice(self, "intra", INTRA)
        check_choice(self, "ecmp", ECMP)
        check_choice(self, "placement", PLACEMENTS)
        if self.nics_per_node > self.gpus_per_node:
            raise ConfigError("nics_per_node cannot exceed gpus_per_node")
        if self.cluster_nodes and self.cluster_nodes < self.nodes:
            raise ConfigError(f"cluster_nodes ({self.cluster_nodes}) < nodes ({self.nodes})")
        self.far_gpus = tuple(int(g) for g in self.far_gpus)
        if any(not 0 <= g < self.gpus_per_node for g in self.far_gpus):
            raise ConfigError(f"far_gpus must be local ranks < {self.gpus_per_node}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass
class Topology:
    """Links (names, capacities in bytes/s) and routing for one job placement."""

    spec: TopologySpec
    seed: int = 0
    names: list[str] = field(default_factory=list)
    capacity: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _base: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = self.spec
        total = max(s.cluster_nodes, s.nodes)
        if s.placement == "scattered" and total > s.nodes:
            rng = np.random.default_rng(self.seed + 7919)
            # the scheduler's free nodes, in the order it hands them out: rank order
            # does not follow the leaves
            self.site = rng.choice(total, s.nodes, replace=False)
        else:
            self.site = np.arange(s.nodes)
        self.cluster = total
        self.leaves = -(-total // s.nodes_per_leaf)
        self.pods = -(-self.leaves // s.leaves_per_pod)
        self.far = np.zeros(s.gpus_per_node, dtype=bool)
        self.far[list(s.far_gpus)] = True
        nic = s.nic_gbps * GB
        leaf_nics = s.nodes_per_leaf * s.nics_per_node * nic
        self._add("nic_up", s.nodes * s.nics_per_node, nic)
        self._add("nic_dn", s.nodes * s.nics_per_node, nic)
        self._add("far_up", s.nodes * s.gpus_per_node, s.far_bw_factor * nic)
        self._add("far_dn", s.nodes * s.gpus_per_node, s.far_bw_factor * nic)
        if s.intra == "nvlink":
            self._add("gpu_up", s.nodes * s.gpus_per_node, s.intra_gbps * GB)
            self._add("gpu_dn", s.nodes * s.gpus_per_node, s.intra_gbps * GB)
        else:
            self._add("pcie", s.nodes, s.intra_gbps * GB)
        # Uplinks exist for the whole cluster: background traffic of other jobs uses them.
        up = leaf_nics / (s.oversub * s.spines)
        self._add("leaf_up", self.leaves * s.spines, up)
        self._add("leaf_dn", self.leaves * s.spines, up)
        if s.kind == "fat-tree":
            pod = s.leaves_per_pod * leaf_nics / (s.oversub * s.core_oversub * s.cores)
            self._add("pod_up", self.pods * s.cores, pod)
            self._add("pod_dn", self.pods * s.cores, pod)

    def _add(self, kind: str, count: int, cap: float) -> None:
        self._base[kind] = len(self.names)
        self.names.extend(f"{kind}[{i}]" for i in range(count))
        self.capacity = np.concatenate([self.capacity, np.full(count, float(cap))])

    def base(self, kind: str) -> int:
        return self._base[kind]

    @property
    def n_links(self) -> int:
        return len(self.names)

    def uplinks(self) -> np.ndarray:
        """Switch-tier links (where other jobs' traffic and oversubscription live)."""
        if self.spec.kind == "switch":
            return np.zeros(0, dtype=np.int64)
        kinds = ["leaf_up", "leaf_dn"] + (
            ["pod_up", "pod_dn"] if self.spec.kind == "fat-tree" else []
        )
        out = []
        for k in kinds:
            count = (
                self.leaves * self.spec.spines
                if k.startswith("leaf")
                else self.pods * self.spec.cores
            )
            out.append(np.arange(count) + self._base[k])
        return np.concatenate(out)

    # Placement ---------------------------------------------------------------
    def node_of(self, ranks: np.ndarray) -> np.ndarray:
        return np.asarray(ranks) // self.spec.gpus_per_node

    def local_of(self, ranks: np.ndarray) -> np.ndarray:
        return np.asarray(ranks) % self.spec.gpus_per_node

    def leaf_of_site(self, sites: np.ndarray) -> np.ndarray:
        return np.asarray(sites) // self.spec.nodes_per_leaf

    # Routing -----------------------------------------------------------------
    def route(self, src: np.ndarray, dst: np.ndarray, hsh: np.ndarray) -> np.ndarray:
        """Links of each flow ``src[i] -> dst[i]`` (ranks), padded with -1: shape (F, 8)."""
        s = self.spec
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        hsh = np.broadcast_to(np.asarray(hsh, dtype=np.int64), src.shape)
        out = np.full((src.size, 8), -1, dtype=np.int64)
        ns, nd = self.node_of(src), self.node_of(dst)
        gs, gd = self.local_of(src), self.local_of(dst)
        same = ns == nd
        # intra-node
        if s.intra == "nvlink":
            out[:, 0] = np.where(same, self._base["gpu_up"] + src, -1)
            out[:, 1] = np.where(same, self._base["gpu_dn"] + dst, -1)
        else:
            out[:, 0] = np.where(same, self._base["pcie"] + ns, -1)
        cross = ~same
        nic_s = ns * s.nics_per_node + gs * s.nics_per_node // s.gpus_per_node
        nic_d = nd * s.nics_per_node + gd * s.nics_per_node // s.gpus_per_node
        out[:, 0] = np.where(cross, self._base["nic_up"] + nic_s, out[:, 0])
        out[:, 1] = np.where(cross, self._base["nic_dn"] + nic_d, out[:, 1])
        out[:, 2] = np.where(cross & self.far[gs], self._base["far_up"] + src, -1)
        out[:, 3] = np.where(cross & self.far[gd], self._base["far_dn"] + dst, -1)
        if s.kind == "switch":
            return out
        site_s, site_d = self.site[ns], self.site[nd]
        leaf_s, leaf_d = self.leaf_of_site(site_s), self.leaf_of_site(site_d)
        other_leaf = cross & (leaf_s != leaf_d)
        spine = hsh % s.spines
        out[:, 4] = np.where(other_leaf, self._base["leaf_up"] + leaf_s * s.spines + spine, -1)
        out[:, 5] = np.where(other_leaf, self._base["leaf_dn"] + leaf_d * s.spines + spine, -1)
        if s.kind == "fat-tree":
            pod_s, pod_d = leaf_s // s.leaves_per_pod, leaf_d // s.leaves_per_pod
            other_pod = other_leaf & (pod_s != pod_d)
            core = (hsh // s.spines) % s.cores
            out[:, 6] = np.where(other_pod, self._base["pod_up"] + pod_s * s.cores + core, -1)
            out[:, 7] = np.where(other_pod, self._base["pod_dn"] + pod_d * s.cores + core, -1)
        return out

    def site_route(self, src_site: np.ndarray, dst_site: np.ndarray, hsh: np.ndarray) -> np.ndarray:
        """Switch-tier links between two cluster nodes (other jobs' traffic), shape (F, 4)."""
        s = self.spec
        out = np.full((np.size(src_site), 4), -1, dtype=np.int64)
        if s.kind == "switch":
            return out
        leaf_s, leaf_d = self.leaf_of_site(src_site), self.leaf_of_site(dst_site)
        other = leaf_s != leaf_d
        spine = np.asarray(hsh) % s.spines
        out[:, 0] = np.where(other, self._base["leaf_up"] + leaf_s * s.spines + spine, -1)
        out[:, 1] = np.where(other, self._base["leaf_dn"] + leaf_d * s.spines + spine, -1)
        if s.kind == "fat-tree":
            pod_s, pod_d = leaf_s // s.leaves_per_pod, leaf_d // s.leaves_per_pod
            core = (np.asarray(hsh) // s.spines) % s.cores
            op = other & (pod_s != pod_d)
            out[:, 2] = np.where(op, self._base["pod_up"] + pod_s * s.cores + core, -1)
            out[:, 3] = np.where(op, self._base["pod_dn"] + pod_d * s.cores + core, -1)
        return out

    def flow_hash(self, src: np.ndarray, dst: np.ndarray, salt: int = 0) -> np.ndarray:
        """A deterministic ECMP hash of (src, dst, salt): collisions are part of the model."""
        x = (
            np.asarray(src, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
            ^ np.asarray(dst, dtype=np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
            ^ np.uint64((salt * 0x165667B19E3779F9 + self.seed) & 0xFFFFFFFFFFFFFFFF)
        )
        x ^= x >> np.uint64(29)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(32)
        return (x & np.uint64(0x7FFFFFFF)).astype(np.int64)

    def describe(self) -> dict:
        s = self.spec
        return {
            "kind": s.kind,
            "nodes": s.nodes,
            "gpus_per_node": s.gpus_per_node,
            "nics_per_node": s.nics_per_node,
            "nic_gbps": s.nic_gbps,
            "intra": s.intra,
            "intra_gbps": s.intra_gbps,
            "oversub": s.oversub,
            "nodes_per_leaf": s.nodes_per_leaf,
            "spines": s.spines,
            "leaves": self.leaves,
            "cluster_nodes": self.cluster,
            "placement": s.placement,
            "ecmp": s.ecmp,
            "far_gpus": list(s.far_gpus),
            "job_leaves": int(np.unique(self.leaf_of_site(self.site)).size),
        }
