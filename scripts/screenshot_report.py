"""Regenerate the README's and docs/report.md's screenshots from the current demo:
docs/report-screenshot.png, the first screen (1400x900) of the report ``syncpace demo``
writes — as root, on the emulated fabric with the planted straggler on h2 and the
contended uplink — and docs/scaling-screenshot.png, the first screen of the scaling
page it writes beside the report.

python scripts/screenshot_report.py           # runs the demo (about two minutes), then shoots
python scripts/screenshot_report.py DEMO_DIR  # shoots the pages of an existing demo output
python scripts/screenshot_report.py --rewrite DEMO_DIR  # writes its pages again from its
                                              # traces with the current code, then shoots
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from syncpace.demo.pipeline import rewrite_pages
from syncpace.report.browser import FIRST_SCREEN, find_chromium, screenshot

ROOT = Path(__file__).resolve().parents[1]
SHOTS = {"report.html": "report-screenshot.png", "scaling.html": "scaling-screenshot.png"}


def shoot(binary: str, demo: Path) -> list[Path]:
    """Each page of the demo's output directory ``demo`` to its screenshot in docs/."""
    out = []
    for page, png in SHOTS.items():
        if (demo / page).is_file():
            out.append(screenshot(binary, demo / page, ROOT / "docs" / png))
    return out


def main(argv: list[str]) -> int:
    binary = find_chromium()
    if binary is None:
        print("chromium is not installed (apt-get install -y chromium)", file=sys.stderr)
        return 1
    if argv[:1] == ["--rewrite"] and len(argv) == 2:
        rewrite_pages(Path(argv[1]))
        shots = shoot(binary, Path(argv[1]))
    elif argv:
        shots = shoot(binary, Path(argv[0]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            demo = [sys.executable, "-m", "syncpace", "demo", "--out", tmp]
            subprocess.run(demo, check=True, timeout=900)
            shots = shoot(binary, Path(tmp))
    for png in shots:
        print(f"wrote {png.relative_to(ROOT)} (the first {FIRST_SCREEN[0]}x{FIRST_SCREEN[1]} px)")
    return 0 if shots else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
