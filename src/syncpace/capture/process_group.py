"""A process group that times every operation of the real one it wraps.

``TracingProcessGroup`` is a Python subclass of ``torch.distributed.ProcessGroup``.
torch calls its methods both from Python (``dist.all_reduce`` → ``group.allreduce``)
and from C++ through the virtual-method trampoline (DDP's reducer, functional
collectives), so every operation, whatever API issued it, passes through
:meth:`TracingProcessGroup._call`. The real backends are also registered on this
object, so ``group._get_backend(device)`` and backend-name checks keep working.

Everything torch asks of a group that is not an operation (abort, shutdown, the
completion hook, sequence numbers, timeouts, the store) is answered by the C++
``ProcessGroup`` underneath from those same backends. What C++ would make anew from
this object, a split (``split_group``: NCCL's comm split, DeviceMesh's dimensions),
is made from the inner group and traced likewise. docs/tracer.md ("NCCL paths")
lists every place torch treats a group specially and how each stays as untraced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from syncpace.capture.dynamo import keep_out
from syncpace.capture.log import warn_once
from syncpace.trace.schema import NO_PEER

Recorder = Any  # syncpace.capture.tracer.Tracer; typed loosely to avoid an import cycle


def _payload(x: Any) -> tuple[int, str, Any]:
    """Bytes and dtype name of a tensor or (nested) list of tensors, and the first
    tensor (where the call runs), in one pass."""
    if isinstance(x, torch.Tensor):
        dtype = _DTYPE_NAMES.get(x.dtype) or _dtype_name(x.dtype)
        return x.numel() * x.element_size(), dtype, x
    nbytes, dtype, first = 0, "", None
    if isinstance(x, (list, tuple)):
        for item in x:
            n, d, t = _payload(item)
            nbytes += n
            dtype = dtype or d
            first = t if first is None else first
    return nbytes, dtype, first


_DTYPE_NAMES: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


# method name -> (canonical op, index of the argument that carries the message,
#                 multiply the bytes by the group size?)
# The message argument is the one nccl-tests counts: the buffer for all-reduce, the
# gathered output for all-gather, the full input for reduce-scatter and all-to-all.
_COLLECTIVES: dict[str, tuple[str, int, bool]] = {
    "allreduce": ("all_reduce", 0, False),
    "allreduce_coalesced": ("all_reduce", 0, False),
    "broadcast": ("broadcast", 0, False),
    "reduce": ("reduce", 0, False),
    "allgather": ("all_gather", 0, False),
    "allgather_coalesced": ("all_gather", 0, False),
    "_allgather_base": ("all_gather", 0, False),
    "all_gather_single": ("all_gather", 0, False),
    "allgather_into_tensor_coalesced": ("all_gather", 0, False),
    "all_gather_single_coalesced": ("all_gather", 0, False),
    "reduce_scatter": ("reduce_scatter", 1, False),
    "_reduce_scatter_base": ("reduce_scatter", 1, False),
    "reduce_scatter_single": ("reduce_scatter", 1, False),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 1, False),
    "reduce_scatter_single_coalesced": ("reduce_scatter", 1, False),
    "gather": ("gather", 1, True),
    "scatter": ("scatter", 0, True),
    "alltoall": ("all_to_all", 1, False),
    "alltoall_base": ("all_to_all", 1, False),
    "all_to_all_single": ("all_to_all", 1, False),
    "barrier": ("barrier", -1, False),
    "monitored_barrier": ("barrier", -1, False),
}

# method name -> (canonical op, index of the peer argument or None for "any source")
_POINT_TO_POINT: dict[str, tuple[str, int | None]] = {
    "send": ("send", 1),
    "recv": ("recv", 1),
    "recv_anysource": ("recv", None),
}


class TracingProcessGroup(dist.ProcessGroup):
    """Forwards every call to ``inner`` and records its timing through ``recorder``.

    Built by :func:`wrap_group`, which also hands it ``inner``'s backends.
    """

    def __init__(
        self,
        inner: dist.ProcessGroup,
        recorder: Recorder,
        *,
        backend_name: str,
        global_ranks: list[int],
    ) -> None:
        # Only the (rank, size) constructor can build a Python subclass: torch's
        # store-taking one returns a plain C++ group. So this group has no store of
        # its own; get_group_store and splitGroup answer from the inner group's.
        super().__init__(inner.rank(), inner.size())
        self._inner = inner
        self._recorder = recorder
        self._backend_name = backend_name
        self._global_ranks = global_ranks
        self._n = len(global_ranks)
        self._group = ""
        self._seq = 0
        self._p2p_seq: dict[tuple[str, int], int] = {}
        self._coalesced: list[tuple[tuple, int]] | None = None
        # device type -> BackendType, and the default: what a split registers again
        self._types: dict[str, Any] = {}
        self._default_type: Any = None
        # While this answers true, calls pass through untraced (see _call); None for
        # groups that can never need it, so the hot path pays one test.
        self._bypass: Callable[[], bool] | None = None
        self._last_split: Any = None

    # Identity ------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - name fixed by torch
        return self._backend_name

    def name(self) -> str:
        return self._backend_name

    def _set_group_name(self, name: str) -> None:
        self._group = name
        self._inner._set_group_name(name)
        super()._set_group_name(name)
        self._note_group(None)

    def _set_group_desc(self, desc: str) -> None:
        self._inner._set_group_desc(desc)
        super()._set_group_desc(desc)
        self._note_group(desc)

    def _note_group(self, desc: str | None) -> None:
        """Tell the recorder about this group; torch's group creation never sees a
        recorder's failure (the group stays traced, its metadata incomplete)."""
        try:
            self._recorder.on_group(self._group, self._global_ranks, self._backend_name, desc)
        except Exception as exc:
            warn_once("group-meta", "a process group's metadata is not recorded: %s", exc)

    @property
    def group_name(self) -> str:
        return self._group

    def get_group_store(self) -> Any:
        """The group's store (torch registers a split group under it)."""
        return self._inner.get_group_store()

    @property
    def bound_device_id(self) -> Any:
        """The device torch bound this group to (``init_process_group(device_id=)``)."""
        return dist.ProcessGroup.bound_device_id.__get__(self)

    @bound_device_id.setter
    def bound_device_id(self, device: Any) -> None:
        # Both groups: torch reads it from this one (barrier, split_group, shrink_group),
        # and each hands it to the backends registered on it, which must agree.
        self._inner.bound_device_id = device
        dist.ProcessGroup.bound_device_id.__set__(self, device)

    # Groups made from this one ---------------------------------------------------
    def splitGroup(  # noqa: N802 - the name C++'s virtual-method trampoline calls
        self,
        ranks: list[int],
        timeout: Any = None,
        opts: Any = None,
        group_name: str | None = None,
        group_desc: str | None = None,
        devices: Any = None,
    ) -> Any:
        """``group.split_group(...)`` (torch's ``split_group``: NCCL's comm split,
        DeviceMesh's dimensions once the default group is bound to a device).

        Contract: the inner group's own split, so the backends split exactly as
        untraced, returned traced (:func:`wrap_group`); ``None`` where the inner
        split returns ``None``; the plain split, untraced, with one warning, where
        wrapping it fails.
        """
        split = self._inner.split_group(
            ranks,
            timeout=timeout,
            opts=opts,
            group_name=group_name,
            group_desc=group_desc,
            device_types=devices,
        )
        if split is None:
            return None
        members = [self._global_ranks[r] for r in sorted(ranks)]
        derived = self._derived(split, members)
        # It reaches the caller through C++, which holds the C++ object only: were
        # this Python object freed on the way, the caller would get a plain group
        # (pybind11 finds a Python object by its C++ pointer while it lives). Held
        # until the next split; torch's split_group registers it long before.
        self._last_split = derived
        return derived

    def _derived(self, pg: Any, global_ranks: list[int]) -> Any:
        """``pg``, made by C++ from this group's backends, traced like this group."""
        try:
            present = {d.type for d in pg._device_types}
            types = {d: t for d, t in self._types.items() if d in present}
            outer = wrap_group(
                pg,
                self._recorder,
                backend_name=self._backend_name,
                global_ranks=global_ranks,
                types=types,
                default_type=self._default_type,
            )
            outer._set_group_name(pg.group_name)
            outer._set_group_desc(pg.group_desc)
        except Exception as exc:
            warn_once(
                f"derived-{type(exc).__name__}",
                "process group %s runs untraced (as does any other failing the same way): %s",
                getattr(pg, "group_name", "?"),
                exc,
            )
            return pg
        return outer

    def _start_coalescing(self, *args: Any) -> Any:
        """The backend batches the calls that follow until ``_end_coalescing``
        (NCCL's group start/end); their events complete with the batch's work."""
        result = self._inner._start_coalescing(*args)
        self._coalesced = []
        return result

    def _end_coalescing(self, *args: Any) -> Any:
        calls, self._coalesced = self._coalesced, None
        try:
            work = self._inner._end_coalescing(*args)
        except BaseException as exc:
            for row, token in calls or ():
                self._recorder.raised(row, exc, token)
            raise
        if not calls:
            return work
        return self._recorder.completed_batch(work, calls)

    # Tracing -------------------------------------------------------------------
    def _call(
        self,
        method: str,
        op: str,
        args: tuple,
        kwargs: dict,
        nbytes: int,
        dtype: str,
        peer: int,
        seq: int,
        tensor: Any,
    ) -> Any:
        bypass = self._bypass
        if bypass is not None and bypass():  # see wrap_group: nothing to time here
            return getattr(self._inner, method)(*args, **kwargs)
        recorder = self._recorder
        on_device = recorder.device_timeline is not None and recorder.device_owns(tensor)
        # The first call of a step is its sync point: arrival noted, pacing applied.
        if recorder.arrival_step == recorder.step:
            enter = recorder.now()
        else:
            enter = recorder.arrive(on_device)
        if recorder.paused:  # tracing switched off at runtime: the call passes through
            recorder.skip_paused()
            return getattr(self._inner, method)(*args, **kwargs)
        row = (
            recorder.rank,
            recorder.step,
            self._group,
            self._n,
            seq,
            op,
            nbytes,
            dtype,
            peer,
            enter,
        )
        token = recorder.begin(row)  # the journal's and the stall watchdog's registries
        if on_device:
            recorder.device_start(token)
        try:
            work = getattr(self._inner, method)(*args, **kwargs)
        except BaseException as exc:
            recorder.raised(row, exc, token)
            raise
        coalesced = self._coalesced
        if coalesced is not None:  # completes with the batch: see _end_coalescing
            coalesced.append((row, token))
            return work
        return recorder.completed(work, row, token)

    def _collective(
        self, method: str, op: str, arg: int, times_size: bool, args: tuple, kwargs: dict
    ) -> Any:
        seq = self._seq
        self._seq = seq + 1
        if arg < 0 or arg >= len(args):
            return self._call(method, op, args, kwargs, 0, "", NO_PEER, seq, None)
        nbytes, dtype, tensor = _payload(args[arg])
        if times_size:
            nbytes *= self._n
        return self._call(method, op, args, kwargs, nbytes, dtype, NO_PEER, seq, tensor)

    def _p2p(self, method: str, op: str, peer_arg: int | None, args: tuple, kwargs: dict) -> Any:
        peer = NO_PEER
        if peer_arg is not None and peer_arg < len(args) and isinstance(args[peer_arg], int):
            local = args[peer_arg]
            peer = self._global_ranks[local] if 0 <= local < len(self._global_ranks) else local
        key = (op, peer)
        seq = self._p2p_seq.get(key, 0)
        self._p2p_seq[key] = seq + 1
        nbytes, dtype, tensor = _payload(args[0] if args else None)
        return self._call(method, op, args, kwargs, nbytes, dtype, peer, seq, tensor)


