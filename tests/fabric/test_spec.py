"""Spec parsing and validation: clear errors for bad specs, runs anywhere."""

from __future__ import annotations

import pytest

from syncpace.fabric import FabricError, build_spec, parse_rate
from syncpace.fabric.spec import format_rate, load_spec_file


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("100mbit", 100_000_000),
        ("1Gbit", 1_000_000_000),
        ("1.5gbit", 1_500_000_000),
        ("500kbit", 500_000),
        ("20m", 20_000_000),
        ("10 Mbit/s", 10_000_000),
        (64_000, 64_000),
    ],
)
def test_rates_parse_as_decimal_bits(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text", ["fast", "10MB/s", "mbit", "-5mbit", "1kbit", "200gbit", True])
def test_bad_rates_are_refused_with_an_example(text):
    with pytest.raises(FabricError, match="rate|outside"):
        parse_rate(text, "host_rate")


def test_format_rate_round_trips():
    assert format_rate(50_000_000) == "50mbit"
    assert parse_rate(format_rate(1_500_000_000)) == 1_500_000_000


def test_defaults_are_a_non_blocking_two_by_two_leaf_spine():
    spec = build_spec()
    assert (spec.topology, spec.n_leaves, spec.n_hosts) == ("leaf-spine", 2, 4)
    assert spec.uplink_rate_bps == 2 * spec.host_rate_bps


def test_oversubscription_sets_the_uplink():
    spec = build_spec(hosts=4, host_rate="100mbit", oversubscription=2.0)
    assert spec.uplink_rate_bps == 200_000_000
    assert build_spec(uplink_rate="30mbit").uplink_rate_bps == 30_000_000


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"topology": "ring"}, "unknown topology 'ring'; choose one of star, leaf-spine"),
        ({"host_rate": "fast"}, "host_rate: cannot parse 'fast'"),
        ({"uplink_rate": "1x"}, "uplink_rate: cannot parse"),
        ({"hosts": 200}, "400 hosts do not fit in subnet 10.200.0.0/24 .254 addresses."),
        ({"subnet": "10.0.0.0/30", "topology": "star", "hosts": 3}, "3 hosts do not fit"),
        ({"subnet": "10.0.0.1/24"}, "subnet '10.0.0.1/24'"),
        ({"topology": "star", "leaves": 2}, "a star has one switch"),
        ({"hosts": 1, "topology": "star"}, "at least 2 hosts"),
        ({"uplink_rate": "1gbit", "oversubscription": 2.0}, "not both"),
        ({"name": "Bad-Name"}, "name 'Bad-Name'"),
        ({"delay": "1ms"}, "netem"),
        ({"colour": "red"}, "unknown spec key 'colour'"),
        ({"hosts": "two"}, "hosts: must be a number, got .two."),
        ({"quickack": "0"}, "quickack: expected true or false, got '0'"),
        ({"quickack": 1}, "quickack: expected true or false, got 1"),
    ],
)
def test_bad_specs_say_what_is_wrong(values, message):
    with pytest.raises(FabricError, match=message):
        build_spec(values)


def test_spec_file_then_flags(tmp_path):
    path = tmp_path / "fabric.toml"
    path.write_text(
        '[fabric]\ntopology = "leaf-spine"\nleaves = 3\nhosts = 2\nhost_rate = "20mbit"\n'
        '[[fault]]\naction = "flap"\ntarget = "h0-leaf0"\nat = 1\n'
    )
    values, faults = load_spec_file(path)
    spec = build_spec(values, hosts=3)
    assert (spec.n_leaves, spec.hosts, spec.host_rate_bps) == (3, 3, 20_000_000)
    assert faults == [{"action": "flap", "target": "h0-leaf0", "at": 1}]


def test_spec_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[fabric\n")
    with pytest.raises(FabricError, match="bad.toml: not valid TOML"):
        load_spec_file(bad)
    with pytest.raises(FabricError, match="missing.toml: cannot read"):
        load_spec_file(tmp_path / "missing.toml")
    other = tmp_path / "other.toml"
    other.write_text("[network]\nx = 1\n")
    with pytest.raises(FabricError, match=r"unknown tables \['network'\]"):
        load_spec_file(other)
