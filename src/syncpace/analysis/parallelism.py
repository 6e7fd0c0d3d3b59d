"""Which parallelism a job used, read from its trace: the groups' shape and the ops seen.

Advice has to name what the job actually does: "use DDP default bucketing" is no help
to an FSDP or a pipeline job. The signs, per process group:

* ``fsdp`` (sharded data parallel: FSDP, ZeRO): all-gathers and reduce-scatters
  (parameters gathered for compute, gradients scattered to their shards);
* ``ddp`` (data parallel): all-reduces observed through their future — how
  DistributedDataParallel's reducer consumes its bucket all-reduces — with the number
  of buckets per iteration (one bucket: the gradients fit ``bucket_cap_mb``);
* ``pipeline``: sends and receives (stage to stage);
* ``expert`` (MoE / expert parallel): all-to-alls;
* ``tensor``: all-reduces or all-gathers waited on directly on a group that a
  DeviceMesh names ``tp`` (or, without a name, on a subgroup beside a data-parallel
  family in a 2D mesh).

A group's description (``mesh_dp``, ``mesh_tp``, … as DeviceMesh names its
dimensions) is in the trace's metadata and, where present, names the dimension.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

KINDS = ("ddp", "fsdp", "tensor", "pipeline", "expert")

_NAMES = {
    "ddp": "data parallel (DDP)",
    "fsdp": "sharded data parallel (FSDP)",
    "tensor": "tensor parallel",
    "pipeline": "pipeline parallel",
    "expert": "expert parallel (all-to-all)",
}


@dataclass(frozen=True)
class Parallelism:
    """What the trace shows of a job's parallelism (see the module docstring)."""

    kinds: tuple[str, ...] = ()
    #: per group family: {"kind", "groups", "size", "desc", "ops"}
    families: tuple[dict[str, Any], ...] = ()
    #: DDP bucket all-reduces per iteration and rank (median), when DDP was seen
    ddp_buckets: float | None = None
    world_size: int = 0

    def has(self, kind: str) -> bool:
        return kind in self.kinds

    @property
    def ddp_one_bucket(self) -> bool:
        return self.ddp_buckets is not None and self.ddp_buckets <= 1.0

    def describe(self) -> str:
        """One phrase: ``"sharded data parallel (FSDP) over 2 ranks"``, ``"2 × 2 mesh:
        data parallel (DDP) × tensor parallel"``."""
        if not self.kinds:
            return "no collectives seen"
        shaped = [f for f in self.families if f["kind"] in self.kinds]
        if len(shaped) >= 2:
            dims = " × ".join(str(f["size"]) for f in shaped)
            return f"{dims} mesh: " + " × ".join(_NAMES[f["kind"]] for f in shaped)
        names = " + ".join(_NAMES[k] for k in self.kinds)
        return f"{names} over {self.world_size} ranks"

    def to_json(self) -> dict[str, Any]:
        return {
            "kinds": list(self.kinds),
            "description": self.describe(),
            "families": [dict(f) for f in self.families],
            "ddp_buckets_per_iteration": self.ddp_buckets,
        }


@dataclass
class _Family:
    size: int
    groups: list[str] = field(default_factory=list)
    descs: set[str] = field(default_factory=set)


def _families(meta: dict[int, dict[str, Any]], world_size: int) -> dict[str, _Family]:
    """Group name -> the family it belongs to: groups of one size whose rank sets do not
    overlap (the rows of one mesh dimension) form one family."""
    specs: dict[str, dict[str, Any]] = {}
    for m in meta.values():
        groups = m.get("groups")
        if isinstance(groups, dict):
            for name, spec in groups.items():
                if isinstance(spec, dict) and isinstance(spec.get("ranks"), list):
                    specs.setdefault(str(name), spec)
    specs.setdefault("0", {"ranks": list(range(world_size))})
    families: list[tuple[_Family, set[int]]] = []
    of: dict[str, _Family] = {}
    for name in sorted(specs, key=lambda n: (len(specs[n]["ranks"]), n)):
        ranks = {r for r in specs[name]["ranks"] if isinstance(r, int)}
        desc = specs[name].get("desc")
        home = None
        for family, covered in families:
            if family.size == len(ranks) and not (ranks & covered):
                same_desc = not family.descs or desc in family.descs or desc is None
                if same_desc:
                    home = (family, covered)
                    break
        if home is None:
            home = (_Family(len(ranks)), set())
            families.append(home)
        home[0].groups.append(name)
        home[1].update(ranks)
        if isinstance(desc, str):
            home[0].descs.add(desc)
        of[name] = home[0]
    return of


def infer(
    meta: dict[int, dict[str, Any]],
    events: pl.DataFrame,
    world_size: int,
    steps: int,
) -> Parallelism:
    """The parallelism ``events`` (one run's, iteration events) and ``meta`` show;
    ``steps`` is the number of iterations they span."""
    if events.height == 0:
        return Parallelism(world_size=world_size)
    of = _families(meta, world_size)
    n_ranks = events["rank"].n_unique()
    per_group = events.group_by("group", "op", "timing").agg(
        n=pl.len(), ranks=pl.col("rank").n_unique()
    )
    ops: dict[int, dict[str, int]] = {}
    future_all_reduce: dict[int, int] = {}
    fams: dict[int, _Family] = {}
    for row in per_group.iter_rows(named=True):
        family = of.get(row["group"]) or of["0"]
        key = id(family)
        fams[key] = family
        counts = ops.setdefault(key, {})
        counts[row["op"]] = counts.get(row["op"], 0) + row["n"]
        if row["op"] == "all_reduce" and row["timing"] == "future":
            future_all_reduce[key] = future_all_reduce.get(key, 0) + row["n"]
    kinds: list[str] = []
    families: list[dict[str, Any]] = []
    ddp_buckets = None
    has_dp_family = any(
        future_all_reduce.get(k) or {"all_gather", "reduce_scatter"} <= set(ops[k]) for k in ops
    )
    for key, family in sorted(fams.items(), key=lambda kv: -kv[1].size):
        counts = ops[key]
        opset = set(counts)
        desc = ",".join(sorted(family.descs)) or None
        dim = (desc or "").lower().rsplit("mesh_", 1)[-1]  # DeviceMesh: "mesh_<dim name>"
        found = []
        if "all_to_all" in opset:
            found.append("expert")
        if {"send", "recv"} & opset:
            found.append("pipeline")
        if dim in ("tp", "tensor", "tensor_parallel"):
            found.append("tensor")
        elif {"all_gather", "reduce_scatter"} <= opset:
            found.append("fsdp")
        elif future_all_reduce.get(key):
            found.append("ddp")
            ddp_buckets = round(future_all_reduce[key] / max(n_ranks * max(steps, 1), 1), 2)
        elif family.size < world_size and has_dp_family and {"all_reduce", "all_gather"} & opset:
            found.append("tensor")  # the other dimension of a 2D mesh beside data parallel
        families.append(
            {
                "kind": found[0] if found else None,
                "kinds": found,
                "size": family.size,
                "groups": len(family.groups),
                "desc": desc,
                "ops": dict(sorted(counts.items())),
            }
        )
        kinds.extend(k for k in found if k not in kinds)
    return Parallelism(
        kinds=tuple(k for k in KINDS if k in kinds),
        families=tuple(families),
        ddp_buckets=ddp_buckets,
        world_size=world_size,
    )
