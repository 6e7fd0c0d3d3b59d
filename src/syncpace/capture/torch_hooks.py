"""Wiring into torch.distributed, so process groups are traced with no code change.

* A backend plugin ``syncpace`` is registered. Its creator builds the real backends
  (gloo, NCCL, or both) exactly as torch would, and returns them wrapped in a
  :class:`TracingProcessGroup`.
* ``_new_process_group_helper`` (the one path through which ``init_process_group``
  and ``new_group`` create groups) is wrapped to ask for ``syncpace`` instead of
  gloo/NCCL, remembering the real choice per group.
* ``get_backend`` is wrapped to report the real backend name, so user code that
  checks ``dist.get_backend() == "nccl"`` behaves as before; torch's own record of
  each group's backend (``_world.pg_map``, ``get_backend_config``) names the real one.
* ``destroy_process_group``, ``_abort_process_group``, ``batch_isend_irecv``,
  ``_time_estimator``, the making of a shrunk group and symmetric memory's rendezvous
  are wrapped where a traced group would otherwise behave differently from an
  untraced one (docs/tracer.md, "NCCL paths", lists every such place).

Other backends (MPI, UCC, XCCL, third-party) and groups on TorchComms pass through
untraced, with a warning. A group that cannot be traced runs untraced, with one
warning naming why.

One module of ~650 lines: every wrapper of a torch function lives here, so the list of
places the tracer changes torch's behaviour is this file and docs/tracer.md's table.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from syncpace.capture.log import warn_once

if TYPE_CHECKING:
    from syncpace.capture.tracer import Tracer


PLUGIN = "syncpace"
_TRACEABLE = {"gloo", "nccl"}

_state: dict[str, Any] = {"installed": False, "tracer": None, "default_map": None}
# group name -> (the real device->backend map, the device torch binds the group to)
_pending: dict[str, tuple[dict[str, str], Any]] = {}


class Untraceable(Exception):
    """The plugin could not prepare a group's backends; nothing was built yet, so
    torch's own path can build the group instead (untraced)."""


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
    dist = sys.modules.get("torch.distributed")
    for name, wrap in (
        ("_new_process_group_helper", _wrap_helper),
        ("get_backend", _wrap_get_backend),
        ("destroy_process_group", _wrap_destroy),
        ("_abort_process_group", _wrap_abort),
        ("batch_isend_irecv", _wrap_batch_isend_irecv),
        ("_time_estimator", _wrap_time_estimator),
        ("_create_shrunk_process_group", _wrap_shrunk),
    ):
        original = getattr(c10d, name, None)
        if original is None:  # an older torch without it: nothing to keep as untraced
            continue
        patched = wrap(original)
        setattr(c10d, name, patched)
        # torch.distributed re-exports some of them; when armed by the import hook it
        # is still half-initialised and picks the patched ones up itself.
        if getattr(dist, name, None) is original:
            setattr(dist, name, patched)
    _wrap_symmetric_memory()
    _state["installed"] = True
    _name_mesh_dims()


