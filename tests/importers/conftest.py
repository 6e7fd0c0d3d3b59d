"""Session fixture: the real profiled run the importer tests compare against."""

from __future__ import annotations

import pytest
from profiled import ProfiledRun, profiled_run


@pytest.fixture(scope="session")
def profiled(tmp_path_factory) -> ProfiledRun:
    return profiled_run(tmp_path_factory.mktemp("profiled"))
