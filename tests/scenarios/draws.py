"""Planted-cause scenarios drawn at random: a generator, not a list.

:func:`draw` turns a seed (and where the job runs: ``local`` or ``fabric``) into one
:class:`Draw`: the job's shape (ranks, hosts, topology and link rate on the fabric,
DDP buckets during backward, blocking all-reduces after the compute or ``async_op``
ones during backward, bucket size and count, compute and backward time) and zero, one
or two planted causes, each at a strength drawn from barely measurable to dominant.
About a fifth of the draws plant nothing; on localhost half of those run beside
processes that keep the machine's CPUs busy (a healthy job on a contended host). The
same seed always gives the same draw (a ``numpy`` Generator seeded with the seed and
the place), and the seed decides the set: below :data:`TEST_FROM` development, from it
on test, whose draws are never used to tune anything.

A draw becomes a :class:`suite.Scenario` (:meth:`Draw.scenario`): the job alternates
clean and planted phases, so every planted phase has the same job without its cause
right before and after it — the rerun its measured cost comes from.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from suite import Scenario

#: Seeds below this are the development set, from it on the test set.
TEST_FROM = 1000
#: The causes a localhost job can plant, and those only the fabric can (links, hosts).
LOCAL_KINDS = ("straggler", "jitter", "stall", "small", "overlap")
FABRIC_KINDS = (*LOCAL_KINDS, "slow_link", "contention", "cpu_starved")
#: Kinds added after sets were drawn and scored, and the first development and test
#: seeds they join: every draw of a seed below stays the draw it was.
LATER_KINDS = {"pause": (900, 1300)}
#: The mode the diagnosis must put first for each planted kind.
MODE = {
    "straggler": "straggler",
    "jitter": "sync_amplification",
    "stall": "stall",
    "small": "latency_bound",
    "overlap": "poor_overlap",
    "slow_link": "slow_link",
    "contention": "fabric_contention",
    "cpu_starved": "cpu_starvation",
    "pause": "stall",
}
#: Kinds that plant through the job's arguments (the others through the fabric); two
#: causes at once are one of each, or two of these whose arguments do not collide.
JOB_KINDS = frozenset((*LOCAL_KINDS, *LATER_KINDS))
HEALTHY_SHARE = 0.2
TWO_CAUSES_SHARE = 0.2
KIB = 1024


def kinds_of(seed: int, where: str) -> tuple[str, ...]:
    """The cause kinds a draw of ``seed`` at ``where`` chooses among."""
    kinds = LOCAL_KINDS if where == "local" else FABRIC_KINDS
    later = [k for k, (dev, test) in LATER_KINDS.items() if dev <= seed < TEST_FROM or seed >= test]
    return (*kinds, *later)


def split_of(seed: int) -> str:
    return "test" if seed >= TEST_FROM else "dev"


def seeds(which: str, count: int, start: int = 0) -> list[int]:
    """``count`` seeds of the set ``which`` (``dev`` or ``test``), from ``start`` on."""
    base = TEST_FROM if which == "test" else 0
    out = [base + start + i for i in range(count)]
    if which == "dev" and out and out[-1] >= TEST_FROM:
        raise ValueError(f"the development set has {TEST_FROM} seeds; asked up to {out[-1]}")
    return out


@dataclass(frozen=True)
class Cause:
    """One planted cause: its kind, its strength in [0, 1] (0 barely measurable, 1
    dominant), what it plants (job plants or fabric faults and flows), and what the
    clean phases run instead where the fix is not simply its absence (``fixed``: the
    rerun whose time is the ground truth of the cause's cost)."""

    kind: str
    strength: float
    plants: dict[str, Any] = field(default_factory=dict)
    faults: tuple[str, ...] = ()
    flows: tuple[tuple[str, str], ...] = ()
    flow_rate: str = ""
    ranks: tuple[int, ...] = ()  # the ranks it must be named at (empty: not checked)
    nodes: tuple[str, ...] = ()  # ... the hosts
    fixed: dict[str, Any] = field(default_factory=dict)

    @property
    def mode(self) -> str:
        return MODE[self.kind]


@dataclass(frozen=True)
class Draw:
    seed: int
    where: str
    ranks: int
    hosts: int
    fabric: dict[str, Any] | None
    job: dict[str, Any]  # the job's arguments (names as job.py's flags, "_" for "-")
    causes: tuple[Cause, ...]
    contended: int = 0  # CPU-burning processes beside the job (a contended host)
    steps: int = 16

    @property
    def name(self) -> str:
        return f"{self.where}-{self.seed}"

    @property
    def split(self) -> str:
        return split_of(self.seed)

    @property
    def healthy(self) -> bool:
        return not self.causes

    @property
    def label(self) -> str:
        """The planted modes, ``+``-joined (``healthy`` for none)."""
        return "+".join(sorted({c.mode for c in self.causes})) or "healthy"

    def scenario(self) -> Scenario:
        plants: dict[str, Any] = {}
        for c in self.causes:
            plants.update(c.plants)
        argv: list[str] = []
        for key, value in self.job.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        # the job's own noise (a jitter plant's draws) from the draw's seed: else every
        # draw would share one sequence, and its few longest draws would fall on the same
        # ranks and steps of every jittery draw
        argv += ["--seed", str(self.seed)]
        first = self.causes[0] if self.causes else None
        return Scenario(
            name=self.name,
            plant=self.describe(),
            job=tuple(argv),
            plants=plants,
            clean_plants={k: v for c in self.causes for k, v in c.fixed.items()},
            ranks=self.ranks,
            hosts=self.hosts,
            fabric=self.fabric,
            faults=tuple(f for c in self.causes for f in c.faults),
            flows=tuple(p for c in self.causes for p in c.flows),
            flow_rate=next((c.flow_rate for c in self.causes if c.flows), ""),
            expected=first.mode if first else "healthy",
            also=tuple(c.mode for c in self.causes[1:]),
            expected_ranks=first.ranks or None if first else None,
            expected_nodes=first.nodes or None if first else None,
            steps=self.steps,
            timeout_s=240.0 if self.fabric is None else 420.0,
        )

    def describe(self) -> str:
        shape = f"{self.ranks} ranks"
        if self.fabric is not None:
            topo = self.fabric["topology"]
            shape += f" on {self.hosts} hosts ({topo}, {self.fabric['host_rate']})"
        job = self.job
        shape += f", {job['comm']} {job['buckets']} x {job['bucket_bytes'] // KIB} KiB"
        if not self.causes:
            return shape + (
                f"; healthy beside {self.contended} CPU burners" if self.contended else "; healthy"
            )
        what = " and ".join(f"{c.kind} (strength {c.strength:.2f})" for c in self.causes)
        return f"{shape}; {what}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label, "split": self.split, "plant": self.describe()}


def _log_between(
    rng: np.random.Generator, low: float, high: float, s: float | None = None
) -> float:
    """A value between ``low`` and ``high``, uniform in log (at ``s`` in [0, 1] if given)."""
    u = rng.random() if s is None else s
    return float(math.exp(math.log(low) + u * (math.log(high) - math.log(low))))


def _shape(rng: np.random.Generator, where: str) -> tuple[int, int, dict[str, Any] | None]:
    if where == "local":
        return int(rng.integers(2, 7)), 1, None
    hosts = int(rng.choice([2, 3, 4]))
    per_host = int(rng.choice([1, 2])) if hosts <= 3 else 1
    rate = str(rng.choice(["100mbit", "200mbit", "400mbit"]))
    if hosts % 2 == 0 and rng.random() < 0.5:
        fabric = {
            "topology": "leaf-spine",
            "leaves": 2,
            "hosts": hosts // 2,
            "host_rate": rate,
            "oversubscription": float(rng.choice([1.0, 2.0, 4.0])),
        }
    else:
        fabric = {"topology": "star", "hosts": hosts, "host_rate": rate}
    return hosts * per_host, hosts, fabric


def _job(rng: np.random.Generator, where: str) -> dict[str, Any]:
    comm = str(rng.choice(["ddp", "sync", "async"]))
    # on the fabric's slow links keep each step's transfers near its compute
    top = 512 if where == "fabric" else 1024
    job: dict[str, Any] = {
        "comm": comm,
        "compute_ms": round(_log_between(rng, 10, 60), 1),
        "bwd_ms": round(_log_between(rng, 10, 60), 1) if comm != "sync" else 0.0,
        "buckets": int(rng.integers(1, 9)),
        "bucket_bytes": int(2 ** rng.integers(4, int(math.log2(top)) + 1)) * KIB,
    }
    return job


def _plant(
    rng: np.random.Generator, kind: str, draw: dict[str, Any], s: float
) -> tuple[Cause, dict[str, Any]]:
    """The cause ``kind`` at strength ``s`` in the job ``draw``; the job's arguments it
    needs changed (a poor overlap needs something to overlap)."""
    job, ranks, hosts = draw["job"], draw["ranks"], draw["hosts"]
    per_host = ranks // hosts
    step_ms = job["compute_ms"] + job["bwd_ms"]
    if kind == "straggler":
        r = int(rng.integers(0, ranks))
        slow = round(step_ms * _log_between(rng, 0.02, 1.0, s), 1)
        return Cause(kind, s, {"slow_ranks": str(r), "slow_ms": slow}, ranks=(r,)), {}
    if kind == "jitter":
        shape = round(float(rng.uniform(1.6, 3.5)), 2)
        scale = round(_log_between(rng, 0.03, 0.6, s), 3)
        return Cause(kind, s, {"jitter": f"pareto:{shape}:{scale}"}), {}
    if kind == "stall":
        r = int(rng.integers(0, ranks))
        phase_ms = draw["steps"] * step_ms
        stall = round(phase_ms * _log_between(rng, 0.02, 2.0, s), 1)
        plants = {"stall_step": int(rng.integers(2, draw["steps"] - 2)), "stall_rank": r}
        return Cause(kind, s, {**plants, "stall_ms": stall}, ranks=(r,)), {}
    if kind == "pause":
        # a checkpoint or log flush every few steps: of one rank, or of every rank at once
        every = int(rng.integers(3, 6))
        r = int(rng.integers(0, ranks)) if rng.random() < 0.7 else -1
        pause = round(step_ms * _log_between(rng, 0.3, 8.0, s), 1)
        plants = {"pause_every": every, "pause_rank": r, "pause_ms": pause}
        return Cause(kind, s, plants, ranks=(r,) if r >= 0 else tuple(range(ranks))), {}
    if kind == "small":
        # the data of the small syncs still has to be reduced: the fix coalesces them
        # into one call, and the rerun makes that one call
        calls = round(_log_between(rng, 2, 120, s))
        return Cause(kind, s, {"small": calls}, fixed={"small_fused": calls}), {}
    if kind == "overlap":
        # the buckets issued after backward instead of during it: their transfer time is
        # what is exposed, so the strength sets backward's length and the buckets' size
        change = {
            "comm": "ddp" if job["comm"] == "sync" else job["comm"],
            "buckets": max(2, job["buckets"]),
            "bwd_ms": round(_log_between(rng, 15, 90, s), 1),
            "bucket_bytes": int(2 ** round(5 + 4 * s)) * KIB,
        }
        return Cause(kind, s, {"overlap": "poor"}), change
    host = int(rng.integers(0, hosts))
    on_host = tuple(range(host * per_host, (host + 1) * per_host))
    rate_bps = _rate_bps(draw["fabric"]["host_rate"])
    if kind == "slow_link":
        share = _log_between(rng, 0.8, 0.08, s)
        fault = f"rate h{host}-{_switch(draw['fabric'], host)} {int(rate_bps * share / 1e6)}mbit"
        # big enough transfers for the link to show
        change = {"bucket_bytes": max(job["bucket_bytes"], 256 * KIB)}
        return Cause(kind, s, faults=(fault,), nodes=(f"h{host}",)), change
    if kind == "contention":
        other = int((host + 1 + rng.integers(0, hosts - 1)) % hosts)
        pair = (f"h{host}", f"h{other}")
        rate = "" if s > 0.9 else f"{int(rate_bps * _log_between(rng, 0.15, 0.9, s) / 1e6)}mbit"
        change = {"bucket_bytes": max(job["bucket_bytes"], 256 * KIB)}
        return Cause(kind, s, flows=(pair, pair[::-1]), flow_rate=rate), change
    if kind == "cpu_starved":
        cap = round(_log_between(rng, 0.6, 0.04, s), 3)
        fault = f"straggler h{host} {cap}"
        change = {"burn_ms": round(float(rng.uniform(2, 6)), 1)}
        return Cause(kind, s, faults=(fault,), ranks=on_host, nodes=(f"h{host}",)), change
    raise ValueError(f"unknown cause kind {kind!r}")


def _rate_bps(rate: str) -> float:
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for unit, factor in units.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * factor
    raise ValueError(f"unknown rate {rate!r}")


def _switch(fabric: dict[str, Any], host: int) -> str:
    if fabric["topology"] == "star":
        return "sw"
    return f"leaf{host // fabric['hosts']}"


def _compatible(a: str, b: str) -> bool:
    # both set the same job arguments, or a poor overlap's reshaped job beside another
    # network plant: kept apart so each cause stays what it was drawn as
    # two of one mode (a pause and a stall) would leave the score unable to say which
    clash = {frozenset({"straggler", "cpu_starved"}), frozenset({"slow_link", "contention"})}
    alike = MODE[a] == MODE[b]
    return a != b and not alike and frozenset({a, b}) not in clash and "overlap" not in (a, b)


def draw(seed: int, where: str = "local") -> Draw:
    """The draw of ``seed`` at ``where`` (``local`` or ``fabric``): always the same."""
    if where not in ("local", "fabric"):
        raise ValueError(f"where must be local or fabric, not {where!r}")
    rng = np.random.default_rng([seed, 0 if where == "local" else 1])
    ranks, hosts, fabric = _shape(rng, where)
    state: dict[str, Any] = {
        "job": _job(rng, where),
        "ranks": ranks,
        "hosts": hosts,
        "fabric": fabric,
        "steps": 16,
    }
    kinds = kinds_of(seed, where)
    causes: list[Cause] = []
    contended = 0
    if rng.random() < HEALTHY_SHARE:
        if where == "local" and rng.random() < 0.5:
            contended = int(rng.integers(1, 3))
    else:
        first = str(rng.choice(kinds))
        chosen = [first]
        if rng.random() < TWO_CAUSES_SHARE:
            others = [k for k in kinds if _compatible(first, k)]
            if others:
                chosen.append(str(rng.choice(others)))
        for kind in chosen:
            cause, change = _plant(rng, kind, state, float(rng.random()))
            state["job"] = {**state["job"], **change}
            causes.append(cause)
    return Draw(
        seed=seed,
        where=where,
        ranks=ranks,
        hosts=hosts,
        fabric=fabric,
        job=state["job"],
        causes=tuple(causes),
        contended=contended,
        steps=state["steps"],
    )
