"""Collective algorithms as plans of flows, and their closed-form α–β costs.

A :class:`Plan` is a sequence of phases run one after the other. A phase is a set of
*coflows* that run concurrently; a coflow is a set of point-to-point flows that advance
in lockstep (the steps of a ring or a pipelined tree move together, so the slowest hop
sets the pace of all). Each flow carries ``nbytes``; a phase pays ``steps`` latencies
(α) on top of its transfer. Both network tiers evaluate the same plans.

Sizes follow nccl-tests (the trace's ``bytes``): all-reduce and broadcast the buffer,
all-gather the gathered output, reduce-scatter and all-to-all the full input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from syncpace.errors import ConfigError

ALGORITHMS = ("ring", "tree", "rhd", "hierarchical")
OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")


@dataclass(frozen=True)
class Phase:
    src: np.ndarray  # global ranks
    dst: np.ndarray
    nbytes: np.ndarray  # bytes each flow carries over the phase
    coflow: np.ndarray  # coflow id of each flow (0..C-1 within the phase)
    steps: int  # α latencies paid in sequence
    intra_only: bool  # no flow leaves a node (intra-node α applies)

    @property
    def coflows(self) -> int:
        return int(self.coflow.max()) + 1 if self.coflow.size else 0


@dataclass(frozen=True)
class Plan:
    op: str
    algorithm: str
    nbytes: int
    ranks: np.ndarray
    phases: tuple[Phase, ...]

    @property
    def bytes_sent(self) -> float:
        return float(sum(p.nbytes.sum() for p in self.phases))


def _phase(src, dst, nbytes, coflow, steps, gpus) -> Phase:
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    nb = np.broadcast_to(np.asarray(nbytes, dtype=float), src.shape).copy()
    cf = np.broadcast_to(np.asarray(coflow, dtype=np.int64), src.shape).copy()
    intra = bool(np.all(src // gpus == dst // gpus))
    return Phase(src, dst, nb, cf, int(steps), intra)


def _ring(ranks: np.ndarray, per_flow: float, steps: int, gpus: int, coflow=0) -> Phase:
    return _phase(ranks, np.roll(ranks, -1), per_flow, coflow, steps, gpus)


def _rings(groups: np.ndarray, per_flow: float, steps: int, gpus: int) -> Phase:
    """Several disjoint rings (rows of ``groups``) as concurrent coflows."""
    c, m = groups.shape
    src = groups.reshape(-1)
    dst = np.roll(groups, -1, axis=1).reshape(-1)
    return _phase(src, dst, per_flow, np.repeat(np.arange(c), m), steps, gpus)


def plan(op: str, algorithm: str, nbytes: int, ranks: np.ndarray, gpus_per_node: int) -> Plan:
    """The flows of one collective of ``nbytes`` over ``ranks`` (node-major order)."""
    if op not in OPS:
        raise ConfigError(f"op must be one of {', '.join(OPS)}, got {op!r}")
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    ranks = np.asarray(ranks, dtype=np.int64)
    n, g, s = ranks.size, gpus_per_node, float(nbytes)
    if n == 1:
        return Plan(op, algorithm, nbytes, ranks, ())
    if op == "broadcast":
        chain = _phase(ranks[:-1], ranks[1:], s, 0, n - 1, g)  # pipelined chain
        return Plan(op, algorithm, nbytes, ranks, (chain,))
    if op == "all_to_all":
        i, j = np.nonzero(~np.eye(n, dtype=bool))
        return Plan(op, algorithm, nbytes, ranks, (_phase(ranks[i], ranks[j], s / n, 0, n - 1, g),))
    if op in ("reduce_scatter", "all_gather"):
        if algorithm == "rhd":
            return Plan(op, algorithm, nbytes, ranks, _halving(ranks, s, g, op == "all_gather"))
        return Plan(op, algorithm, nbytes, ranks, (_ring(ranks, (n - 1) / n * s, n - 1, g),))
    # all_reduce
    if algorithm == "ring":
        phases = (_ring(ranks, 2 * (n - 1) / n * s, 2 * (n - 1), g),)
    elif algorithm == "tree":
        phases = (_double_tree(ranks, s, g),)
    elif algorithm == "rhd":
        phases = _halving(ranks, s, g, False) + _halving(ranks, s, g, True)
    else:
        phases = _hierarchical(ranks, s, g)
    return Plan(op, algorithm, nbytes, ranks, phases)


def _hierarchical(ranks: np.ndarray, s: float, g: int) -> tuple[Phase, ...]:
    n = ranks.size
    local = min(g, n)
    if n % local:
        return (_ring(ranks, 2 * (n - 1) / n * s, 2 * (n - 1), g),)
    nodes = n // local
    by_node = ranks.reshape(nodes, local)  # rows: nodes
    out = []
    if local > 1:  # intra-node reduce-scatter: each GPU owns 1/G of the buffer
        out.append(_rings(by_node, (local - 1) / local * s, local - 1, g))
    if nodes > 1:  # one inter-node ring per local rank (rail), each on S/G
        part = s / local
        out.append(_rings(by_node.T.copy(), 2 * (nodes - 1) / nodes * part, 2 * (nodes - 1), g))
    if local > 1:
        out.append(_rings(by_node, (local - 1) / local * s, local - 1, g))
    return tuple(out)


def _halving(ranks: np.ndarray, s: float, g: int, doubling: bool) -> tuple[Phase, ...]:
    """Recursive halving (reduce-scatter) or doubling (all-gather) over the largest power
    of two; the remaining ranks fold into a partner before and unfold after."""
    n = ranks.size
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    rounds = []
    for k in range(int(math.log2(p))):
        dist = p >> (k + 1)
        idx = np.arange(p)
        partner = idx ^ dist
        rounds.append(_phase(ranks[idx], ranks[partner], s / (2 << k), 0, 1, g))
    if doubling:
        rounds.reverse()
    if extra and doubling:
        rounds.append(_phase(ranks[:extra], ranks[p:], s, 0, 1, g))  # unfold
    elif extra:
        rounds.insert(0, _phase(ranks[p:], ranks[:extra], s, 0, 1, g))  # fold
    return tuple(rounds)


def _double_tree(ranks: np.ndarray, s: float, g: int) -> Phase:
    """NCCL's double binary tree: two complementary trees each reduce then broadcast half
    the buffer, pipelined, so every edge carries S/2 each way."""
    n = ranks.size
    src, dst = [], []
    # The second tree numbers the ranks backwards: its inner nodes are the first's leaves.
    for order in (np.arange(n), np.arange(n)[::-1]):
        for child in range(1, n):
            parent = (child - 1) // 2
            a, b = ranks[order[child]], ranks[order[parent]]
            src += [a, b]
            dst += [b, a]
    return _phase(np.array(src), np.array(dst), s / 2, 0, 2 * tree_depth(n), g)


def tree_depth(n: int) -> int:
    return max(1, n.bit_length() - 1)


# Closed forms ---------------------------------------------------------------------
def ideal_time(op: str, algorithm: str, nbytes: float, n: int, alpha_s: float, bw: float) -> float:
    """α–β time on an idle, uniform, full-duplex fabric of per-rank bandwidth ``bw``."""
    s = float(nbytes)
    if n <= 1:
        return 0.0
    if op == "broadcast":
        return (n - 1) * alpha_s + s / bw
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (n - 1) * alpha_s + (n - 1) / n * s / bw
    if algorithm == "tree":
        # every edge carries S/2 each way; a rank is inner in one tree (parent + 2 children)
        # and a leaf in the other, so its busiest direction moves up to 2S (less when small)
        ranks = np.arange(n)
        ph = _double_tree(ranks, s, 1 << 30)
        out = np.bincount(ph.src, weights=ph.nbytes, minlength=n).max()
        inn = np.bincount(ph.dst, weights=ph.nbytes, minlength=n).max()
        return ph.steps * alpha_s + max(out, inn) / bw
    if algorithm == "rhd" and n & (n - 1) == 0:
        return 2 * math.log2(n) * alpha_s + 2 * (n - 1) / n * s / bw
    return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * s / bw


def hierarchical_time(
    nbytes: float,
    nodes: int,
    g: int,
    alpha_s: float,
    nic: float,
    alpha_intra_s: float,
    intra: float,
) -> float:
    """Intra reduce-scatter + inter-node ring all-reduce of S/G per rail + intra all-gather."""
    s = float(nbytes)
    t = 0.0
    if g > 1:
        t += 2 * ((g - 1) * alpha_intra_s + (g - 1) / g * s / intra)
    if nodes > 1:
        t += 2 * (nodes - 1) * alpha_s + 2 * (nodes - 1) / nodes * (s / g) / nic
    return t
