"""Topology, plans and the up/down lifecycle against the recording backend (no root)."""

from __future__ import annotations

import json

import pytest

from syncpace.cli import fabric as cli_fabric
from syncpace.cli.main import main
from syncpace.fabric import FabricError, build_fabric, build_spec
from syncpace.fabric.backend import RecordingBackend
from syncpace.fabric.lifecycle import down, down_named, up
from syncpace.fabric.plan import burst_bytes, down_plan, link_state_plan, set_rate_plan, up_plan
from syncpace.fabric.state import list_fabrics, load_state, resolve_name


def leaf_spine(**kw):
    values = dict(leaves=2, hosts=2, host_rate="50mbit", oversubscription=2.0, name="t1")
    values.update(kw)
    return build_spec(values)


def test_leaf_spine_names_and_addresses_are_deterministic():
    fabric = build_fabric(leaf_spine())
    assert fabric == build_fabric(leaf_spine())
    assert [(h.name, h.leaf, h.namespace, h.address) for h in fabric.hosts] == [
        ("h0", "leaf0", "t1-h0", "10.200.0.1"),
        ("h1", "leaf0", "t1-h1", "10.200.0.2"),
        ("h2", "leaf1", "t1-h2", "10.200.0.3"),
        ("h3", "leaf1", "t1-h3", "10.200.0.4"),
    ]
    assert fabric.switches == ("leaf0", "leaf1", "spine")
    assert [(link.name, link.rate_bps) for link in fabric.links] == [
        ("h0-leaf0", 50_000_000),
        ("h1-leaf0", 50_000_000),
        ("h2-leaf1", 50_000_000),
        ("h3-leaf1", 50_000_000),
        ("leaf0-spine", 50_000_000),
        ("leaf1-spine", 50_000_000),
    ]
    assert fabric.namespaces == ("t1-sw", "t1-h0", "t1-h1", "t1-h2", "t1-h3")
    assert all(len(end.dev) <= 15 for link in fabric.links for end in (link.a, link.b))


def test_star_has_one_switch_and_no_uplinks():
    fabric = build_fabric(build_spec(topology="star", hosts=5, name="s"))
    assert fabric.switches == ("sw",)
    assert {h.leaf for h in fabric.hosts} == {"sw"}
    assert {link.kind for link in fabric.links} == {"host"}
    assert fabric.hosts[-1].address == "10.200.0.5"


def test_fabric_round_trips_through_json():
    fabric = build_fabric(leaf_spine())
    assert type(fabric).from_json(json.loads(json.dumps(fabric.to_json()))) == fabric


def test_up_plan_creates_namespaces_first_and_shapes_both_directions():
    fabric = build_fabric(leaf_spine())
    plan = up_plan(fabric)
    text = [str(c) for c in plan]
    assert text[0] == "ip netns add t1-sw"
    assert [c.creates for c in plan if c.creates] == list(fabric.namespaces)
    # every command is scoped to one of the fabric's namespaces, none to the caller's
    for command in plan:
        assert command.argv[:2] in (("ip", "netns"), ("ip", "-n"), ("tc", "-n"))
        assert any(ns in command.argv for ns in fabric.namespaces)
    assert "ip -n t1-sw link add name leaf0-h0 type veth peer name eth0 netns t1-h0" in text
    assert "ip -n t1-h0 addr add 10.200.0.1/24 dev eth0" in text
    burst = burst_bytes(50_000_000)
    tbf = f"root tbf rate 50000000bit burst {burst} latency 50ms"
    assert f"tc -n t1-h0 qdisc add dev eth0 {tbf}" in text
    assert f"tc -n t1-sw qdisc add dev leaf0-h0 {tbf}" in text
    assert f"tc -n t1-sw qdisc add dev leaf0-spine {tbf}" in text
    assert f"tc -n t1-sw qdisc add dev spine-leaf0 {tbf}" in text
    assert sum("qdisc add" in t for t in text) == 2 * len(fabric.links)


def test_quickack_rewrites_each_hosts_route_and_is_off_by_default():
    quick = [str(c) for c in up_plan(build_fabric(leaf_spine(quickack=True)))]
    routes = [t for t in quick if " route " in t]
    assert routes[0] == (
        "ip -n t1-h0 route replace 10.200.0.0/24 dev eth0 proto kernel scope link "
        "src 10.200.0.1 quickack 1"
    )
    assert len(routes) == 4 and all(t.endswith("quickack 1") for t in routes)
    # after the address, which creates the route it replaces
    assert quick.index(routes[0]) > quick.index("ip -n t1-h0 addr add 10.200.0.1/24 dev eth0")
    assert not any(" route " in str(c) for c in up_plan(build_fabric(leaf_spine())))
    fabric = build_fabric(leaf_spine(quickack=True))
    assert type(fabric).from_json(json.loads(json.dumps(fabric.to_json()))).quickack


def test_burst_holds_a_few_milliseconds_of_the_rate_and_at_least_ten_frames():
    assert burst_bytes(10_000_000) == 15_000
    assert burst_bytes(200_000_000) == 125_000


