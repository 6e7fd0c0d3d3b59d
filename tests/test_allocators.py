"""The analysis process's allocators: polars' jemalloc and Arrow's mimalloc read the
options syncpace gives them (each says so itself), the variables do not reach the
processes started after, and Arrow's pool is mimalloc when it read them, the system
allocator otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("_RJEM_MALLOC_CONF", "MIMALLOC_PURGE_DELAY", "MIMALLOC_VERBOSE")
    }
    clean.update(PYTHONPATH=SRC, **env)
    return subprocess.run(
        [sys.executable, "-c", code], env=clean, capture_output=True, text=True, timeout=120
    )


def test_polars_allocator_reads_the_options_and_children_do_not_see_them() -> None:
    # "stats_print" makes jemalloc print its statistics at exit: proof it read them
    code = (
        "import os, subprocess, sys\n"
        "from syncpace import allocators\n"
        "allocators.KEEP_PAGES = 'stats_print:true'\n"
        "assert allocators.keep_polars_pages()\n"
        "assert 'polars' in sys.modules\n"
        "assert allocators.POLARS_MALLOC_CONF not in os.environ\n"
        "child = subprocess.run([sys.executable, '-c', 'import os; "
        'print(os.environ.get("_RJEM_MALLOC_CONF"))\'], capture_output=True, text=True)\n'
        "print('child:', child.stdout.strip())\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert "child: None" in done.stdout
    assert "Begin jemalloc statistics" in done.stderr


def test_too_late_once_polars_is_loaded_and_a_users_setting_wins() -> None:
    late = _python(
        "import polars\nfrom syncpace import allocators\nprint(allocators.keep_polars_pages())"
    )
    assert late.stdout.strip() == "False", late.stderr
    own = _python(
        "import os\nfrom syncpace import allocators\n"
        "print(allocators.keep_polars_pages(), os.environ['_RJEM_MALLOC_CONF'])",
        _RJEM_MALLOC_CONF="narenas:2",
    )
    assert own.stdout.split() == ["False", "narenas:2"], own.stderr


def test_arrow_allocator_reads_the_delay_and_children_do_not_see_it() -> None:
    # MIMALLOC_VERBOSE makes mimalloc print its options when it starts: proof it read them
    code = (
        "import os, subprocess, sys\n"
        "from syncpace import allocators\n"
        "allocators.keep_freed_pages()\n"
        "assert 'pyarrow' in sys.modules and 'polars' in sys.modules\n"
        "assert allocators.ARROW_PURGE_DELAY not in os.environ\n"
        "allocators.reuse_freed_memory()\n"
        "import pyarrow as pa\n"
        "print('pool:', pa.default_memory_pool().backend_name)\n"
        "child = subprocess.run([sys.executable, '-c', 'import os; "
        'print(os.environ.get("MIMALLOC_PURGE_DELAY"))\'], capture_output=True, text=True)\n'
        "print('child:', child.stdout.strip())\n"
    )
    done = _python(code, MIMALLOC_VERBOSE="1")
    assert done.returncode == 0, done.stderr
    assert "pool: mimalloc" in done.stdout
    assert "child: None" in done.stdout
    assert "option 'purge_delay': 10000" in done.stderr


def test_arrow_too_late_once_loaded_uses_the_system_allocator() -> None:
    late = _python(
        "import pyarrow as pa\nfrom syncpace import allocators\n"
        "print(allocators.keep_arrow_pages())\nallocators.reuse_freed_memory()\n"
        "print(pa.default_memory_pool().backend_name)"
    )
    assert late.stdout.split() == ["False", "system"], late.stderr


def test_arrow_uses_the_system_allocator() -> None:
    done = _python(
        "import pyarrow as pa\nfrom syncpace import allocators\n"
        "allocators.reuse_freed_memory()\nprint(pa.default_memory_pool().backend_name)"
    )
    assert done.stdout.strip() == "system", done.stderr


def test_numpy_asks_for_no_huge_pages() -> None:
    """numpy's switch returns its previous state: off once the analysis settings apply."""
    done = _python(
        "import numpy as np\nfrom syncpace import allocators\n"
        "before = np._core.multiarray._set_madvise_hugepage(True)\n"
        "allocators.reuse_freed_memory()\n"
        "print(before, np._core.multiarray._set_madvise_hugepage(True))"
    )
    assert done.stdout.split() == ["True", "False"], done.stderr


def test_freed_memory_is_handed_back_between_phases() -> None:
    """Half of 256 blocks of 1 MiB freed, every other one (the heap's top stays in use,
    so glibc keeps the holes): the process's resident memory stays until the memory is
    handed back, then falls by most of the 128 MiB freed (the kernel's own count)."""
    done = _python(
        "import ctypes\nfrom syncpace import allocators\n"
        "allocators.reuse_freed_memory()\n"
        "def rss():\n"
        "    return int(open('/proc/self/statm').read().split()[1]) * 4096\n"
        "malloc = ctypes.CDLL(None).malloc\nmalloc.restype = ctypes.c_void_p\n"
        "malloc.argtypes = [ctypes.c_size_t]\nfree = ctypes.CDLL(None).free\n"
        "free.argtypes = [ctypes.c_void_p]\nmemset = ctypes.memset\n"
        "blocks = [malloc(1 << 20) for _ in range(256)]\n"
        "for b in blocks: memset(b, 1, 1 << 20)\n"
        "for b in blocks[::2]: free(b)\n"
        "held = rss()\nallocators.hand_back_freed_memory()\nprint(held - rss())"
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) >= 96 << 20
