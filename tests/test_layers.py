"""The layers point down: each package imports only the packages below it.

Checked on the source (every import, at module level or inside a function), and on a
fresh interpreter for the promise users rely on: the trace format, the analysis and
the whole diagnosis never load torch, the in-job runtime or the command line.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "syncpace"

#: Shared at the bottom: every package may use these.
FOUNDATION = {"allocators", "errors", "_version", "config", "console", "ports", "syncpace"}

#: package -> the project packages it may import (besides itself and FOUNDATION).
ALLOWED: dict[str, set[str]] = {
    "trace": set(),
    "control": set(),
    "fabric": {"trace"},  # the run directory's file names (link counters)
    "monitor": set(),
    "analysis": {"trace"},
    "importers": {"trace"},
    "telemetry": {"trace"},  # the host files' writer
    "capture": {"trace", "control", "monitor", "telemetry"},
    "bench": {"trace", "capture", "fabric", "telemetry"},  # where a rank runs (host)
    "sim": {"trace", "control", "analysis", "bench"},
    "report": {"trace", "analysis", "bench"},
    # the whole diagnosis: analysis plus what its layer cannot read (a benchmark's link
    # rate, the pacer replayed, Flight Recorder dumps)
    "diagnose": {"trace", "control", "analysis", "bench", "importers"},
    "validate": {"trace", "control", "fabric", "analysis", "capture", "bench", "sim", "report"},
    "demo": {
        "trace",
        "control",
        "fabric",
        "analysis",
        "capture",
        "bench",
        "sim",
        "report",
        "diagnose",
    },
    "cli": {
        "trace",
        "control",
        "fabric",
        "analysis",
        "importers",
        "capture",
        "bench",
        "sim",
        "report",
        "diagnose",
        "validate",
        "demo",
        "monitor",
        "telemetry",
    },
}


def _package(module_path: Path) -> str:
    parts = module_path.relative_to(SRC).with_suffix("").parts
    return parts[0] if len(parts) > 1 else parts[0]


def _imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "syncpace":
                found.add(parts[1] if len(parts) > 1 else "syncpace")
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if len(p.relative_to(SRC).parts) > 1)


def test_every_package_has_a_layer() -> None:
    packages = {p.relative_to(SRC).parts[0] for p in _modules()}
    assert packages <= set(ALLOWED), f"no layer declared for {sorted(packages - set(ALLOWED))}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path: Path) -> None:
    own = _package(path)
    wrong = _imported_packages(path) - ALLOWED[own] - FOUNDATION - {own}
    assert not wrong, f"{path.relative_to(SRC)} ({own}) imports {sorted(wrong)}"


def _loaded(module: str) -> str:
    """What importing ``module`` in a fresh interpreter loads of torch, the in-job
    runtime and the command line."""
    code = (
        f"import sys, {module}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'torch' or "
        "m.startswith(('syncpace.cli', 'syncpace.capture')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize(
    "module",
    [
        "syncpace.trace",
        # the read path itself (``syncpace.trace`` loads its names on first use)
        "syncpace.trace.reader",
        "syncpace.trace.read.sweep",
        "syncpace.analysis",
        "syncpace.diagnose",
        "syncpace.report.html",
    ],
)
def test_analysis_side_loads_no_torch_and_no_cli(module: str) -> None:
    loaded = _loaded(module)
    assert loaded == "", f"{module} loads {loaded}"


def test_the_host_sampler_loads_no_torch_and_no_tracer() -> None:
    """Its child process starts from this module, at nice 10, as the job starts: torch
    or the tracer would add seconds of CPU to that start."""
    loaded = _loaded("syncpace.telemetry.sampler")
    assert loaded == "", f"the host sampler loads {loaded}"
