"""A stand-in for ``ProcessGroupNCCL`` on a machine without a GPU.

``FakeNCCL`` is a real C++ backend (gloo, so it runs on CPU tensors and can be
registered on a process group for the ``cuda`` device as NCCL) whose NCCL-only
Python methods, the ones torch's distributed code calls by name, record their calls
in :data:`CALLS` instead of talking to NCCL: options at construction, eager connect,
the no-color split of a non-member, comm split counts, group start/end around an
abort, timeouts, the Flight Recorder's ``uid``, tensor allocation, time estimation
and shrinking. :func:`install` makes torch build it wherever it would build
``ProcessGroupNCCL``, and makes torch believe in a CUDA accelerator (device
index 0) without touching CUDA itself.

C++ reaches only the gloo underneath: what torch calls through C++ (abort,
shutdown, the completion hook, sequence numbers) answers as gloo would, the same
traced and untraced.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

#: (method, details) in call order, for this process
CALLS: list[tuple[str, Any]] = []
#: the default group's NCCL backend, to tell "split from it" apart from other sources
ROOTS: dict[str, Any] = {}
NCCL_TIMEOUT = datetime.timedelta(seconds=123)


class Options(dist.ProcessGroupGloo._Options):
    """NCCL's options: the fields torch's helper and ``split_group`` set or copy."""

    def __init__(self) -> None:
        super().__init__()
        self.is_high_priority_stream = True
        self.split_from = None
        self.split_color = 0

    def __deepcopy__(self, memo: dict) -> Options:  # split_group copies its parent's
        other = Options()
        for name in ("is_high_priority_stream", "split_color", "global_ranks_in_group"):
            setattr(other, name, copy.copy(getattr(self, name)))
        other._timeout, other._devices, other.group_name = self._timeout, self._devices, ""
        return other


class FakeNCCL(dist.ProcessGroupGloo):
    Options = Options
    #: pybind11 hands C++ objects back as this subclass only while its Python object
    #: lives: keep every one alive, as NCCL's C++ type needs no such care
    instances: list[FakeNCCL] = []

    def __init__(self, store: Any, rank: int, size: int, options: Options) -> None:
        super().__init__(store, rank, size, timeout=options._timeout)
        options._devices = dist.ProcessGroupGloo.options.fget(self)._devices  # a split needs them
        self._options = options
        self.uid = 1000 + len(FakeNCCL.instances)
        FakeNCCL.instances.append(self)
        source = options.split_from
        CALLS.append(
            (
                "init",
                {
                    "high_priority": options.is_high_priority_stream,
                    "timeout_s": options._timeout.total_seconds(),
                    "global_ranks": list(options.global_ranks_in_group),
                    "split_from": None if source is None else ROOTS.get("default") is source,
                    "split_color": options.split_color if source is not None else None,
                    "size": size,
                },
            )
        )

    def name(self) -> str:
        return "nccl"

    @property
    def options(self) -> Options:
        return self._options

    @property
    def supports_splitting(self) -> bool:
        return True

    @property
    def supports_shrinking(self) -> bool:
        return True

    @property
    def supports_time_estimate(self) -> bool:
        return True

    def supports_tensor_alloc(self, device: Any) -> bool:
        return True

    def allocate_tensor(self, size: int, *, dtype: Any, device: Any) -> torch.Tensor:
        CALLS.append(("allocate_tensor", [size, str(dtype), str(device)]))
        return torch.zeros(size, dtype=dtype)

    def eager_connect_single_device(self, device: Any) -> None:
        CALLS.append(("eager_connect", str(device)))

    def perform_nocolor_split(self, device: Any) -> None:
        CALLS.append(("nocolor_split", str(device)))

    def comm_split_count(self) -> int:
        return 7

    def _group_start(self) -> None:
        CALLS.append(("group_start", None))

    def _group_end(self) -> None:
        CALLS.append(("group_end", None))

    def _set_default_timeout(self, timeout: Any) -> None:
        CALLS.append(("set_default_timeout", timeout.total_seconds()))

    def _add_ephemeral_timeout(self, timeout: Any) -> None:
        CALLS.append(("ephemeral_timeout", timeout.total_seconds()))

    def _start_time_estimate(self) -> None:
        CALLS.append(("start_time_estimate", None))

    def _end_time_estimate(self) -> float:
        CALLS.append(("end_time_estimate", None))
        return 4.5

    def shrink(self, excluded: list[int], flags: int, options: Any) -> Any:
        CALLS.append(("shrink", [list(excluded), flags]))
        remaining = self.size() - len(excluded)
        rank = self.rank() - sum(1 for r in excluded if r < self.rank())
        return dist.ProcessGroupGloo(dist.HashStore(), rank, remaining)


def install() -> None:
    """Build :class:`FakeNCCL` wherever torch builds ``ProcessGroupNCCL``, and claim
    one CUDA accelerator (what ``device_id=``, ``split_group`` and DeviceMesh ask)."""
    for module in (c10d, dist):
        module.ProcessGroupNCCL = FakeNCCL
        module.is_nccl_available = lambda: True
    c10d._NCCL_AVAILABLE = True
    c10d.default_pg_nccl_timeout = NCCL_TIMEOUT
    torch.accelerator.is_available = lambda: True
    torch.accelerator.current_accelerator = lambda *a, **k: torch.device("cuda")
    torch.accelerator.device_count = lambda: 1


def calls(name: str) -> list[Any]:
    """The details of every recorded call of ``name``."""
    return [details for method, details in CALLS if method == name]