def install_backward_mark(tracer: Tracer) -> None:
    """Wrap ``torch.autograd.backward`` (what ``Tensor.backward`` calls) so the tracer
    notes when each iteration's first backward pass begins: from then on gradients, and
    the buckets that carry them, can be ready (the overlap what-if spreads transfers over
    backward only). It observes and changes nothing; idempotent."""
    import torch.autograd as autograd

    _state["backward"] = tracer
    original = autograd.backward
    if getattr(original, "_syncpace_mark", False):
        return

    @functools.wraps(original)
    def backward(*args: Any, **kwargs: Any) -> Any:
        marks = _state.get("backward")
        if marks is not None:
            try:
                marks.on_backward()
            except Exception:  # the job must not notice
                pass
        return original(*args, **kwargs)

    backward._syncpace_mark = True  # type: ignore[attr-defined]
    autograd.backward = backward


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
    """Create gloo/NCCL groups through the plugin, so they come out traced.

    Contract: the group returned behaves as torch's own (see :func:`_create`), and
    torch's record of it (``_world.pg_map``, ``pg_backend_config``) names the real
    backend, not the plugin. A group the plugin cannot prepare is made by torch's own
    path, untraced, with one warning.
    """
    from torch.distributed import distributed_c10d as c10d

    signature = inspect.signature(original)

    @functools.wraps(original)
    def helper(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
            requested = bound.arguments.get("backend", "")
            backend = str(requested).lower()
            group_name = str(bound.arguments.get("group_name"))
            is_default = c10d._world.default_pg is None if hasattr(c10d, "_world") else False
            if backend == PLUGIN:
                device_map = _state["default_map"] or {"cpu": "gloo"}
            else:
                device_map = _device_map(backend or "undefined")
            traceable = set(device_map.values()) <= _TRACEABLE
            torchcomms = getattr(c10d, "_use_torchcomms_enabled", bool)()
        except Exception as exc:
            warn_once("bind", "cannot trace this torch version's process groups: %s", exc)
            return original(*args, **kwargs)
        if torchcomms:  # torch builds TorchComms' backends then, not gloo's or NCCL's
            warn_once("torchcomms", "process groups on TorchComms are not traced")
            return original(*args, **kwargs)
        if not traceable:
            warn_once(f"backend-{backend}", "backend %r is not traced (gloo and nccl are)", backend)
            return original(*args, **kwargs)
        if is_default:
            _state["default_map"] = device_map
        _pending[group_name] = (device_map, bound.arguments.get("device_id"))
        bound.arguments["backend"] = PLUGIN
        try:
            result = original(*bound.args, **bound.kwargs)
        except Untraceable as exc:
            warn_once(
                f"prepare-{type(exc.__cause__).__name__}",
                "process group %s runs untraced (as does any other failing the same way): %s",
                group_name,
                exc,
            )
            return original(*args, **kwargs)
        finally:
            _pending.pop(group_name, None)
        pg = result[0] if isinstance(result, tuple) else result
        _name_real_backend(pg, requested)
        if is_default and hasattr(pg, "_inner"):
            _on_default(pg, bound.arguments.get("store"), device_map)
        return result

    return helper


def _name_real_backend(pg: Any, backend: Any) -> None:
    """Put the real backend back where torch keeps each group's backend.

    torch recorded the plugin; ``get_backend``, ``get_backend_config``, the Flight
    Recorder's group list, a new group's default backend and timeout, and
    ``split_group``'s child backend all read it back from there.
    """
    from torch.distributed import distributed_c10d as c10d

    try:
        entry = c10d._world.pg_map.get(pg)
        if entry is None or str(entry[0]).lower() != PLUGIN or str(backend).lower() == PLUGIN:
            return
        c10d._world.pg_map[pg] = (backend, entry[1])
        c10d._world.pg_backend_config[pg] = str(c10d.BackendConfig(c10d.Backend(str(backend))))
    except Exception as exc:  # only introspection suffers: the group works
        warn_once("world", "torch's record of a traced group names the plugin: %s", exc)


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

        _wait_for_hooks(GroupMember.WORLD if group is None else group)
        _close_with_world(group)
        return original(group)

    return destroy_process_group


def _close_with_world(group: Any) -> None:
    """Close the trace when ``group`` is the whole world (None or WORLD): what is still
    in flight goes down with it."""
    from torch.distributed.distributed_c10d import GroupMember

    if group is None or group is GroupMember.WORLD:
        tracer = _state["tracer"]
        if tracer is not None:
            tracer.close("destroy")


def _wait_for_hooks(pg: Any) -> None:
    """What ``destroy_process_group`` does for a plain group with completion hooks.

    torch waits for the hooks' pending works (they run Python on NCCL's watchdog
    thread, which must not outlive the interpreter) only when ``type(pg) is
    ProcessGroup``; a traced group holds the same backend, so it waits the same way.
    """
    if _is_traced(pg) and pg._has_hooks():
        pg._wait_for_pending_works()


def _wrap_abort(original: Any) -> Any:
    """Close the trace before every group is aborted, as before it is destroyed:
    the calls in flight are recorded ``aborted``; torch then aborts the same
    backends it would untraced (NCCL's inside one group start/end)."""

    @functools.wraps(original)
    def _abort_process_group(group: Any = None) -> Any:
        _close_with_world(group)
        return original(group)

    return _abort_process_group


def _wrap_time_estimator(original: Any) -> Any:
    """Inside ``_time_estimator`` NCCL only estimates the calls, it runs none: they
    pass through a traced group untraced, so no event claims to have run."""

    @functools.wraps(original)
    @contextlib.contextmanager
    def _time_estimator(group: Any = None, device: Any = None) -> Any:
        from torch.distributed.distributed_c10d import _get_default_group

        with _untraced(group or _get_default_group()), original(group, device) as cm:
            yield cm

    return _time_estimator


@contextlib.contextmanager
def _untraced(group: Any) -> Any:
    """Calls through ``group`` pass through untraced while the context lasts."""
    if not _is_traced(group):
        yield
        return
    saved, group._bypass = group._bypass, _always
    try:
        yield
    finally:
        group._bypass = saved


def _always() -> bool:
    return True


def _wrap_symmetric_memory() -> None:
    """Symmetric memory's rendezvous and allocation see each group with its store.

    C++ symmetric memory finds a group by name and reads its store
    (``ProcessGroup::getStore``), which a traced group lacks (see
    ``TracingProcessGroup.__init__``); for the length of these calls the names
    resolve to the plain groups inside, which hold the same backends and a store.
    """
    try:
        from torch._C._distributed_c10d import _SymmetricMemory
    except ImportError:  # a build without symmetric memory
        return
    for name in ("rendezvous", "empty_strided_p2p"):
        original = getattr(_SymmetricMemory, name, None)
        if original is not None:
            setattr(_SymmetricMemory, name, staticmethod(_with_plain_names(original)))


def _with_plain_names(original: Any) -> Any:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _plain_names():
            return original(*args, **kwargs)

    return call


@contextlib.contextmanager
def _plain_names() -> Any:
    """Every traced group's name resolves to its inner group while the context lasts."""
    from torch.distributed import distributed_c10d as c10d

    swapped: list[tuple[str, Any]] = []
    try:
        for pg, name in list(c10d._world.pg_names.items()):
            if _is_traced(pg):
                c10d._unregister_process_group(name)
                swapped.append((name, pg))
                c10d._register_process_group(name, pg._inner)
        yield
    finally:
        for name, pg in swapped:
            with contextlib.suppress(Exception):  # not registered if the swap failed
                c10d._unregister_process_group(name)
            c10d._register_process_group(name, pg)


def _wrap_shrunk(original: Any) -> Any:
    """Trace the group ``shrink_group`` makes (NCCL's ``ncclCommShrink``).

    torch builds it as a plain group around the shrunk backend; a shrunk subgroup is
    wrapped like any group. A shrunk default group stays untraced (one warning):
    shrinking destroyed the old default group first, which closed the trace.
    """

    @functools.wraps(original)
    def _create_shrunk_process_group(
        new_backend: Any, remaining_ranks: list[int], metadata: Any, is_default_group: bool
    ) -> Any:
        pg = original(new_backend, remaining_ranks, metadata, is_default_group)
        if is_default_group:
            warn_once("shrink-default", "the shrunk default group is not traced")
            return pg
        return _trace_shrunk(pg, list(remaining_ranks))

    return _create_shrunk_process_group


def _trace_shrunk(pg: Any, global_ranks: list[int]) -> Any:
    from torch._C._distributed_c10d import ProcessGroup
    from torch.distributed import distributed_c10d as c10d

    from syncpace.capture.process_group import wrap_group  # torch is loaded here

    tracer = _state["tracer"]
    if tracer is None:
        return pg
    bound = pg.bound_device_id
    try:
        name = pg._get_backend_name()
        default_type = ProcessGroup.BackendType.__members__[name.upper()]
        # torch registered the shrunk backend before binding the group to its device,
        # so the backend itself is unbound: register it on the wrapper the same way.
        pg.bound_device_id = None
        outer = wrap_group(
            pg,
            tracer,
            backend_name=name,
            global_ranks=global_ranks,
            types={d.type: default_type for d in pg._device_types},
            default_type=default_type,
        )
        outer.bound_device_id = bound
        outer._set_group_name(pg.group_name)
        outer._set_group_desc(pg.group_desc)
        if pg in c10d._world.pg_backend_config:  # torch keyed it by the plain group
            c10d._world.pg_backend_config[outer] = c10d._world.pg_backend_config.pop(pg)
    except Exception as exc:
        warn_once(f"shrink-{type(exc).__name__}", "a shrunk process group is not traced: %s", exc)
        pg.bound_device_id = bound
        return pg
    return outer


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


@dataclass
class _Plan:
    """What torch's helper would build for one group, decided before anything is."""

    store: Any  # the group's store: torch's PrefixStore("<group name>/", job store)
    device_map: dict[str, str]  # device type -> backend name (gloo, nccl)
    device_id: Any  # the device the group is bound to, or None
    types: dict[str, Any]  # device type -> ProcessGroup.BackendType
    default_type: Any
    default_name: str
    nccl_options: Any  # ProcessGroupNCCL.Options, ready to build with; None without NCCL
    debug_wrap: bool  # TORCH_DISTRIBUTED_DEBUG=DETAIL: each backend in a ProcessGroupWrapper


def _prepare(opts: Any, backend_options: Any) -> _Plan:
    """Every decision torch's ``_new_process_group_helper`` takes before it builds."""
    from torch._C._distributed_c10d import ProcessGroup
    from torch.distributed import distributed_c10d as c10d

    device_map, device_id = _pending.get(str(opts.group_id)) or (
        _state["default_map"] or {"cpu": "gloo"},
        None,
    )
    kinds = {"gloo": ProcessGroup.BackendType.GLOO, "nccl": ProcessGroup.BackendType.NCCL}
    types = {device: kinds[name] for device, name in device_map.items()}
    nccl = "nccl" in device_map.values()
    return _Plan(
        store=_group_store(opts.store),
        device_map=device_map,
        device_id=device_id,
        types=types,
        default_type=ProcessGroup.BackendType.NCCL if nccl else ProcessGroup.BackendType.GLOO,
        default_name="nccl" if nccl else "gloo",
        nccl_options=_nccl_options(opts, backend_options) if nccl else None,
        debug_wrap=c10d.get_debug_level() == c10d.DebugLevel.DETAIL and c10d._GLOO_AVAILABLE,
    )


def _group_store(store: Any) -> Any:
    """The group's own store, as torch's helper makes it.

    torch hands the plugin its first device's store (``<group>/<device>/``); the
    backends are built on ``<group>/<device>/`` of the group's store as torch would,
    so a rank whose group fell back to torch's own path still meets its peers.
    """
    return getattr(store, "underlying_store", None) or store


def _nccl_options(opts: Any, backend_options: Any) -> Any:
    """NCCL's options for this group, made exactly as torch's helper makes them:
    the caller's (checked, their timeout overridden) or defaults without the
    high-priority stream; the default group's communicator to split from once that
    group is bound to a device (``ncclCommSplit``: non-members split it too, so
    members must); the group's ranks and name."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    options = backend_options
    if options is not None:
        if not isinstance(options, dist.ProcessGroupNCCL.Options):
            raise AssertionError(
                "Expected backend_options argument to be of type ProcessGroupNCCL.Options"
            )
        if options._timeout != opts.timeout:
            warnings.warn(
                "backend_options._timeout was specified, "
                "but timeout kwarg has a default value that will always override it. ",
                stacklevel=2,
            )
    else:
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = False
    options._timeout = opts.timeout
    global_ranks = list(opts.global_ranks_in_group)
    split_from = None
    if c10d.is_initialized() and c10d._get_default_group().bound_device_id:
        split_from = c10d._get_split_source(c10d._get_default_group())
    if split_from:
        options.split_from = split_from
        options.split_color = c10d._process_group_color(global_ranks)
    options.global_ranks_in_group = global_ranks
    options.group_name = opts.group_id
    return options


def _build_backend(name: str, device: str, plan: _Plan, opts: Any) -> Any:
    """One real backend, built, numbered and (in DETAIL debug mode) wrapped as torch
    builds it. Its own errors propagate: untraced, torch would raise them too."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    store = dist.PrefixStore(f"{device}/", plan.store)
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
    else:
        backend = dist.ProcessGroupNCCL(store, opts.group_rank, opts.group_size, plan.nccl_options)
    if hasattr(backend, "_set_sequence_number_for_group"):
        backend._set_sequence_number_for_group()
    if plan.debug_wrap:
        backend = c10d._create_process_group_wrapper(
            wrapped_pg=backend,
            store_prefix=opts.group_id,
            store=store,
            rank=opts.group_rank,
            world_size=opts.group_size,
            timeout=opts.timeout,
        )
    return backend


def _create(opts: Any, backend_options: Any) -> Any:
    """Backend-plugin creator: the real backends, built as torch builds them, traced.

    Contract: the group returned holds what torch's own helper would give it (the
    same backends on the same store keys, options, bound device and default
    backend), so traced and untraced ranks interoperate. Raises :class:`Untraceable`
    when preparing fails (nothing built yet: the helper runs torch's own path); a
    backend's own error propagates as it would untraced; when wrapping fails the
    plain group is returned, untraced, with one warning.
    """
    import torch
    from torch._C._distributed_c10d import ProcessGroup

    # Only now: at install time torch.distributed is half-initialised, and the
    # process group subclasses its ProcessGroup.
    from syncpace.capture.process_group import wrap_group

    try:
        plan = _prepare(opts, backend_options)
    except Exception as exc:
        raise Untraceable(f"cannot prepare its backends: {exc}") from exc
    inner = ProcessGroup(plan.store, opts.group_rank, opts.group_size)
    if plan.device_id is not None:  # before the backends, which take it from the group
        inner.bound_device_id = plan.device_id
    inner._set_default_backend(plan.default_type)
    # One backend per backend name, registered for every device that uses it, as
    # torch does: plain "gloo" maps cpu and cuda to gloo, and a second gloo mesh
    # would double the rendezvous and the sockets of every group.
    built: dict[str, Any] = {}
    for device, name in plan.device_map.items():
        if name not in built:
            built[name] = _build_backend(name, device, plan, opts)
        inner._register_backend(torch.device(device), plan.types[device], built[name])
    try:
        outer = wrap_group(
            inner,
            _state["tracer"],
            backend_name=plan.default_name,
            global_ranks=list(opts.global_ranks_in_group) or list(range(opts.group_size)),
            types=plan.types,
            default_type=plan.default_type,
        )
        outer._backend_config = _config_string(plan.device_map)
    except Exception as exc:
        warn_once(
            f"wrap-{type(exc).__name__}",
            "process group %s runs untraced (as does any other failing the same way): %s",
            opts.group_id,
            exc,
        )
        return inner
    return outer
