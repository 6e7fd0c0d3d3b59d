"""Every place torch's distributed code treats an NCCL group specially, run by 2 ranks.

``python nccl_paths.py traced|untraced OUT``: the same job with and without the
tracer, on :mod:`fake_nccl`'s stand-in for ``ProcessGroupNCCL`` (``cpu:nccl,cuda:nccl``,
so CPU tensors run through it; the default group bound to ``cuda:0``). Each path's
observable result goes into one JSON line (``RESULTS {...}``); the test compares the
two runs path by path, and reads the traced run's trace. A path that raises records
its error instead, so one failure does not hide the others.
"""

import datetime
import json
import os
import sys
import warnings
from typing import Any

import fake_nccl
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, _SymmetricMemory
from torch.distributed import distributed_c10d as c10d

DEVICE = torch.device("cuda:0")
CUDA = torch.device("cuda")
CPU = torch.device("cpu")
ESTIMATED_NUMEL = 13  # the all-reduce inside the time estimator: no other call has it
RESULTS: dict[str, object] = {}


def check(name, fn):
    try:
        RESULTS[name] = fn()
    except Exception as exc:
        RESULTS[name] = f"EXC {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def new_calls(name, since):
    return fake_nccl.calls(name)[since:]


def reduced(group=None, numel=2):
    t = torch.ones(numel) * (dist.get_rank() + 1)
    dist.all_reduce(t, group=group)
    return t.tolist()


def fake_rendezvous(tensor, group_name=None):
    """Symmetric memory's rendezvous stands in: what C++ would find under the name."""
    pg = c10d._resolve_process_group(group_name)
    fake_nccl.CALLS.append(
        ("rendezvous", [type(pg).__name__, pg.get_group_store() is not None, pg.size()])
    )
    return "handle"


def identity(pg):
    with warnings.catch_warnings():  # deprecated, still read
        warnings.simplefilter("ignore")
        default_device = str(c10d._get_pg_default_device(pg))
    return {
        "get_backend": str(dist.get_backend(pg)),
        "get_backend_config": dist.get_backend_config(pg),
        "pg_map": str(c10d._world.pg_map[pg][0]),
        "pg_config": c10d._get_pg_config(pg),
        "name": pg.name(),
        "backend_name": pg._get_backend_name(),
        "devices": c10d._device_capability(pg),
        "object_device": c10d._get_object_coll_device(pg),
        "default_device": default_device,
        "cuda_backend": type(pg._get_backend(CUDA)).__name__,
        "one_backend": pg._get_backend(CUDA) is pg._get_backend(CPU),
        "uid_is_backends": c10d._get_process_group_uid(pg) == pg._get_backend(CUDA).uid,
        "has_new_group": hasattr(pg, "new_group"),
        "store": type(pg.get_group_store()).__name__,
        "group_name": pg.group_name,
        "group_desc": pg.group_desc,
        "registered_name": c10d._get_process_group_name(pg) == pg.group_name,
        "resolves_to_itself": c10d._resolve_process_group(pg.group_name) is pg,
        "bound": str(pg.bound_device_id),
        "is_process_group": isinstance(pg, ProcessGroup),
    }


def _groups(pg: Any) -> None:
    """Groups made from the default group: new_group, new_subgroups, split_group."""

    def sequence():
        before = pg._get_sequence_number_for_group()
        for _ in range(3):
            reduced()
        return [before, pg._get_sequence_number_for_group()]

    check("sequence", sequence)

    def member_split():
        inits, nocolor = len(fake_nccl.calls("init")), len(fake_nccl.calls("nocolor_split"))
        sub = dist.new_group([0])
        return {
            "member": sub is not c10d.GroupMember.NON_GROUP_MEMBER,
            "init": new_calls("init", inits),
            "nocolor": new_calls("nocolor_split", nocolor),
            "color": c10d._process_group_color([0]),
        }

    check("new_group_split_source", member_split)

    def new_group_all():
        inits = len(fake_nccl.calls("init"))
        group = dist.new_group([0, 1])
        RESULTS["_group"] = group
        return {
            "init": new_calls("init", inits),
            "identity": identity(group),
            "all_reduce": reduced(group),
        }

    check("new_group", new_group_all)

    def subgroups():
        cur, groups = dist.new_subgroups(group_size=1)
        RESULTS["_subgroup"] = cur
        return {
            "size": cur.size(),
            "n": len(groups),
            "desc": cur.group_desc,
            "all_reduce": reduced(cur),
        }

    check("new_subgroups", subgroups)

    def split():
        group = dist.split_group(split_ranks=[[0], [1]])
        return {
            "size": group.size(),
            "desc": group.group_desc,
            "bound": str(group.bound_device_id),
            "backend": str(dist.get_backend(group)),
            "config": dist.get_backend_config(group),
            "store": type(group.get_group_store()).__name__,
            "resolves_to_itself": c10d._resolve_process_group(group.group_name) is group,
            "sequence": group._get_backend(CUDA)._get_sequence_number_for_group(),
            "all_reduce": reduced(group),
        }

    check("split_group", split)