def _make_collective(method: str, op: str, arg: int, times_size: bool) -> Callable[..., Any]:
    def traced(self: TracingProcessGroup, *args: Any, **kwargs: Any) -> Any:
        return self._collective(method, op, arg, times_size, args, kwargs)

    traced.__name__ = method
    traced.__doc__ = f"Traced ``{method}``: recorded as ``{op}``."
    return traced


def _make_p2p(method: str, op: str, peer_arg: int | None) -> Callable[..., Any]:
    def traced(self: TracingProcessGroup, *args: Any, **kwargs: Any) -> Any:
        return self._p2p(method, op, peer_arg, args, kwargs)

    traced.__name__ = method
    traced.__doc__ = f"Traced ``{method}``: recorded as ``{op}``."
    return traced


def wrap_group(
    inner: Any,
    recorder: Recorder,
    *,
    backend_name: str,
    global_ranks: list[int],
    types: dict[str, Any],
    default_type: Any,
) -> TracingProcessGroup:
    """A traced group over the plain group ``inner`` and its own backends.

    Contract: the result answers every question torch asks of a group as ``inner``
    does: the same backend objects for the same devices (``types``: every device type
    of ``inner`` -> its ``ProcessGroup.BackendType``, in the order ``inner``
    registered them), the same default backend and bound device; its
    store for Python callers (C++ sees none: see ``TracingProcessGroup.__init__``).
    Raises whatever fails; the caller then keeps ``inner``, untraced.
    """
    outer = TracingProcessGroup(
        inner,
        recorder,
        backend_name=backend_name,
        global_ranks=global_ranks,
    )
    outer._types = dict(types)
    outer._default_type = default_type
    # Before the backends: registering one hands it the group's bound device, which
    # must stay the one the inner group gave it.
    bound = inner.bound_device_id
    if bound is not None:
        dist.ProcessGroup.bound_device_id.__set__(outer, bound)
    outer._set_default_backend(default_type)
    # In ``types``' order, the inner group's: torch lists a group's devices
    # (_device_types, _device_capability) in the order they were registered.
    for device_type, backend_type in types.items():
        device = torch.device(device_type)
        outer._register_backend(device, backend_type, inner._get_backend(device))
    if "cuda" in types and torch.cuda.is_available():
        outer._bypass = _stream_capturing
    return outer


def _stream_capturing() -> bool:
    """Whether the current CUDA stream is being captured into a graph.

    A captured collective runs at every replay, never at its call, and completion
    cannot be observed during capture (querying an event there is illegal), so it
    passes through untraced, as the Flight Recorder leaves it out too.
    """
    if torch.cuda.is_current_stream_capturing():
        warn_once("graph", "collectives captured into a CUDA graph are not traced")
        return True
    return False


for _method, (_op, _arg, _times) in _COLLECTIVES.items():
    setattr(TracingProcessGroup, _method, _make_collective(_method, _op, _arg, _times))
for _method, (_op, _peer) in _POINT_TO_POINT.items():
    setattr(TracingProcessGroup, _method, _make_p2p(_method, _op, _peer))

# Frames C++ enters while a compiled region runs: Dynamo must run them, not compile them.
keep_out(TracingProcessGroup)
