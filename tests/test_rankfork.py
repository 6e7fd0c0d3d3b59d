"""A rank forked from the fork server (tests/rankfork.py) starts as ``python SCRIPT
ARGS`` would: the same argv, ``__main__``, ``sys.path``, environment, working
directory, stdin, ``sitecustomize``, output, exit status and exit handlers. Each case
is started both ways and the two compared: the new interpreter is the truth."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rankfork
from multirank import with_ranksite

PROBE = Path(__file__).resolve().parent / "rankprobe" / "probe.py"


@pytest.fixture(scope="module")
def server():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = with_ranksite(env.get("PYTHONPATH"))
    s = rankfork.ForkServer(env)
    yield s, env
    s.close()


def _both(server, how, extra_env=None, tmp_path=None):
    server, base = server
    env = dict(base, PROBE_HOW=how, **(extra_env or {}))
    args = [how, "second arg"]
    fresh = subprocess.run(
        [sys.executable, str(PROBE), *args],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    rank = server.start(str(PROBE), args, env)
    with rank.stdout, rank.stderr:
        out, err = rank.stdout.read(), rank.stderr.read()
    code = rank.wait(timeout=120)
    return (fresh.returncode, fresh.stdout, fresh.stderr), (code, out, err)


@pytest.mark.parametrize("how", ["normal", "thread", "exit", "raise", "abort"])
def test_a_forked_rank_starts_and_ends_as_a_new_interpreter_would(server, how):
    fresh, forked = _both(server, how)
    assert forked[0] == fresh[0]
    assert forked[1] == fresh[1]  # what it saw, its thread's and exit handler's output
    seen = json.loads(forked[1].splitlines()[0])
    assert seen["name"] == "__main__" and seen["argv"] == [str(PROBE), how, "second arg"]
    assert seen["env"] == {"PROBE_HOW": how} and seen["stdin"] == ""
    assert seen["sitecustomize"].endswith(os.path.join("ranksite", "sitecustomize.py"))
    if how == "raise":
        # the traceback starts at the script, as the interpreter prints it
        assert forked[2] == fresh[2]
        assert "ValueError: probe failed on purpose" in forked[2]
    if how == "abort":
        assert forked[0] == fresh[0] == -6


def test_a_forked_rank_has_its_own_pythonpath_and_working_directory(server, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "sitecustomize.py").write_text("print('the rank path site ran', flush=True)\n")
    env = {"PYTHONPATH": with_ranksite(f"{extra}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        fresh, forked = _both(server, "normal", env)
    finally:
        os.chdir(cwd)
    assert forked == fresh
    seen = json.loads(forked[1].splitlines()[1])
    assert seen["cwd"] == str(tmp_path) and str(extra) in seen["path"]
    # the first sitecustomize on the rank's own path ran, the server's did not
    assert forked[1].startswith("the rank path site ran\n")
    assert seen["sitecustomize"] == str(extra / "sitecustomize.py")


def test_settings_read_at_start_up_or_a_shadowed_module_start_a_new_interpreter(server, tmp_path):
    _, base = server
    assert rankfork._key(dict(base, RANK="3")) == rankfork._key(base)
    assert rankfork._key(dict(base, TORCH_DISTRIBUTED_DEBUG="DETAIL")) != rankfork._key(base)
    shadow = tmp_path / "shadow"
    (shadow / "torch").mkdir(parents=True)
    modules = server[0].modules
    assert "torch" in modules
    assert rankfork._shadows(str(shadow), modules)
    assert not rankfork._shadows(str(tmp_path / "missing"), modules)


def test_a_dead_server_leaves_its_ranks_to_new_interpreters(monkeypatch):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    monkeypatch.setattr(rankfork, "_SERVERS", {})
    server = rankfork.ForkServer(env)
    rankfork._SERVERS[rankfork._key(env)] = server
    server._proc.kill()
    server._proc.wait()
    server._reader.join(timeout=30)
    assert server.closed
    assert rankfork.start(str(PROBE), ["normal"], env) is None
    server.close()
