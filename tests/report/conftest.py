from __future__ import annotations

import os

import pytest

from syncpace.report.browser import find_chromium


@pytest.fixture
def chromium() -> str:
    """Headless Chromium; skipped when absent, except under CI (which installs it)."""
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium); CI runs this test")
    return binary
