"""Record the real-run fixture: ``python tests/data/make_real.py``.

Runs ``examples/ddp_train.py`` (DDP, gloo on CPU, 4 ranks, 30 steps) under
``syncpace run`` with a planted straggler (rank 2 sleeps 8 ms more per step) and saves
the trace as ``tests/data/real_ddp_straggler/``. Timings depend on the machine; the
tests only assert what any machine shows (rank 2 is the straggler).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from syncpace.ports import free_port

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = HERE / "real_ddp_straggler"


def main() -> int:
    shutil.rmtree(OUT, ignore_errors=True)
    job = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "4",
        "--master-port",
        str(free_port()),
        str(ROOT / "examples" / "ddp_train.py"),
        "--steps",
        "30",
        "--compute-ms",
        "20",
        "--slow-rank",
        "2",
        "--slow-ms",
        "8",
        "--layers",
        "8",
        "--hidden",
        "256",
        "--bucket-cap-mb",
        "0.5",
    ]
    cmd = [sys.executable, "-m", "syncpace", "run", "--out", str(OUT), "--", *job]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return proc.returncode
    size = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {OUT.relative_to(ROOT)} ({size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