def _workloads(pg: Any, rank: int) -> None:
    """DeviceMesh, FSDP2, coalescing, batched point-to-point, timeouts, hooks."""

    def mesh():
        from torch.distributed.device_mesh import init_device_mesh

        m = init_device_mesh("cpu", (2, 1), mesh_dim_names=("dp", "tp"))
        dims = {}
        for dim in ("dp", "tp"):
            group = m.get_group(dim)
            dims[dim] = {
                "size": group.size(),
                "desc": group.group_desc,
                "is_default": group is pg,
                "all_reduce": reduced(group),
            }
        return dims

    check("device_mesh", mesh)

    def fsdp():
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
        m = init_device_mesh("cpu", (2,))
        for layer in model:
            fully_shard(layer, mesh=m)
        fully_shard(model, mesh=m)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            loss = model(torch.randn(4, 8) + rank).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
        return [round(p.full_tensor().sum().item(), 5) for p in model.parameters()]

    check("fsdp2", fsdp)

    def fsdp_alloc():
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
            ProcessGroupAllocMixin,
        )

        since = len(fake_nccl.calls("allocate_tensor"))
        t = ProcessGroupAllocMixin(pg).allocate((2, 3), dtype=torch.float32, device=CUDA)
        return {"shape": list(t.shape), "calls": new_calls("allocate_tensor", since)}

    check("fsdp_alloc", fsdp_alloc)

    def coalescing():
        tensors = [torch.ones(3) * (rank + 1), torch.ones(5) * (rank + 1)]
        with c10d._coalescing_manager(pg, async_ops=True) as cm:
            for t in tensors:
                dist.all_reduce(t)
        cm.wait()
        return {"works": len(cm.works), "values": [t.tolist() for t in tensors]}

    check("coalescing", coalescing)

    def batch():
        peer = 1 - rank
        send, recv = torch.ones(4) * (rank + 1), torch.zeros(4)
        works = dist.batch_isend_irecv(
            [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
        )
        for w in works:
            w.wait()
        return {"works": len(works), "received": recv.tolist()}

    check("batch_isend_irecv", batch)

    def timeouts():
        since = len(fake_nccl.calls("set_default_timeout"))
        c10d._set_pg_timeout(datetime.timedelta(seconds=77), pg)
        ephemeral = len(fake_nccl.calls("ephemeral_timeout"))
        c10d._add_ephemeral_timeout_for_all_pgs(datetime.timedelta(seconds=5))
        return {
            "set": new_calls("set_default_timeout", since),
            "ephemeral": new_calls("ephemeral_timeout", ephemeral),
        }

    check("timeouts", timeouts)
    check("hook", lambda: pg._register_on_completion_hook(lambda info: None))
    check("has_hooks", lambda: pg._has_hooks())


def _special_paths(pg: Any, rank: int) -> None:
    """The time estimator, symmetric memory, debug mode, shrink, teardown, abort."""

    def estimator():
        t = torch.ones(ESTIMATED_NUMEL)
        with dist._time_estimator(group=pg, device=CUDA) as cm:
            dist.all_reduce(t)
        return {"estimated": cm.estimated_time, "value": t[0].item()}

    check("time_estimator", estimator)

    def symmetric_memory():
        import torch.distributed._symmetric_memory as symm_mem

        since = len(fake_nccl.calls("rendezvous"))
        handle = symm_mem.rendezvous(torch.ones(2), pg)
        return {
            "handle": handle,
            "during": new_calls("rendezvous", since),
            "after": c10d._resolve_process_group(pg.group_name) is pg,
        }

    check("symmetric_memory", symmetric_memory)

    def detail_debug():
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        dist.set_debug_level_from_env()
        try:
            group = dist.new_group([0, 1])
            return {"backend": type(group._get_backend(CPU)).__name__, "all_reduce": reduced(group)}
        finally:
            os.environ["TORCH_DISTRIBUTED_DEBUG"] = "OFF"
            dist.set_debug_level_from_env()

    check("debug_wrapper", detail_debug)

    def shrink():
        group = dist.new_group([0, 1])
        if rank == 1:  # the excluded rank takes no part, as torch requires
            return None
        shrunk = dist.shrink_group([1], group=group)
        return {
            "calls": fake_nccl.calls("shrink"),
            "size": shrunk.size(),
            "desc": shrunk.group_desc,
            "devices": c10d._device_capability(shrunk),
            "bound": str(shrunk.bound_device_id),
            "config": dist.get_backend_config(shrunk),
            "registered": c10d._resolve_process_group(shrunk.group_name) is shrunk,
            "group_name": shrunk.group_name,
        }

    check("shrink_group", shrink)
    reduced()  # both ranks meet again after the shrink

    def destroy_with_hooks():
        waits: list[int] = []
        saved = dict(ProcessGroup.__dict__)  # the methods as stored, to put back as they were
        has_hooks, wait = saved["_has_hooks"], saved["_wait_for_pending_works"]
        ProcessGroup._has_hooks = lambda self: True
        ProcessGroup._wait_for_pending_works = lambda self: waits.append(1)
        try:
            dist.destroy_process_group(RESULTS.pop("_group"))
        finally:
            ProcessGroup._has_hooks, ProcessGroup._wait_for_pending_works = has_hooks, wait
        return len(waits)

    check("destroy_waits_for_hooks", destroy_with_hooks)

    def abort_subgroup():
        group = RESULTS.pop("_subgroup")
        c10d._abort_process_group(group)
        return group in c10d._world.pg_map

    check("abort_subgroup", abort_subgroup)

    def abort_all():
        since = len(fake_nccl.CALLS)
        c10d._abort_process_group()
        return {
            "calls": [m for m, _ in fake_nccl.CALLS[since:]],
            "initialized": dist.is_initialized(),
        }

    check("abort_world", abort_all)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    fake_nccl.install()
    _SymmetricMemory.rendezvous = staticmethod(fake_rendezvous)
    if mode == "traced":
        import syncpace

        syncpace.attach(out, flush_interval_s=0.2)
    rank = int(os.environ["RANK"])
    options = fake_nccl.Options()
    options._timeout = datetime.timedelta(seconds=321)
    # Registering a backend hands it the group's bound device (C++ setBackend): which
    # device each registration of the default group's backends saw.
    register, bounds = ProcessGroup.__dict__["_register_backend"], []  # as stored

    def spy(self, device, backend_type, backend):
        bounds.append(str(self.bound_device_id))
        return register(self, device, backend_type, backend)

    ProcessGroup._register_backend = spy
    dist.init_process_group("cpu:nccl,cuda:nccl", pg_options=options, device_id=DEVICE)
    ProcessGroup._register_backend = register
    RESULTS["registered_bound"] = sorted(set(bounds))
    pg = c10d._get_default_group()
    fake_nccl.ROOTS["default"] = pg._get_backend(CUDA)
    RESULTS["create"] = fake_nccl.calls("init")
    RESULTS["eager"] = fake_nccl.calls("eager_connect")
    check("identity", lambda: identity(pg))
    check("all_reduce", reduced)

    _groups(pg)
    _workloads(pg, rank)
    _special_paths(pg, rank)
    print("RESULTS " + json.dumps({"rank": rank, "results": RESULTS}, default=str), flush=True)
    print("WORKER_DONE", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
