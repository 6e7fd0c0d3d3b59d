"""The report figures of a benchmark: built from saved results, labels escaped."""

from __future__ import annotations

import math

from syncpace.bench.figures import busbw_figure, pair_matrix_figure
from syncpace.bench.pairs import flag_slow
from syncpace.bench.results import PairMatrix


def _matrix() -> PairMatrix:
    n = 4
    bw = [[None if i == j else (1.0 if 2 in (i, j) else 10.0) for j in range(n)] for i in range(n)]
    lat = [[None if i == j else 50.0 for j in range(n)] for i in range(n)]
    median, ref, slow, suspects = flag_slow(bw, 0.7)
    return PairMatrix(
        hosts=("h0", "h1", "<b>h2</b>", "h3"),
        latency_us=tuple(map(tuple, lat)),
        bandwidth_gbps=tuple(map(tuple, bw)),
        message_bytes=1 << 20,
        latency_bytes=8,
        iters=3,
        rounds=3,
        serial=False,
        slow_fraction=0.7,
        median_gbps=median,
        reference_gbps=ref,
        slow=slow,
        suspects=suspects,
    )


def test_pair_heatmap_marks_the_slow_pairs_and_names_the_suspect():
    m = _matrix()
    fig = pair_matrix_figure(m)
    heat, marks = fig.data
    assert heat.type == "heatmap" and len(heat.z) == 4
    assert math.isnan(heat.z[1][1]) and heat.z[0][1] == 10.0 and heat.z[2][0] == 1.0
    assert "&lt;b&gt;h2&lt;/b&gt;" in heat.x[2]
    assert len(marks.x) == 6  # every pair of rank 2, both directions
    assert "every pair of 2 &lt;b&gt;h2&lt;/b&gt; is slow" in fig.layout.title.text
    assert PairMatrix.from_json(m.to_json()) == m


def test_busbw_figure_draws_each_op_and_its_fit():
    bench = {
        "world_size": 2,
        "backend": "gloo",
        "rows": [
            {"op": "all_reduce", "size_bytes": s, "busbw_gbps": s / (10 + s / 1e3) / 1e3}
            for s in (1e3, 1e4, 1e5)
        ],
        "fits": {
            "all_reduce": {
                "alpha_us": 10.0,
                "beta_gbps": 1.0,
                "knee_bytes": 1e4,
                "bus_factor": 1.0,
                "points": 3,
                "max_rel_error": 0.0,
            }
        },
    }
    fig = busbw_figure(bench)
    assert [t.name.split(" ")[0] for t in fig.data] == ["all_reduce", "all_reduce"]
    assert list(fig.data[1].y) == list(fig.data[0].y)
