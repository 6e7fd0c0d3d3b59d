"""Regenerate docs/report-screenshot.png: the HTML report of two saved scenarios.

python scripts/screenshot_report.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from syncpace.analysis import analyze
from syncpace.report.browser import find_chromium, screenshot
from syncpace.report.html import write_html

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    binary = find_chromium()
    if binary is None:
        print("chromium is not installed (apt-get install -y chromium)", file=sys.stderr)
        return 1
    runs = [ROOT / "tests" / "data" / name for name in ("straggler", "healthy")]
    with tempfile.TemporaryDirectory() as tmp:
        page = write_html(analyze(runs), Path(tmp) / "report.html")
        out = screenshot(binary, page, ROOT / "docs" / "report-screenshot.png")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
