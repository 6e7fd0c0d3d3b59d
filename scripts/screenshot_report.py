"""Regenerate docs/report-screenshot.png: the first screen (1400x900) of the report
that ``syncpace demo`` writes — as root, on the emulated fabric with the planted
straggler on h2 and the contended uplink.

python scripts/screenshot_report.py              # runs the demo (about a minute), then shoots
python scripts/screenshot_report.py REPORT.html  # shoots an existing report
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from syncpace.report.browser import FIRST_SCREEN, find_chromium, screenshot

ROOT = Path(__file__).resolve().parents[1]
PNG = ROOT / "docs" / "report-screenshot.png"


def main(argv: list[str]) -> int:
    binary = find_chromium()
    if binary is None:
        print("chromium is not installed (apt-get install -y chromium)", file=sys.stderr)
        return 1
    if argv:
        out = screenshot(binary, Path(argv[0]), PNG)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            demo = [sys.executable, "-m", "syncpace", "demo", "--out", tmp]
            subprocess.run(demo, check=True, timeout=600)
            out = screenshot(binary, Path(tmp) / "report.html", PNG)
    print(f"wrote {out.relative_to(ROOT)} (the first {FIRST_SCREEN[0]}x{FIRST_SCREEN[1]} px)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
