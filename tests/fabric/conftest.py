import pytest

from syncpace.fabric.state import STATE_DIR_ENV


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """A fabric state directory of the test's own (a module may share one instead)."""
    path = tmp_path / "fabric-state"
    path.mkdir()
    monkeypatch.setenv(STATE_DIR_ENV, str(path))
    return path
