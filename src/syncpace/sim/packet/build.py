"""The packet tier's ns-3 program, compiled on first use and cached by its source.

ns-3 comes from the ``ns3`` wheel (the ``[packet]`` extra), which ships ns-3's headers
and shared libraries; its Python bindings take minutes of CPU to import and are never
loaded: :func:`find_spec` locates the package without executing it. The driver
(``driver.cc`` beside this module) is compiled with ``g++`` against the wheel's
``include/`` and ``lib64/`` (with an rpath, so it runs without ``LD_LIBRARY_PATH``) into
the user's cache directory, under a hash of its source, the compiler and the ns-3 tree:
editing any of them compiles again, nothing else does.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib.util import find_spec
from pathlib import Path

from syncpace.errors import ConfigError

NS3_VERSION = "3.44"
INSTALL_HINT = "pip install 'syncpace[packet]' (or: pip install --no-deps 'ns3==3.44.post0')"
SOURCE = Path(__file__).with_name("driver.cc")
LIBS = ("core", "network", "internet", "point-to-point", "applications", "traffic-control")
COMPILE_TIMEOUT_S = 600


def ns3_root() -> Path:
    """The ``ns3`` package's directory (holding ``include/`` and ``lib64/``); a
    ConfigError saying what to install when it is missing or incomplete."""
    spec = find_spec("ns3")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for loc in locations:
        root = Path(loc)
        if (root / "include" / "ns3" / "core-module.h").is_file() and (
            root / "lib64" / f"libns{NS3_VERSION}-core.so"
        ).is_file():
            return root
    if locations:
        raise ConfigError(
            f"--tier packet: the ns3 package at {locations[0]} lacks ns-3 {NS3_VERSION}'s "
            f"headers or libraries; {INSTALL_HINT}"
        )
    raise ConfigError(f"--tier packet needs ns-3 {NS3_VERSION}: {INSTALL_HINT}")


def compiler() -> str:
    cxx = shutil.which("g++")
    if cxx is None:
        raise ConfigError(
            "--tier packet compiles its ns-3 program with g++, which is not on PATH: "
            "install it (Debian/Ubuntu: apt-get install g++)"
        )
    return cxx


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "syncpace" / "packet"


def command(cxx: str, root: Path, out: Path) -> list[str]:
    lib = root / "lib64"
    return [
        cxx,
        "-O1",
        "-std=c++20",
        "-w",
        f"-I{root / 'include'}",
        str(SOURCE),
        "-o",
        str(out),
        f"-L{lib}",
        f"-Wl,-rpath,{lib}",
        *(f"-lns{NS3_VERSION}-{name}" for name in LIBS),
    ]


def driver() -> Path:
    """The compiled driver, compiling it when this source, compiler and ns-3 tree have
    none yet. Concurrent callers each compile to a file of their own and rename it into
    place, so nobody runs a half-written program."""
    root, cxx = ns3_root(), compiler()
    key = hashlib.sha256()
    key.update(SOURCE.read_bytes())
    key.update(f"{Path(cxx).resolve()}\0{root.resolve()}".encode())
    target = cache_dir() / key.hexdigest()[:16] / "syncpace-packet"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".build-")
    os.close(fd)
    try:
        done = subprocess.run(
            command(cxx, root, Path(tmp)),
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise ConfigError(f"--tier packet: compiling {SOURCE.name} failed: {last[:300]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
