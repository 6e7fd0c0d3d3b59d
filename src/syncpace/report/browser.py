"""Headless Chromium helpers: load a report, read back its DOM, or take a screenshot."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--hide-scrollbars",
    "--virtual-time-budget=10000",  # let the page's scripts run before reading it
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(binary: str, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *FLAGS, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


#: The first screen a report must answer on (a laptop browser window).
FIRST_SCREEN = (1400, 900)


def dump_dom(
    binary: str, page: Path, timeout: float = 120, size: tuple[int, int] = FIRST_SCREEN
) -> str:
    """The DOM of ``page`` after its scripts ran, laid out in a ``size`` window."""
    window = f"--window-size={size[0]},{size[1]}"
    result = _run(binary, [window, "--dump-dom", page.resolve().as_uri()], timeout)
    if result.returncode != 0:
        raise RuntimeError(f"chromium exited {result.returncode}: {result.stderr[-2000:]}")
    return result.stdout


def screenshot(
    binary: str, page: Path, png: Path, size: str = f"{FIRST_SCREEN[0]},{FIRST_SCREEN[1]}"
) -> Path:
    """The top ``size`` (width,height px) of ``page``, after its scripts ran."""
    result = _run(
        binary,
        [f"--screenshot={png.resolve()}", f"--window-size={size}", page.resolve().as_uri()],
        timeout=120,
    )
    if result.returncode != 0 or not png.exists():
        raise RuntimeError(f"chromium screenshot failed: {result.stderr[-2000:]}")
    return png
