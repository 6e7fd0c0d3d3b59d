"""Grid points on a chosen tier, and an earlier grid's measurements simulated again
(no fabric): the tier per point, the packet tier set from the recorded fabric, the
measurements read back from ``validation.json``, and ``validate --resimulate``.

Truth from outside the code under test: the fabric's settings as written in the file,
the grid's documented packet settings, and the ring's bytes over the link rate.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from dataclasses import replace

import pytest

from syncpace.cli.main import main
from syncpace.errors import ConfigError
from syncpace.sim.calibrate import Calibration, ComputeProfile
from syncpace.sim.engine import simulate
from syncpace.validate.compare import Stats
from syncpace.validate.grid import GRID
from syncpace.validate.measured import Measured, load_measured, setup_json, tiers_of
from syncpace.validate.model import Fabric, sim_config, sim_stats

needs_ns3 = pytest.mark.skipif(
    shutil.which("g++") is None or importlib.util.find_spec("ns3") is None,
    reason="needs the ns3 package and g++",
)

POINTS = {pt.name: pt for pt in GRID}
MBIT = 50e6
BETA_GBPS = 48.5e6 / 8e9  # a benchmark's β: below the link's rate
RING4_BYTES = 2 * 3 / 4 * 256 * 1024  # a 4-rank ring all-reduce sends this per rank


def measured(name: str, cc: str = "bbr") -> Measured:
    return Measured(
        point=POINTS[name],
        real=Stats(iterations=35, iteration_ms=301.3, cv=0.048, p99_ms=335.9, transfer_ms=66.1),
        bench=Calibration(source="bench:x", alpha_us=0.0, bandwidth_gbps=BETA_GBPS),
        profile=ComputeProfile(
            compute_ms=152.0, jitter=0.1, rank_spread=0.01, slow_ranks=(), slow_factor=1.0
        ),
        fabric=Fabric(rate_bps=int(MBIT), congestion_control=cc, queue_ms=50.0),
    )


def grid_file(tmp_path, *points: Measured) -> str:
    rows = []
    for m in points:
        cfg = sim_config(m.point, m.bench, m.profile, 40)
        rows.append({"point": m.point.name, "real": m.real.to_json(), "setup": setup_json(m, cfg)})
    path = tmp_path / "validation.json"
    path.write_text(json.dumps({"rows": rows}, default=str))
    return str(path)


def test_a_tier_for_every_point_or_per_point():
    pts = [POINTS["star4"], POINTS["star4-contended"], POINTS["ls4"]]
    assert set(tiers_of("", pts).values()) == {"analytical"}
    assert set(tiers_of("packet", pts).values()) == {"packet"}
    assert tiers_of("star4-contended=packet, ls4=flow", pts) == {
        "star4": "analytical",
        "star4-contended": "packet",
        "ls4": "flow",
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("fluid", "'fluid' is not one of analytical, flow, packet"),
        ("star9=packet", "'star9=packet' is not POINT=TIER for a point of this grid"),
        ("star4=ns3", "'ns3' is not one of"),
    ],
)
def test_bad_tiers_are_one_line(text, message):
    with pytest.raises(ConfigError, match=message) as err:
        tiers_of(text, [POINTS["star4"]])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "name, cc, tcp, delack",
    [("star4", "bbr", "bbr", 1), ("star8-delayed-ack", "reno", "newreno", 2)],
)
def test_the_packet_tier_runs_the_fabric_the_point_ran_on(name, cc, tcp, delack):
    m = measured(name, cc)
    net = sim_config(m.point, m.bench, m.profile, 40, tier="packet", fabric=m.fabric)
    assert net.network.tier == "packet"
    assert net.network.packet_tcp == tcp  # the hosts' recorded congestion control
    assert net.network.packet_delayed_ack == delack  # quickack on every point but one
    assert (net.network.packet_shaper, net.network.packet_warm) == ("tbf", 2)
    assert net.network.packet_queue_ms == 50.0
    # the link's rate, not β: the packet tier sends TCP's headers itself
    assert net.topology.nic_gbps == pytest.approx(MBIT / 8e9)
    flow = sim_config(m.point, m.bench, m.profile, 40, tier="flow", fabric=m.fabric)
    assert flow.network.tier == "flow" and flow.topology.nic_gbps == BETA_GBPS


def test_a_congestion_control_the_packet_tier_lacks_is_one_line():
    m = measured("star4", "vegas")
    with pytest.raises(ConfigError, match="the hosts ran vegas congestion control; the packet"):
        sim_config(m.point, m.bench, m.profile, 40, tier="packet", fabric=m.fabric)


def test_the_measurements_read_back_from_the_grids_output(tmp_path):
    path = grid_file(tmp_path, measured("star4"), measured("star4-contended", "reno"))
    back = load_measured(path, POINTS)
    assert back == [measured("star4"), measured("star4-contended", "reno")]


def test_an_output_without_the_recorded_fabric_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "validation.json"
    row = {"point": "star4", "real": measured("star4").real.to_json(), "setup": {"bench": {}}}
    path.write_text(json.dumps({"rows": [row]}))
    with pytest.raises(ConfigError, match=f"{path}: star4: no recorded fabric") as err:
        load_measured(path, POINTS)
    assert "\n" not in str(err.value)
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="other.json: not a validation grid's output"):
        load_measured(tmp_path / "other.json", POINTS)


def test_resimulate_runs_the_measured_points_on_the_tier_asked(tmp_path, capsys):
    path = grid_file(tmp_path, measured("star4"), measured("ls4"))
    out = tmp_path / "again"
    code = main(
        ["validate", "--resimulate", path, "--tiers", "star4=flow", "--sim-steps", "40"]
        + ["--out", str(out)]
    )
    report = json.loads((out / "resimulated.json").read_text())
    rows = {r["point"]: r for r in report["rows"]}
    assert code == (0 if all(r["passed"] for r in rows.values()) else 1)
    assert (rows["star4"]["tier"], rows["ls4"]["tier"]) == ("flow", "analytical")
    assert rows["star4"]["real"] == measured("star4").real.to_json()  # not measured again
    # a ring step at a time over links of β: the bytes over the rate
    assert rows["star4"]["sim"]["transfer_ms"] == pytest.approx(
        RING4_BYTES / (BETA_GBPS * 1e9) * 1e3, rel=0.01
    )
    assert "star4   flow" in " ".join(capsys.readouterr().out.split("│"))


@needs_ns3
@pytest.mark.slow
def test_a_clean_point_on_the_packet_tier_moves_its_bytes_at_the_fabrics_rate(tmp_path):
    path = grid_file(tmp_path, measured("star4"))
    out = tmp_path / "packet"
    main(
        ["validate", "--resimulate", path, "--tiers", "packet", "--sim-steps", "40"]
        + ["--out", str(out)]
    )
    (row,) = json.loads((out / "resimulated.json").read_text())["rows"]
    assert row["tier"] == "packet"
    assert row["setup"]["sim_config"]["network"]["packet_tcp"] == "bbr"
    # every segment pays 52 bytes of IP and TCP headers: at least the payload over the
    # fabric's rate times 1,500 / 1,448; the tbf's bucket and a round trip per ring
    # step keep it within 10 % of that
    wire_ms = RING4_BYTES * 8 / MBIT * 1500 / 1448 * 1e3
    assert wire_ms * 0.97 <= row["sim"]["transfer_ms"] <= wire_ms * 1.10
    # the slowest rank's compute (jitter 0.1 over 4 ranks: 5-25 % above the median)
    # plus the two buckets' transfers, one after the other
    comm = 2 * row["sim"]["transfer_ms"]
    assert 152.0 * 1.05 + comm <= row["sim"]["iteration_ms"] <= 152.0 * 1.25 + comm


def test_a_congestion_control_the_hosts_cannot_run_is_refused_before_any_run(
    tmp_path, monkeypatch, capsys
):
    from syncpace.fabric import tcp

    (tmp_path / tcp.AVAILABLE).write_text("reno bbr cubic\n")
    (tmp_path / tcp.ALLOWED).write_text("reno bbr\n")
    monkeypatch.setattr(tcp, "PROC", tmp_path)
    code = main(["validate", "--congestion-control", "cubic", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "'cubic' is available but not allowed in a network namespace" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("cc", "tcp", "added_ms"),
    # h1's queue behind greedy h1->h0 at β = 48.5 Mbit/s, 6 ring steps crossing it:
    # reno fills the 50 ms queue and the tbf bucket (5 ms of the rate, above 15 kB); bbr
    # keeps 7 ms of the rate
    [("reno", "newreno", 6 * (50 + 5)), ("bbr", "bbr", 6 * 7)],
)
@pytest.mark.parametrize("tier", ["analytical", "flow"])
def test_the_fast_tiers_take_the_hosts_congestion_control_for_the_standing_queue(
    cc, tcp, added_ms, tier
):
    m = measured("star4-contended", cc)
    cfg = sim_config(m.point, m.bench, m.profile, 40, tier=tier, fabric=m.fabric)
    assert (cfg.network.packet_tcp, cfg.network.packet_queue_ms) == (tcp, 50.0)
    assert cfg.network.packet_warm == 0  # the packet tier's own settings stay its own
    share = replace(cfg, network=replace(cfg.network, standing_queue=False))
    ring_ms = RING4_BYTES / (BETA_GBPS * 1e9) * 1e3
    alone = sim_stats(simulate(share)).transfer_ms
    queued = sim_stats(simulate(cfg)).transfer_ms
    assert alone == pytest.approx(2 * ring_ms, rel=1e-3)
    assert queued - alone == pytest.approx(added_ms, rel=1e-3)
