"""Fault grammar, launcher environment and command lines, CLI errors (no root)."""

from __future__ import annotations

import os

import pytest

from syncpace.cli.main import main
from syncpace.fabric import FabricError, build_fabric, build_spec
from syncpace.fabric.faults import Fault, check_against, fault_from_table, parse_fault
from syncpace.fabric.launch import JobResult, host_env, launcher_argv, substitute

FABRIC = build_fabric(build_spec(leaves=2, hosts=2, name="t2"))


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ("rate leaf0-spine 20mbit at=5 for=10", Fault("rate", "leaf0-spine", "20mbit", 5.0, 10.0)),
        ("flap h1-leaf0 at=4", Fault("flap", "h1-leaf0", "", 4.0, 2.0)),
        ("flow h0->h2", Fault("flow", "h0->h2", "", 0.0, None)),
        ("flow h1->h0 20mbit for=9", Fault("flow", "h1->h0", "20mbit", 0.0, 9.0)),
        ("straggler h3 0.3 at=2", Fault("straggler", "h3", "0.3", 2.0, None)),
        ("kill rank=2 at=8", Fault("kill", "rank=2", "", 8.0, None)),
        ("kill h2", Fault("kill", "h2", "", 0.0, None)),
    ],
)
def test_fault_grammar(text, fault):
    assert parse_fault(text) == fault
    assert parse_fault(str(fault)) == fault
    check_against([fault], FABRIC)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("explode h0", "unknown action 'explode'"),
        ("flap", "expected 'ACTION TARGET"),
        ("rate h0-leaf0 fast", "cannot parse 'fast'"),
        ("straggler h1", "needs a CPU fraction"),
        ("straggler h1 5%", "needs a CPU fraction"),
        ("flap h0-leaf0 at=soon", "at must be seconds"),
        ("flap h0-leaf0 at=-1", "at must be >= 0"),
        ("flow h0", "SRC->DST"),
        ("flow h0->h2 lots", "cannot parse 'lots'"),
        ("kill h0 now", "takes no value"),
        ("flap h0-leaf0 when=3", "unexpected 'when=3'"),
    ],
)
def test_bad_faults_say_what_is_wrong(text, message):
    with pytest.raises(FabricError, match=message):
        parse_fault(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("flap h9-leaf0", "no link 'h9-leaf0'"),
        ("flow h0->h7", "no host 'h7'"),
        ("straggler h5 0.5", "no host 'h5'"),
        ("kill rank=x", "kill a host"),
    ],
)
def test_faults_must_name_parts_of_the_fabric(text, message):
    with pytest.raises(FabricError, match=message):
        check_against([parse_fault(text)], FABRIC)


def test_fault_tables_from_spec_files():
    table = {"action": "rate", "target": "leaf1-spine", "value": "5mbit", "at": 1, "for": 2}
    assert fault_from_table(table) == Fault("rate", "leaf1-spine", "5mbit", 1.0, 2.0)
    with pytest.raises(FabricError, match="unknown keys"):
        fault_from_table({"action": "flap", "target": "h0-leaf0", "link": "x"})


def test_torchrun_gets_its_multi_node_settings_from_pet_variables():
    host = FABRIC.host("h2")
    env = host_env(FABRIC, host, ["torchrun", "--nproc-per-node", "2", "train.py"], 29500, {})
    assert env["PET_NNODES"] == "4" and env["PET_NODE_RANK"] == "2"
    assert env["PET_MASTER_ADDR"] == env["MASTER_ADDR"] == "10.200.0.1"
    assert env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert "RANK" not in env  # torchrun assigns ranks to its workers


def test_a_plain_command_is_one_rank_per_host():
    env = host_env(FABRIC, FABRIC.host("h3"), ["python", "job.py"], 1234, {"KEEP": "1"})
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["MASTER_PORT"]) == (
        "3",
        "4",
        "0",
        "1234",
    )
    assert env["KEEP"] == "1"


def test_launcher_enters_the_host_namespace_and_names_the_host():
    host = FABRIC.host("h1")
    argv = launcher_argv(host, ["python", "job.py"], "/sys/fs/cgroup/x/cgroup.procs")
    assert argv[:2] == ["sh", "-c"]
    # the cgroup is joined before entering the namespace, where /sys/fs/cgroup is hidden
    assert argv[3:5] == ["syncpace-fabric", "/sys/fs/cgroup/x/cgroup.procs"]
    assert argv[5:12] == ["ip", "netns", "exec", "t2-h1", "unshare", "--uts", "--"]
    assert argv[-4:] == ["syncpace-fabric", "h1", "python", "job.py"]
    assert launcher_argv(host, ["true"])[:4] == ["ip", "netns", "exec", "t2-h1"]
    command = ["run", "--rank={node_rank}/{nnodes}", "{master_addr}:{master_port}", "{host}"]
    assert substitute(command, FABRIC, host, 29500) == [
        "run",
        "--rank=1/4",
        "10.200.0.1:29500",
        "h1",
    ]


def test_job_result_exit_code():
    assert JobResult({"h0": 0, "h1": 0}, 1.0, False, "completed").returncode == 0
    assert JobResult({"h0": 0, "h1": 3}, 1.0, False, "failed on h1").returncode == 3
    assert JobResult({"h0": None, "h1": 0}, 1.0, False, "interrupted").returncode == 1
    assert JobResult({"h0": None}, 1.0, True, "timeout").returncode == 124


def test_cli_errors_are_one_line(capsys):
    assert main(["fabric", "up", "--topology", "ring"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "syncpace fabric: error: unknown topology 'ring'; choose one of star, leaf-spine"
    )
    assert main(["fabric", "up", "--hosts", "many"]) == 2
    assert "--hosts: expected int, got 'many'" in capsys.readouterr().err
    assert main(["fabric", "run", "--fault", "explode h0", "--", "true"]) == 2
    assert "unknown action 'explode'" in capsys.readouterr().err


def test_dry_run_prints_the_plan_without_root(capsys):
    assert main(["fabric", "up", "--dry-run", "--name", "t3", "--topology", "star"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ip netns add t3-sw" and len(out) > 10


@pytest.mark.parametrize(
    ("value", "routes"), [("0", 0), ("false", 0), ("no", 0), ("1", 2), ("true", 2), ("yes", 2)]
)
def test_the_quickack_flag_reads_its_value(capsys, value, routes):
    """``--quickack 0`` leaves Linux's delayed ACKs on: each host's route is rewritten
    with ``quickack 1`` only when the flag says so (a string "0" once read as true)."""
    argv = ["fabric", "up", "--dry-run", "--name", "t5", "--topology", "star", "--hosts", "2"]
    assert main([*argv, "--quickack", value]) == 0
    plan = capsys.readouterr().out.splitlines()
    assert sum(line.endswith("quickack 1") for line in plan) == routes


def test_a_quickack_flag_that_is_not_a_boolean_is_one_line(capsys):
    assert main(["fabric", "up", "--dry-run", "--quickack", "maybe"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--quickack: expected a boolean" in err


def test_without_root_the_cli_says_so(capsys, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["fabric", "up", "--name", "t4"]) == 2
    assert "needs root" in capsys.readouterr().err
