"""Python 3.10 has no ``tomllib``: every module imports, and every TOML file the tool
reads (scenario, ``--set`` value, fabric spec) is read, with ``tomli`` in its place
(the dependency pyproject.toml declares for Python < 3.11); without either, reading
TOML is one clear error, and nothing else breaks.

Run in a fresh interpreter that hides ``tomllib`` the way 3.10 lacks it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# each test imports every module in a fresh interpreter (about 3 s)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

HIDE = """
import importlib, importlib.abc, sys
real = importlib.import_module("tomllib")
del sys.modules["tomllib"]

class NoTomllib(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tomllib":
            raise ModuleNotFoundError("No module named 'tomllib'", name=name)
        return None

sys.meta_path.insert(0, NoTomllib())
if WITH_TOMLI:
    sys.modules["tomli"] = real  # the same parser, as the tomli package ships it
else:
    sys.modules["tomli"] = None  # not installed either
"""

EVERYTHING = """
import pkgutil, syncpace
for info in pkgutil.walk_packages(syncpace.__path__, "syncpace."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
assert "tomllib" not in sys.modules
from syncpace.errors import SyncpaceError
from syncpace.fabric.spec import load_spec_file
from syncpace.sim import scenario
try:
    scen = scenario.load(SCENARIO)
    cfg = scenario.override(scen.config, ["noise.jitter=0.2"])
    fabric, faults = load_spec_file(SPEC)
    print("read", scen.study_nodes, cfg.noise.jitter, fabric["hosts"], len(faults))
except SyncpaceError as exc:
    print("refused", exc)
"""


def run(with_tomli: bool, tmp_path: Path) -> str:
    spec = tmp_path / "fabric.toml"
    spec.write_text('[fabric]\ntopology = "star"\nhosts = 3\n\n[[fault]]\nkind = "down"\n')
    scenario = ROOT / "examples" / "scenarios" / "reference_study.toml"
    code = (
        f"WITH_TOMLI = {with_tomli}\nSCENARIO = {str(scenario)!r}\nSPEC = {str(spec)!r}\n"
        + HIDE
        + EVERYTHING
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_every_module_and_every_toml_reader_works_with_tomli(tmp_path):
    assert run(True, tmp_path) == "read (4, 8, 16, 32, 64) 0.2 3 1"


def test_without_any_toml_parser_reading_toml_is_one_clear_error(tmp_path):
    out = run(False, tmp_path)
    assert out.startswith("refused ") and out.endswith(
        "reading TOML on Python 3.10 needs tomli (pip install tomli)"
    ), out
