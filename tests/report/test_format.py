"""Evidence as people read it: units by magnitude, ranks with host and local rank, no raw
dicts, lists or nulls — one formatter for every human output."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from syncpace.report import format as fmt

PLACES = fmt.Places({0: "h0", 1: "h0", 2: "h2", 3: "h3"}, {0: 0, 1: 1, 2: 0, 3: 0})
#: What a table cell must never show: JSON or Python reprs, nulls.
RAW = re.compile(r"[{}\[\]]|\bnull\b|\bNone\b|\bnan\b|\binf\b")


def raw(text: str) -> bool:
    """JSON, a repr or a null in ``text``, or a number with more than three significant
    digits after rounding was due (317.7751, 0.7702: not 0.0625, not 1,234)."""
    decimals = re.findall(r"\d[\d,]*\.\d+", text)
    digits = [d.replace(",", "").replace(".", "").lstrip("0") for d in decimals]
    return bool(RAW.search(text)) or any(len(d) > 3 for d in digits)


@pytest.mark.parametrize(
    ("gbytes_per_s", "text"),
    [
        (0.003, "24 Mbit/s"),  # what the demo's 100 Mbit/s fabric gave as "0.003 GB/s"
        (0.0125, "100 Mbit/s"),
        (12.5, "100 Gbit/s"),
        (50.0, "50 GB/s"),  # from 400 Gbit/s on, bytes
        (25.0, "200 Gbit/s"),
        (150.0, "150 GB/s"),
        (0.0000001, "0.8 kbit/s"),
    ],
)
def test_bandwidth_unit_follows_the_magnitude(gbytes_per_s, text):
    assert fmt.bandwidth(gbytes_per_s) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.3177751, "318 ms"),
        (0.1384589, "138 ms"),
        (57.045e-6, "57 µs"),
        (1.2345, "1.23 s"),
        (4e-7, "400 ns"),
        (0.02794, "27.9 ms"),
        (0, "0 ms"),
    ],
)
def test_durations_keep_three_significant_digits(seconds, text):
    assert fmt.duration(seconds) == text


def test_shares_sizes_and_changes():
    assert [fmt.percent(x) for x in (0.7702, 0.0233, 0.0004, 0.0, 1.0)] == [
        "77%",
        "2.3%",
        "0.04%",
        "0%",
        "100%",
    ]
    assert fmt.signed_percent(-0.022) == "−2.2%" and fmt.signed_percent(0.31) == "+31%"
    assert [fmt.size(n) for n in (100, 8192, 1071144, 3 << 30)] == [
        "100 B",
        "8 KiB",
        "1.02 MiB",
        "3 GiB",
    ]
    assert fmt.confidence(0.91) == "high (0.91)" and fmt.confidence(0.3) == "low (0.30)"


def test_ranks_carry_host_and_local_rank():
    assert PLACES.rank(2) == "rank 2 (h2, local rank 0)"
    assert PLACES.ranks([1, 0]) == "all 2 ranks of h0"
    assert PLACES.ranks([1, 3]) == "ranks 1 (h0, local rank 1), 3 (h3, local rank 0)"
    many = fmt.Places({r: f"n{r // 4}" for r in range(16)}, {r: r % 4 for r in range(16)})
    assert many.ranks([0, 1, 2, 3, 8, 9]) == "6 ranks 0–3, 8–9 on n0, n2"
    assert fmt.Places({}, {}).rank(7) == "rank 7"  # unknown placement: just the rank


def test_straggler_evidence_reads_as_units_not_json():
    evidence = {
        "late_ranks": [2],
        "whole_nodes": ["h2"],
        "lateness_p50_ms": {"2": 138.4589},
        "typical_lateness_p50_ms": 27.9409,
        "last_share": 1.0,
        "excess_transfer_ms_per_iteration": 317.7751,
        "cross_node_busbw_gbps_p50": 0.003,
        "intra_node_busbw_gbps_p50": None,
        "estimated_knee_bytes": None,
        "cv_by_world_size": {4: 0.1, 8: 0.2345},
        "own_lateness_transfer_correlation": 0.408,
        "groups": ["0"],
    }
    rows = dict(fmt.evidence_rows(evidence, PLACES))
    assert rows["late ranks"] == "rank 2 (h2, local rank 0)"
    assert rows["median lateness"] == "rank 2 (h2, local rank 0): 138 ms"
    assert rows["iterations it arrived last"] == "100%"
    assert rows["excess transfer time per iteration"] == "318 ms"
    assert rows["cross-node busbw (median)"] == "24 Mbit/s"
    assert rows["iteration-time variation (CV) by world size"] == "4 ranks: 0.1; 8 ranks: 0.234"
    assert rows["late rank's own lateness vs transfer (correlation)"] == "+0.41"
    # a value that was not measured is left out, never shown as null/None
    assert "intra-node busbw (median)" not in rows and "latency knee (estimated α·B)" not in rows
    for text in rows.values():
        assert not raw(text), text


def test_unknown_keys_take_their_unit_from_their_name():
    rows = dict(fmt.evidence_rows({"nic_tx_gbps_p90": 0.011, "retransmits_share": 0.0312}))
    assert rows == {"nic tx p90": "88 Mbit/s", "retransmits share": "3.1%"}


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet="abcxyz -_", max_size=12),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(alphabet="0123abc", min_size=1, max_size=4), inner, max_size=5)
    ),
    max_leaves=12,
)
keys = st.sampled_from(
    [
        "late_ranks",
        "lateness_p50_ms",
        "busbw_gbps_p50",
        "wait_share_of_iteration",
        "median_inflation",
        "skew_ns",
        "bytes_p50",
        "groups",
        "reader_warnings",
        "x_y",
        "ranks",
        "cv_by_world_size",
        "threshold",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(keys, json_values, max_size=6))
def test_no_evidence_value_is_shown_raw(evidence):
    """Whatever a detector puts in its evidence, the table shows no JSON, repr or null."""
    for label, text in fmt.evidence_rows(evidence, PLACES):
        assert label and text
        assert not raw(text), (label, text)


def test_short_run_names_are_distinct_path_tails():
    assert fmt.run_names(["/tmp/x/trace", "/tmp/x/trace-paced"]) == {
        "/tmp/x/trace": "trace",
        "/tmp/x/trace-paced": "trace-paced",
    }
    assert fmt.run_names(["/a/run", "/b/run"]) == {"/a/run": "a/run", "/b/run": "b/run"}
