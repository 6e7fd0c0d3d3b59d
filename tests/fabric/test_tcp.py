"""The hosts' congestion control without root: which names a spec accepts (from a
kernel's lists), the sysctl in the plan, and what ``up`` records from the hosts."""

from __future__ import annotations

import json

import pytest

from syncpace.cli.main import main
from syncpace.fabric import FabricError, build_fabric, build_spec, tcp
from syncpace.fabric.backend import RecordingBackend
from syncpace.fabric.lifecycle import up
from syncpace.fabric.plan import up_plan
from syncpace.fabric.runner import FABRIC_FILE
from syncpace.fabric.state import load_state

SET = "sysctl -qw net.ipv4.tcp_congestion_control="


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """A kernel offering reno, bbr and cubic, with cubic restricted (as a kernel whose
    default is bbr has it at boot)."""
    (tmp_path / tcp.AVAILABLE).write_text("reno bbr cubic\n")
    (tmp_path / tcp.ALLOWED).write_text("reno bbr\n")
    monkeypatch.setattr(tcp, "PROC", tmp_path)
    return tmp_path


def star(**kw):
    return build_spec({"topology": "star", "hosts": 3, "name": "cc1", **kw})


def test_a_host_may_run_what_is_available_and_allowed(kernel):
    assert tcp.choices() == ("reno", "bbr")
    assert star(congestion_control="reno").congestion_control == "reno"


@pytest.mark.parametrize(
    "name, message",
    [
        ("cubic", "'cubic' is available but not allowed in a network namespace"),
        ("vegas", "'vegas' is not available here"),
        ("BBR;x", "not a congestion control name"),
    ],
)
def test_names_a_host_cannot_run_are_refused_in_one_line(kernel, name, message):
    with pytest.raises(FabricError, match=message) as err:
        star(congestion_control=name)
    text = str(err.value)
    assert "\n" not in text
    if name != "BBR;x":
        assert text.endswith("a host can run: reno bbr")


def test_an_unreadable_kernel_list_is_one_line_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(tcp, "PROC", tmp_path)
    with pytest.raises(FabricError, match=f"{tmp_path / tcp.ALLOWED}: cannot read"):
        star(congestion_control="bbr")


def test_the_plan_pins_every_host_before_anything_else_runs_in_it(kernel):
    plan = [str(c) for c in up_plan(build_fabric(star(congestion_control="reno")))]
    for host in ("cc1-h0", "cc1-h1", "cc1-h2"):
        pin = plan.index(f"ip netns exec {host} {SET}reno")
        assert plan.index(f"ip netns add {host}") < pin
        later = [i for i, line in enumerate(plan) if f"-n {host} " in line and "lo" not in line]
        assert later and min(later) > pin
    assert not any(SET in str(c) for c in up_plan(build_fabric(star())))


def test_up_records_what_the_hosts_run_asked_or_the_kernels(kernel, tmp_path):
    backend = RecordingBackend(congestion_control="bbr")
    state = up(star(), backend, tmp_path)  # nothing asked: the kernel's default
    assert state.fabric.congestion_control == "bbr"
    assert load_state("cc1", tmp_path).fabric.congestion_control == "bbr"
    assert load_state("cc1", tmp_path).spec["congestion_control"] == ""
    reads = [
        c for c in backend.strings() if c.endswith("sysctl -n net.ipv4.tcp_congestion_control")
    ]
    assert len(reads) == 3

    backend = RecordingBackend(congestion_control="bbr")
    state = up(star(congestion_control="reno", name="cc2"), backend, tmp_path)
    assert state.fabric.congestion_control == "reno"
    saved = json.loads((tmp_path / "cc2.json").read_text())
    assert saved["fabric"]["congestion_control"] == "reno"
    assert saved["spec"]["congestion_control"] == "reno"


def test_hosts_that_disagree_fail_up_and_leave_nothing(kernel, tmp_path):
    backend = RecordingBackend(congestion_control="bbr")
    real = backend.run

    def one_host_lost_it(argv, *, check=True):
        result = real(argv, check=check)
        if argv[3:4] == ("cc1-h1",) and argv[-1] == tcp.SYSCTL:
            return type(result)(0, "reno\n", "")
        return result

    backend.run = one_host_lost_it  # type: ignore[method-assign]
    with pytest.raises(FabricError, match="the hosts do not agree: cc1-h0 bbr, cc1-h1 reno"):
        up(star(), backend, tmp_path)
    assert backend.namespaces == []
    assert not (tmp_path / "cc1.json").exists()


def test_a_host_running_other_than_asked_fails_up(kernel, tmp_path):
    backend = RecordingBackend(congestion_control="bbr")
    real = backend.run

    def ignores_writes(argv, *, check=True):
        if "-qw" in argv:
            return type(real(("true",)))(0, "", "")
        return real(argv, check=check)

    backend.run = ignores_writes  # type: ignore[method-assign]
    with pytest.raises(FabricError, match="asked reno, the hosts run bbr"):
        up(star(congestion_control="reno"), backend, tmp_path)
    assert backend.namespaces == []


def test_the_run_directory_records_the_hosts_tcp(kernel, tmp_path, monkeypatch):
    from syncpace.fabric import runner

    backend = RecordingBackend(congestion_control="bbr")
    state = up(star(), backend, tmp_path / "state")
    monkeypatch.setattr(runner, "Job", _NoJob)
    monkeypatch.setattr(runner, "Sampler", _NoSampler)
    run_dir = tmp_path / "run"
    try:
        runner.run_job(state, ["true"], run_dir, backend, runner.RunOptions(timeout_s=1), {}, None)
    except Exception:  # the stand-ins run nothing; the files come first
        pass
    assert json.loads((run_dir / FABRIC_FILE).read_text())["congestion_control"] == "bbr"


def test_the_cli_refuses_a_bad_name_in_one_line(kernel, capsys):
    code = main(
        ["fabric", "up", "--dry-run", "--topology", "star", "--congestion-control", "cubic"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "not allowed in a network namespace" in err


class _NoJob:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("not started")


class _NoSampler:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("not started")
