"""Record the demo fixture: ``sudo python tests/data/make_demo.py``.

Runs ``syncpace demo`` on the emulated fabric (root: a 2-leaf spine at 100 Mbit/s, a
planted straggler on host h2 (rank 2, +80 ms every step) and greedy flows across the
spine from step 3) and keeps its two runs — ``trace`` (traced) and ``trace-paced``
(pacing under its A/B guard) — with their link counters, as ``tests/data/demo/``. The
report tests check the verdict and the page of exactly what a user of the demo sees.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "demo"
KEEP = ("rank-", "fabric-links.arrow", "fabric-run.json", "fabric.json")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "syncpace", "demo", "--out", tmp, "--sim-nodes", "8"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        print(proc.stdout[-3000:])
        if proc.returncode != 0 or "fabric contention found" not in proc.stdout:
            print(proc.stderr[-3000:], file=sys.stderr)
            print("the demo did not run on the fabric (needs root, ip and tc)", file=sys.stderr)
            return 1
        shutil.rmtree(OUT, ignore_errors=True)
        for run in ("trace", "trace-paced"):
            (OUT / run).mkdir(parents=True)
            for path in sorted((Path(tmp) / run).iterdir()):
                if path.is_file() and path.name.startswith(KEEP):
                    shutil.copy2(path, OUT / run / path.name)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
