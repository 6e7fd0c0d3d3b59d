"""``syncpace bench`` as the multi-rank bench tests start it."""

from __future__ import annotations

import os
import subprocess
import sys

TIMEOUT = 120


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``syncpace bench`` self-launching its ranks (outside any launcher's environment)."""
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "syncpace", "bench", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=base,
    )
