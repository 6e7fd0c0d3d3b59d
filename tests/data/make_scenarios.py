"""Regenerate the saved scenario traces: ``python tests/data/make_scenarios.py``.

Each directory next to this script is one seeded synthetic run from
``tests/planted.py`` with a planted cause (or none, ``healthy``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the fixture generator beside multirank.py

from planted import SCENARIOS, generate  # noqa: E402


def main() -> int:
    for name, scenario in SCENARIOS.items():
        out = HERE / name
        shutil.rmtree(out, ignore_errors=True)
        generate(scenario, out)
        size = sum(p.stat().st_size for p in out.iterdir())
        print(
            f"{name}: {scenario.world_size} ranks x {scenario.steps} steps, {size / 1024:.0f} KiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