def test_fault_plans():
    fabric = build_fabric(leaf_spine())
    link = fabric.link("leaf0-spine")
    tbf = "root tbf rate 10000000bit burst 15000 latency 50ms"
    assert [str(c) for c in set_rate_plan(fabric, link, 10_000_000)] == [
        f"tc -n t1-sw qdisc change dev leaf0-spine {tbf}",
        f"tc -n t1-sw qdisc change dev spine-leaf0 {tbf}",
    ]
    assert [str(c) for c in link_state_plan(fabric.link("h1-leaf0"), up=False)] == [
        "ip -n t1-sw link set dev leaf0-h1 down"
    ]
    assert [str(c) for c in down_plan(fabric.namespaces)][0] == "ip netns del t1-h3"


def test_up_then_down_removes_exactly_what_up_created(tmp_path):
    backend = RecordingBackend()
    backend.namespaces.append("other-ns")  # someone else's: must survive
    state = up(leaf_spine(), backend, tmp_path)
    assert state.complete and state.path.exists()
    assert load_state("t1", tmp_path).namespaces == list(state.fabric.namespaces)
    assert list_fabrics(tmp_path) == ["t1"] and resolve_name(None, tmp_path) == "t1"
    backend.pids["t1-h2"] = [4242]
    removed = down(state, backend)
    assert removed == ["t1-h3", "t1-h2", "t1-h1", "t1-h0", "t1-sw"]
    assert backend.namespaces == ["other-ns"]
    assert backend.killed == [4242]
    assert not state.path.exists()
    # idempotent: a second down finds nothing to do and fails nowhere
    assert down(state, backend) == []


@pytest.mark.parametrize("fail_at", [1, 9, 12, 30])
def test_a_failure_half_way_through_up_is_rolled_back(tmp_path, fail_at):
    backend = RecordingBackend(fail_at=fail_at)
    with pytest.raises(FabricError, match="injected failure"):
        up(leaf_spine(), backend, tmp_path)
    assert backend.namespaces == []
    assert list_fabrics(tmp_path) == []


def test_a_crash_half_way_through_up_leaves_a_state_that_down_can_use(tmp_path, monkeypatch):
    from syncpace.fabric import lifecycle

    class Crash(BaseException):
        pass

    def crash(argv):
        if argv[:3] == ("ip", "netns", "add") and argv[3] == "t1-h2":
            raise Crash

    # A SIGKILL runs no rollback: the state file is all that is left.
    monkeypatch.setattr(lifecycle, "down", lambda state, backend: [])
    backend = RecordingBackend(on_run=crash)
    with pytest.raises(Crash):
        up(leaf_spine(), backend, tmp_path)
    monkeypatch.undo()
    state = load_state("t1", tmp_path)
    assert not state.complete
    assert state.namespaces == ["t1-sw", "t1-h0", "t1-h1", "t1-h2"]
    assert backend.namespaces == ["t1-sw", "t1-h0", "t1-h1"]
    assert down(state, backend) == ["t1-h1", "t1-h0", "t1-sw"]
    assert backend.namespaces == [] and list_fabrics(tmp_path) == []


def test_up_refuses_names_in_use(tmp_path):
    backend = RecordingBackend()
    up(leaf_spine(), backend, tmp_path)
    with pytest.raises(FabricError, match="already up"):
        up(leaf_spine(), backend, tmp_path)
    stray = RecordingBackend(namespaces=["t1-h1"])
    with pytest.raises(FabricError, match="t1-h1 already exist"):
        up(leaf_spine(), stray, tmp_path / "other")


def test_resolve_name_needs_a_name_when_several_or_none(tmp_path):
    with pytest.raises(FabricError, match="no fabric is up"):
        resolve_name(None, tmp_path)
    backend = RecordingBackend()
    up(leaf_spine(name="a1"), backend, tmp_path)
    up(leaf_spine(name="a2", subnet="10.201.0.0/24"), backend, tmp_path)
    with pytest.raises(FabricError, match="several fabrics are up .a1, a2."):
        resolve_name(None, tmp_path)
    with pytest.raises(FabricError, match="no fabric named 'zz'"):
        load_state("zz", tmp_path)


def test_down_twice_is_no_error(tmp_path):
    backend = RecordingBackend()
    state = up(leaf_spine(), backend, tmp_path)
    name, removed = down_named(state.name, backend, tmp_path)
    assert name == state.name and sorted(removed) == sorted(state.namespaces)
    assert down_named(state.name, backend, tmp_path) == (state.name, None)  # nothing left
    assert down_named(None, backend, tmp_path) == (None, None)  # none up at all
    assert backend.namespaces == []


def test_fabric_down_twice_exits_0(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNCPACE_FABRIC_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(cli_fabric, "require_root", lambda what: None)
    backend = RecordingBackend()
    monkeypatch.setattr(cli_fabric, "SystemBackend", lambda: backend)
    state = up(leaf_spine(), backend, tmp_path)
    for _ in range(2):
        assert main(["fabric", "down", state.name]) == 0
    assert main(["fabric", "down"]) == 0
    assert backend.namespaces == []
