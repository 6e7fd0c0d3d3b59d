"""A process group that times every operation of the real one it wraps.

``TracingProcessGroup`` is a Python subclass of ``torch.distributed.ProcessGroup``.
torch calls its methods both from Python (``dist.all_reduce`` → ``group.allreduce``)
and from C++ through the virtual-method trampoline (DDP's reducer, functional
collectives), so every operation, whatever API issued it, passes through
:meth:`TracingProcessGroup._call`. The real backends are also registered on this
object, so ``group._get_backend(device)`` and backend-name checks keep working.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from syncpace.capture.dynamo import keep_out
from syncpace.trace.schema import NO_PEER

Recorder = Any  # syncpace.capture.tracer.Tracer; typed loosely to avoid an import cycle


def _payload(x: Any) -> tuple[int, str]:
    """Bytes and dtype name of a tensor or (nested) list of tensors, in one pass."""
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size(), _DTYPE_NAMES.get(x.dtype) or _dtype_name(x.dtype)
    nbytes, dtype = 0, ""
    if isinstance(x, (list, tuple)):
        for item in x:
            n, d = _payload(item)
            nbytes += n
            dtype = dtype or d
    return nbytes, dtype


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
    """Forwards every call to ``inner`` and records its timing through ``recorder``."""

    def __init__(
        self,
        inner: dist.ProcessGroup,
        recorder: Recorder,
        *,
        backend_name: str,
        global_ranks: list[int],
    ) -> None:
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

    # Identity ------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - name fixed by torch
        return self._backend_name

    def name(self) -> str:
        return self._backend_name

    def _set_group_name(self, name: str) -> None:
        self._group = name
        self._inner._set_group_name(name)
        super()._set_group_name(name)
        self._recorder.on_group(name, self._global_ranks, self._backend_name)

    def _set_group_desc(self, desc: str) -> None:
        self._inner._set_group_desc(desc)
        super()._set_group_desc(desc)
        self._recorder.on_group(self._group, self._global_ranks, self._backend_name, desc)

    @property
    def group_name(self) -> str:
        return self._group

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
    ) -> Any:
        recorder = self._recorder
        on_device = recorder.device_timeline is not None and recorder.device_owns(args)
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
            return self._call(method, op, args, kwargs, 0, "", NO_PEER, seq)
        nbytes, dtype = _payload(args[arg])
        if times_size:
            nbytes *= self._n
        return self._call(method, op, args, kwargs, nbytes, dtype, NO_PEER, seq)

    def _p2p(self, method: str, op: str, peer_arg: int | None, args: tuple, kwargs: dict) -> Any:
        peer = NO_PEER
        if peer_arg is not None and peer_arg < len(args) and isinstance(args[peer_arg], int):
            local = args[peer_arg]
            peer = self._global_ranks[local] if 0 <= local < len(self._global_ranks) else local
        key = (op, peer)
        seq = self._p2p_seq.get(key, 0)
        self._p2p_seq[key] = seq + 1
        nbytes, dtype = _payload(args[0] if args else None)
        return self._call(method, op, args, kwargs, nbytes, dtype, peer, seq)


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


for _method, (_op, _arg, _times) in _COLLECTIVES.items():
    setattr(TracingProcessGroup, _method, _make_collective(_method, _op, _arg, _times))
for _method, (_op, _peer) in _POINT_TO_POINT.items():
    setattr(TracingProcessGroup, _method, _make_p2p(_method, _op, _peer))

# Frames C++ enters while a compiled region runs: Dynamo must run them, not compile them.
keep_out(TracingProcessGroup)
