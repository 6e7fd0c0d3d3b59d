"""How an analysis process allocates memory: freed memory is reused, not handed back.

The streaming analysis allocates and frees a window's columns over and over (Arrow's
decoded batches, numpy's arrays, polars' frames). An allocator that hands freed pages
back to the kernel at once takes them again as page faults, each page zeroed by the
kernel: measured on 20 M events of 512 ranks on one core, a third of the CPU time was
in the kernel (``clear_page``, page faults). Keeping freed memory for the next window
cuts the system time from 3.7 s to 0.8 s and the events per CPU-second from 1.47 M to
2.0 M; the peak stays about that of one window, since the next one reuses its memory.

Each is told once per process:

- Arrow's default pool, mimalloc (as the wheels build it), keeps freed pages for ten
  seconds before it hands them back (``MIMALLOC_PURGE_DELAY``; its default, 10 ms,
  hands them back at once, and they come back as page faults). It reads the option
  when pyarrow is loaded, so :func:`keep_arrow_pages` loads it. Measured on the sweep
  of 100 M events of 4,096 ranks on one core: 47.2 s of CPU on glibc's malloc (a fifth
  of it in malloc and free: a window's batches are decoded into thousands of buffers of
  every size), 42.1 s on mimalloc as it comes, 39.7 s with the delay. Where pyarrow
  was loaded before (a library user's process), Arrow is put on glibc's malloc
  instead, told as numpy is (below);
- glibc's malloc (numpy's) is told by ``mallopt`` to keep up to 64 MiB free at the top
  of its heap and to take blocks below 64 MiB from the heap (an ``mmap``'d block is
  handed back, and faulted in again, every time);
- polars' own jemalloc keeps freed pages for a second (``dirty_decay_ms``) and then
  returns them at once: a window takes a fraction of a second, so the next one reuses
  them, and what a phase of the analysis no longer needs is returned. It reads its
  options (``_RJEM_MALLOC_CONF``) when polars is loaded, so :func:`keep_polars_pages`
  loads it;
- numpy stops asking the kernel for transparent huge pages (``madvise`` of every array
  of 4 MiB or more): where the kernel grants them on request, each one is zeroed whole
  (2 MiB) when first touched, though a window's arrays of a few MiB are freed again
  before most of it is used. Measured on 100 M events of 4,096 ranks on one core: the
  system time went from 10.9 s to 5.8 s (``clear_page``).

A user's own setting of either variable wins; neither reaches the processes started
afterwards (a traced job).

Once the windows are done, what glibc holds free is handed back
(:func:`hand_back_freed_memory`), so the phases after them (the run's summary, the
report's sampled iterations) do not peak on top of the windows' leftovers.

These are process settings: the command line applies them; a library user may.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib
import os
import sys
from typing import Any

#: polars' jemalloc (built with the ``_rjem_`` prefix) reads its options from here.
POLARS_MALLOC_CONF = "_RJEM_MALLOC_CONF"
KEEP_PAGES = "dirty_decay_ms:1000,muzzy_decay_ms:0"
#: Arrow's mimalloc reads how long freed pages wait before they go back from here (ms).
ARROW_PURGE_DELAY = "MIMALLOC_PURGE_DELAY"
ARROW_KEEP_MS = "10000"

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP_BYTES = 64 << 20


def keep_freed_pages() -> None:
    """Load polars and pyarrow with their allocators keeping freed pages (see the
    module): first thing in an analysis process, before either is imported."""
    keep_polars_pages()
    keep_arrow_pages()


def keep_polars_pages() -> bool:
    """Load polars with its allocator keeping freed pages (unless the user set its
    options); whether it does: False when polars was loaded before, too late."""
    return _load_with("polars", POLARS_MALLOC_CONF, KEEP_PAGES)


def keep_arrow_pages() -> bool:
    """Load pyarrow with its mimalloc keeping freed pages (unless the user set the
    delay); whether it does: False when pyarrow was loaded before, too late."""
    return _load_with("pyarrow", ARROW_PURGE_DELAY, ARROW_KEEP_MS)


def _load_with(module: str, variable: str, value: str) -> bool:
    """Import ``module`` with ``variable`` set to ``value``, which its allocator reads
    when it starts (as it is loaded). The variable is removed again afterwards, so the
    processes this one starts (a traced job) never see it."""
    if module in sys.modules:
        return False
    if variable in os.environ:
        return os.environ[variable] == value
    os.environ[variable] = value
    try:
        importlib.import_module(module)  # loaded now, while the variable is set
    finally:
        del os.environ[variable]
    _LOADED_KEEPING.add(module)
    return True


#: The modules :func:`_load_with` loaded with their allocator's option set.
_LOADED_KEEPING: set[str] = set()


def reuse_freed_memory() -> None:
    """Arrow on its mimalloc where pyarrow was loaded keeping freed pages, on glibc's
    malloc otherwise; glibc keeping what is freed; numpy without huge pages (see the
    module)."""
    import pyarrow as pa  # noqa: PLC0415 - only analysis processes need it

    _no_huge_pages()
    mallopt = _glibc("mallopt")
    kept = False
    if mallopt is not None:
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        kept = bool(
            mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES) and mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES)
        )
    if "pyarrow" in _LOADED_KEEPING or ARROW_PURGE_DELAY in os.environ:
        try:
            pa.set_memory_pool(pa.mimalloc_memory_pool())
            return
        except NotImplementedError:  # pragma: no cover - a build without mimalloc
            pass
    if kept:
        pa.set_memory_pool(pa.system_memory_pool())


def _no_huge_pages() -> None:
    """numpy's arrays without the request for huge pages (its private switch, in numpy
    2's module and in 1.x's; nothing where neither has it: the default then stays)."""
    import numpy as np  # noqa: PLC0415 - with pyarrow, only analysis processes need it

    for module in ("_core", "core"):
        switch = getattr(getattr(np, module, None), "multiarray", None)
        setter = getattr(switch, "_set_madvise_hugepage", None)
        if setter is not None:
            setter(False)
            return


def hand_back_freed_memory() -> None:
    """Return what glibc's malloc holds free to the kernel (``malloc_trim``), once a
    phase of the analysis is over: the windows' leftovers then no longer sit under the
    next phase's peak. Measured on 10 M events of 4,096 ranks: the peak RSS went from
    0.98-1.03 GB to 0.92-0.94 GB (the report's sampled iterations had stood on what the
    windows left). Nothing where the C library is not glibc."""
    trim = _glibc("malloc_trim")
    if trim is None:
        return
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, looked up once (``find_library`` runs a program to find it)."""
    name = ctypes.util.find_library("c")
    if name is None:  # pragma: no cover - not a C library ctypes can find
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:  # pragma: no cover
        return None


def _glibc(function: str) -> Any:
    """One of glibc's malloc functions; None where the C library has none (musl, macOS)."""
    libc = _libc()
    return getattr(libc, function, None) if libc is not None else None
