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
            if not self.families:
                return "no collectives seen"
            ops = sorted({op for f in self.families for op in f["ops"]})
            return f"{', '.join(ops)} over {self.world_size} ranks (no parallelism recognised)"
        shaped = [f for f in self.families if f["kind"] in self.kinds and f["size"] > 1]
        if len(shaped) >= 2:
            dims = " × ".join(str(f["size"]) for f in shaped)
            return f"{dims} mesh: " + " × ".join(_label(f) for f in shaped)
        names = " + ".join(_NAMES[k] for k in self.kinds)
        return f"{names} over {self.world_size} ranks"

    def to_json(self) -> dict[str, Any]:
        return {
            "kinds": list(self.kinds),
            "description": self.describe(),
            "families": [dict(f) for f in self.families],
            "ddp_buckets_per_iteration": self.ddp_buckets,
        }


def _label(family: dict[str, Any]) -> str:
    names = " + ".join(_NAMES[k] for k in family["kinds"])
    return f"{names} [{family['dim']}]" if family.get("dim") else names


@dataclass
class _Family:
    size: int
    dim: str | None = None  # the DeviceMesh dimension its groups serve, when named
    groups: list[str] = field(default_factory=list)
    descs: set[str] = field(default_factory=set)


def _dim_of(spec: dict[str, Any]) -> str | None:
    """The mesh dimension a group serves: recorded by the tracer, else from torch's
    group description (``mesh_<dim>``)."""
    dims = spec.get("mesh_dims")
    if isinstance(dims, list) and dims:
        return ",".join(sorted(str(d) for d in dims))
    desc = spec.get("desc")
    if isinstance(desc, str) and desc.startswith("mesh_") and desc != "mesh_default":
        return desc.removeprefix("mesh_")
    return None


def _families(meta: dict[int, dict[str, Any]], world_size: int) -> dict[str, _Family]:
    """Group name -> the family it belongs to: the groups of one mesh dimension, or
    (unnamed) groups of one size whose rank sets do not overlap."""
    specs: dict[str, dict[str, Any]] = {}
    for m in meta.values():
        groups = m.get("groups")
        if isinstance(groups, dict):
            for name, spec in groups.items():
                if isinstance(spec, dict) and isinstance(spec.get("ranks"), list):
                    merged = specs.setdefault(str(name), dict(spec))
                    dims = set(merged.get("mesh_dims") or []) | set(spec.get("mesh_dims") or [])
                    if dims:
                        merged["mesh_dims"] = sorted(dims)
    specs.setdefault("0", {"ranks": list(range(world_size))})
    families: list[tuple[_Family, set[int]]] = []
    of: dict[str, _Family] = {}
    for name in sorted(specs, key=lambda n: (len(specs[n]["ranks"]), n)):
        spec = specs[name]
        ranks = {r for r in spec["ranks"] if isinstance(r, int)}
        dim = _dim_of(spec)
        home = None
        for family, covered in families:
            if family.size != len(ranks) or family.dim != dim:
                continue
            if dim is not None or not (ranks & covered):
                home = (family, covered)
                break
        if home is None:
            home = (_Family(len(ranks), dim), set())
            families.append(home)
        home[0].groups.append(name)
        home[1].update(ranks)
        if isinstance(spec.get("desc"), str):
            home[0].descs.add(spec["desc"])
        of[name] = home[0]
    return of


_TENSOR_DIMS = ("tp", "tensor", "tensor_parallel", "sp")
_DATA_DIMS = ("dp", "dp_shard", "dp_replicate", "fsdp", "ddp", "hsdp", "data", "replicate", "shard")
_PIPELINE_DIMS = ("pp", "pipeline")
_EXPERT_DIMS = ("ep", "expert", "moe")


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
    counts = events.group_by("group", "op", "timing", "rank").agg(n=pl.len())
    return infer_from_counts(meta, counts, world_size, steps)


def infer_from_counts(
    meta: dict[int, dict[str, Any]],
    counts: pl.DataFrame,
    world_size: int,
    steps: int,
) -> Parallelism:
    """:func:`infer` from the events counted per (group, op, timing, rank) (``n``):
    what a run read a window at a time adds up (windows' counts concatenated)."""
    if counts.height == 0:
        return Parallelism(world_size=world_size)
    of = _families(meta, world_size)
    n_ranks = counts["rank"].n_unique()
    per_group = (
        counts.group_by("group", "op", "timing")
        .agg(n=pl.col("n").sum(), ranks=pl.col("rank").n_unique())
        .sort("group", "op", "timing")
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
    named = any(f.dim for f in fams.values())
    order = sorted(fams.items(), key=lambda kv: (-kv[1].size, kv[1].dim or "~", kv[1].groups))
    for key, family in order:
        counts = ops[key]
        opset = set(counts)
        dims = set((family.dim or "").lower().split(","))
        found = []
        if "all_to_all" in opset or dims & set(_EXPERT_DIMS):
            found.append("expert")
        elif {"send", "recv"} & opset or dims & set(_PIPELINE_DIMS):
            # (an all-to-all family's sends are its own routing, not pipeline stages)
            found.append("pipeline")
        if dims & set(_TENSOR_DIMS):
            found.append("tensor")
        elif {"all_gather", "reduce_scatter"} <= opset:
            found.append("fsdp")
        elif future_all_reduce.get(key):
            found.append("ddp")
            ddp_buckets = round(future_all_reduce[key] / max(n_ranks * max(steps, 1), 1), 2)
        elif dims & set(_DATA_DIMS) and "all_reduce" in opset:
            found.append("ddp")  # all-reduces of a data-parallel dimension, by hand
        elif (
            not named
            and family.size < world_size
            and has_dp_family
            and {"all_reduce", "all_gather"} & opset
        ):
            found.append("tensor")  # the unnamed other dimension of a 2D mesh
        families.append(
            {
                "kind": found[0] if found else None,
                "kinds": found,
                "size": family.size,
                "groups": len(family.groups),
                "dim": family.dim,
                "desc": ",".join(sorted(family.descs)) or None,
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
