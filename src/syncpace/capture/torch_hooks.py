"""Wiring into torch.distributed, so process groups are traced with no code change.

* A backend plugin ``syncpace`` is registered. Its creator builds the real backends
  (gloo, NCCL, or both) exactly as torch would, and returns them wrapped in a
  :class:`TracingProcessGroup`.
* ``_new_process_group_helper`` (the one path through which ``init_process_group``
  and ``new_group`` create groups) is wrapped to ask for ``syncpace`` instead of
  gloo/NCCL, remembering the real choice per group.
* ``get_backend`` is wrapped to report the real backend name, so user code that
  checks ``dist.get_backend() == "nccl"`` behaves as before.

Other backends (MPI, UCC, XCCL, third-party) pass through untraced, with a warning.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import TYPE_CHECKING, Any

from syncpace.capture.log import warn_once

if TYPE_CHECKING:
    from syncpace.capture.tracer import Tracer


PLUGIN = "syncpace"
_TRACEABLE = {"gloo", "nccl"}

_state: dict[str, Any] = {"installed": False, "tracer": None, "default_map": None}
_pending: dict[str, dict[str, str]] = {}  # group name -> real device->backend map


def install(tracer: Tracer) -> None:
    """Install the hooks into ``torch.distributed.distributed_c10d``. Idempotent."""
    # Only distributed_c10d is used here: when armed by the import hook, the
    # torch.distributed package itself is still half-initialised.
    from torch.distributed import distributed_c10d as c10d

    _state["tracer"] = tracer
    if _state["installed"]:
        return
    if c10d.is_initialized():
        warn_once(
            "late",
            "attach() ran after init_process_group: groups created from now on are "
            "traced, the default group is not",
        )
    c10d.Backend.register_backend(PLUGIN, _create, extended_api=True, devices=["cpu", "cuda"])
    original_helper = c10d._new_process_group_helper
    c10d._new_process_group_helper = _wrap_helper(original_helper)
    original_get_backend = c10d.get_backend
    patched_get_backend = _wrap_get_backend(original_get_backend)
    c10d.get_backend = patched_get_backend
    original_destroy = c10d.destroy_process_group
    patched_destroy = _wrap_destroy(original_destroy)
    c10d.destroy_process_group = patched_destroy
    original_batch = c10d.batch_isend_irecv
    patched_batch = _wrap_batch_isend_irecv(original_batch)
    c10d.batch_isend_irecv = patched_batch
    dist = sys.modules.get("torch.distributed")
    for name, original, patched in (
        ("get_backend", original_get_backend, patched_get_backend),
        ("destroy_process_group", original_destroy, patched_destroy),
        ("batch_isend_irecv", original_batch, patched_batch),
    ):
        if getattr(dist, name, None) is original:
            setattr(dist, name, patched)
    _state["installed"] = True
    _name_mesh_dims()


def _name_mesh_dims() -> None:
    """Note which mesh dimension (``tp``, ``dp``, …) each process group serves.

    DeviceMesh creates (or, for a dimension spanning the world, reuses) one group per
    dimension in ``DeviceMesh._init_one_process_group``; the wrapper records the
    dimension's name against the group it returns, so the trace names the
    parallelism even where the group is the default one. Done once
    ``torch.distributed.device_mesh`` is loaded (at install when attached
    explicitly, at the default group otherwise: the import hook runs earlier).
    """
    if _state.get("mesh_named"):
        return
    mesh = sys.modules.get("torch.distributed.device_mesh")
    cls = getattr(mesh, "DeviceMesh", None)
    raw = getattr(cls, "__dict__", {}).get("_init_one_process_group")
    if not isinstance(raw, staticmethod):
        return
    original = raw.__func__
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        return

    @functools.wraps(original)
    def init_one_process_group(*args: Any, **kwargs: Any) -> Any:
        name = original(*args, **kwargs)
        try:
            dim = signature.bind(*args, **kwargs).arguments.get("dim_name")
            tracer = _state["tracer"]
            if name is not None and dim is not None and tracer is not None:
                tracer.on_mesh_dim(str(name), str(dim))
        except Exception as exc:
            warn_once("mesh", "cannot name this torch version's mesh dimensions: %s", exc)
        return name

    cls._init_one_process_group = staticmethod(init_one_process_group)
    _state["mesh_named"] = True


def _device_map(backend: Any) -> dict[str, str]:
    from torch.distributed.distributed_c10d import Backend, BackendConfig

    return {
        d: str(b).lower()
        for d, b in BackendConfig(Backend(str(backend))).get_device_backend_map().items()
    }


def _wrap_helper(original: Any) -> Any:
    from torch.distributed import distributed_c10d as c10d

    signature = inspect.signature(original)

    @functools.wraps(original)
    def helper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
            backend = str(bound.arguments.get("backend", "")).lower()
            group_name = str(bound.arguments.get("group_name"))
            is_default = c10d._world.default_pg is None if hasattr(c10d, "_world") else False
            if backend == PLUGIN:
                device_map = _state["default_map"] or {"cpu": "gloo"}
            else:
                device_map = _device_map(backend or "undefined")
            traceable = set(device_map.values()) <= _TRACEABLE
        except Exception as exc:
            warn_once("bind", "cannot trace this torch version's process groups: %s", exc)
            return original(*args, **kwargs)
        if not traceable:
            warn_once(f"backend-{backend}", "backend %r is not traced (gloo and nccl are)", backend)
            return original(*args, **kwargs)
        if is_default:
            _state["default_map"] = device_map
        _pending[group_name] = device_map
        bound.arguments["backend"] = PLUGIN
        try:
            result = original(*bound.args, **bound.kwargs)
        finally:
            _pending.pop(group_name, None)
        pg = result[0] if isinstance(result, tuple) else result
        device_id = bound.arguments.get("device_id")
        if device_id is not None and hasattr(pg, "_inner"):
            pg.bound_device_id = device_id
        if is_default and hasattr(pg, "_inner"):
            _on_default(pg, bound.arguments.get("store"), device_map)
        return result

    return helper


def _on_default(pg: Any, store: Any, device_map: dict[str, str]) -> None:
    _name_mesh_dims()
    tracer: Tracer = _state["tracer"]
    try:
        tracer.on_default_group(pg.rank(), pg.size(), store, _config_string(device_map))
    except Exception as exc:  # tracing is lost, the job goes on
        warn_once("default", "tracing disabled: %s", exc)
        tracer.close()


def _config_string(device_map: dict[str, str]) -> str:
    names = set(device_map.values())
    if len(names) == 1:
        return names.pop()
    return ",".join(f"{d}:{b}" for d, b in device_map.items())


def _wrap_get_backend(original: Any) -> Any:
    @functools.wraps(original)
    def get_backend(group: Any = None) -> Any:
        name = original(group)
        if str(name) == PLUGIN:
            from torch.distributed.distributed_c10d import Backend, _get_default_group

            pg = group or _get_default_group()
            real = getattr(pg, "_backend_config", None)
            if real:
                return Backend(real)
        return name

    return get_backend


def _wrap_destroy(original: Any) -> Any:
    """Close the trace before the default group goes away.

    Teardown is where backends occasionally abort the process; the trace is
    complete on disk before that can happen.
    """

    @functools.wraps(original)
    def destroy_process_group(group: Any = None) -> Any:
        from torch.distributed.distributed_c10d import GroupMember

        if group is None or group is GroupMember.WORLD:
            tracer = _state["tracer"]
            if tracer is not None:
                tracer.close("destroy")
        return original(group)

    return destroy_process_group


def _wrap_batch_isend_irecv(original: Any) -> Any:
    """Keep NCCL's coalesced path for batched point-to-point calls.

    ``batch_isend_irecv`` coalesces (NCCL group start/end: one launch, no deadlock
    between a rank's sends and receives) only when ``type(group) is ProcessGroup``,
    which a traced group is not: it would issue the calls one by one. For a traced
    group whose backend supports coalescing this runs the same coalesced branch;
    everything else goes to torch's own function.
    """
    from torch.distributed import distributed_c10d as c10d

    @functools.wraps(original)
    def batch_isend_irecv(p2p_op_list: list[Any]) -> Any:
        try:
            group = p2p_op_list[0].group or c10d._get_default_group()
            device = p2p_op_list[0].tensor.device
            coalesce = _is_traced(group) and _supports_coalescing(group, device)
        except Exception:  # torch's function reports bad input in its own words
            coalesce = False
        if not coalesce:
            return original(p2p_op_list)
        c10d._check_p2p_op_list(p2p_op_list)
        with c10d._coalescing_manager(group, device, async_ops=True) as cm:
            for op in p2p_op_list:
                peer = {"group_dst" if op.op is c10d.isend else "group_src": op.group_peer}
                op.op(op.tensor, group=op.group, tag=op.tag, **peer)
        return cm.works

    return batch_isend_irecv


def _supports_coalescing(group: Any, device: Any) -> bool:
    """Whether ``group``'s backend for ``device`` batches calls (NCCL does, gloo not)."""
    return bool(group._get_backend(device).supports_coalescing)


def _is_traced(group: Any) -> bool:
    from syncpace.capture.process_group import TracingProcessGroup  # torch is loaded here

    return isinstance(group, TracingProcessGroup)


def _build_backend(name: str, store: Any, opts: Any, backend_options: Any) -> tuple[Any, Any]:
    import torch.distributed as dist
    from torch._C._distributed_c10d import ProcessGroup

    if name == "gloo":
        backend = dist.ProcessGroupGloo(
            store, opts.group_rank, opts.group_size, timeout=opts.timeout
        )
        for attr, value in (
            ("global_ranks_in_group", list(opts.global_ranks_in_group)),
            ("group_name", opts.group_id),
        ):
            try:
                setattr(backend.options, attr, value)
            except Exception:
                pass
        backend_type = ProcessGroup.BackendType.GLOO
    else:
        options = (
            backend_options if backend_options is not None else dist.ProcessGroupNCCL.Options()
        )
        if backend_options is None:
            options.is_high_priority_stream = False
        options._timeout = opts.timeout
        options.global_ranks_in_group = list(opts.global_ranks_in_group)
        options.group_name = opts.group_id
        backend = dist.ProcessGroupNCCL(store, opts.group_rank, opts.group_size, options)
        backend_type = ProcessGroup.BackendType.NCCL
    if hasattr(backend, "_set_sequence_number_for_group"):
        backend._set_sequence_number_for_group()
    return backend, backend_type


def _create(opts: Any, backend_options: Any) -> Any:
    """Backend-plugin creator: the real backends, wrapped for tracing."""
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import ProcessGroup

    # Only now: at install time torch.distributed is half-initialised, and the
    # process group subclasses its ProcessGroup.
    from syncpace.capture.process_group import TracingProcessGroup

    group_name = str(opts.group_id)
    device_map = _pending.get(group_name) or _state["default_map"] or {"cpu": "gloo"}
    built = []
    by_name: dict[str, tuple[Any, Any]] = {}
    for device, name in device_map.items():
        # One backend per backend name, registered for every device that uses it, as
        # torch does: plain "gloo" maps cpu and cuda to gloo, and a second gloo mesh
        # would double the rendezvous and the sockets of every group.
        if name not in by_name:
            store = dist.PrefixStore(f"{device}/", opts.store)
            by_name[name] = _build_backend(name, store, opts, backend_options)
        backend, backend_type = by_name[name]
        built.append((torch.device(device), backend_type, backend))
    default_type = next((t for _, t, _ in built if t == ProcessGroup.BackendType.NCCL), built[0][1])
    default_name = "nccl" if default_type == ProcessGroup.BackendType.NCCL else built[0][2].name()
    inner = ProcessGroup(opts.store, opts.group_rank, opts.group_size)
    pgs = [inner]
    try:
        outer = TracingProcessGroup(
            inner,
            _state["tracer"],
            backend_name=default_name,
            global_ranks=list(opts.global_ranks_in_group) or list(range(opts.group_size)),
        )
        outer._backend_config = _config_string(device_map)
        pgs.append(outer)
    except Exception as exc:
        warn_once("wrap", "process group %s is not traced: %s", group_name, exc)
    for pg in pgs:
        pg._set_default_backend(default_type)
        for device, backend_type, backend in built:
            pg._register_backend(device, backend_type, backend)
    return pgs[-1]
