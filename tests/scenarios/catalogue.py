"""The planted-cause scenarios: what each plants, through which mechanism, and what the
diagnosis must say. Each is a plain PyTorch job (``job.py``) with one argument or one
fabric fault changed from a healthy baseline; ``clean`` is the same job without the
cause, for checking the counterfactual against a real rerun.
"""

from __future__ import annotations

from planted import Scenario

STEPS = "30"
#: DDP over a small MLP, buckets overlapped with a sleeping backward: nothing to fix.
DDP = ("--steps", STEPS, "--comm", "ddp", "--compute-ms", "40", "--bwd-ms", "20")
SMALL = ("--buckets", "2", "--bucket-bytes", str(64 * 1024))
STAR4 = {"topology": "star", "hosts": 4, "host_rate": "200mbit"}
STAR2 = {"topology": "star", "hosts": 2, "host_rate": "200mbit"}
MIB = str(1 << 20)
#: async 1 MiB buckets during backward, waited at its end: large enough to be judged
#: on bandwidth (the knee is 1 MiB), on 200 Mbit/s host links.
BIG = ("--steps", STEPS, "--comm", "async", "--compute-ms", "60", "--bwd-ms", "60")
BIG += ("--buckets", "2", "--bucket-bytes", MIB)
#: 4 buckets of 256 KiB and a 60 ms backward to hide them behind
OVERLAP = ("--steps", STEPS, "--comm", "ddp", "--compute-ms", "20", "--bwd-ms", "60")
OVERLAP += ("--buckets", "4", "--bucket-bytes", str(256 * 1024))
SYNC = ("--steps", STEPS, "--comm", "sync", "--compute-ms", "40", "--buckets", "2")
SYNC += ("--bucket-bytes", MIB)


def _local() -> list[Scenario]:
    healthy = Scenario(name="healthy", plant="nothing", job=(*DDP, *SMALL))
    return [
        healthy,
        Scenario(
            name="straggler",
            plant="rank 2 computes 12 ms more every step",
            job=(*DDP, *SMALL, "--slow-ranks", "2", "--slow-ms", "12"),
            expected="straggler",
            expected_ranks=(2,),
            clean=healthy,
            what_if="straggler:2",
        ),
        Scenario(
            name="jitter-strong",
            plant="heavy-tailed compute jitter on every rank (Pareto 2.0)",
            job=(*DDP, *SMALL, "--jitter", "pareto:2.0"),
            expected="sync_amplification",
            clean=healthy,
            what_if="jitter",
        ),
        Scenario(
            name="jitter-weak",
            plant="heavy-tailed compute jitter on every rank (Pareto 3.0), near the threshold",
            job=(*DDP, *SMALL, "--jitter", "pareto:3.0"),
            expected="sync_amplification",
        ),
        Scenario(
            name="stall",
            plant="rank 1 stalls 3 s once, in step 15",
            job=(*DDP, *SMALL, "--stall-step", "15", "--stall-rank", "1", "--stall-ms", "3000"),
            expected="stall",
            expected_ranks=(1,),
            clean=healthy,
            what_if="stall",
        ),
        Scenario(
            name="latency-bound",
            plant="60 unbucketed 64-byte all-reduces every step",
            job=(*DDP, *SMALL, "--small", "60"),
            expected="latency_bound",
            clean=Scenario(name="latency-bucketed", plant="", job=(*DDP, *SMALL, "--small", "1")),
            what_if="coalesced",
        ),
        Scenario(
            name="poor-overlap",
            plant="every DDP bucket issued at the end of a 60 ms backward",
            job=(*OVERLAP, "--overlap", "poor"),
            expected="poor_overlap",
            clean=Scenario(name="good-overlap", plant="", job=OVERLAP),
            what_if="overlap",
        ),
        Scenario(
            name="good-overlap",
            plant="nothing: the same buckets issued during backward",
            job=OVERLAP,
        ),
        Scenario(
            name="bandwidth-sync",
            plant="4 x 8 MiB blocking all-reduces after 10 ms of compute",
            job=("--steps", STEPS, "--comm", "sync", "--compute-ms", "10", "--buckets", "4")
            + ("--bucket-bytes", str(8 << 20)),
            expected="bandwidth_bound",
            also=(),
        ),
        Scenario(
            name="bandwidth-async",
            plant="4 x 8 MiB async all-reduces during 10 ms of backward, waited at its end",
            job=("--steps", STEPS, "--comm", "async", "--compute-ms", "5", "--bwd-ms", "10")
            + ("--buckets", "4", "--bucket-bytes", str(8 << 20)),
            expected="bandwidth_bound",
        ),
        Scenario(
            name="two-causes",
            plant="rank 3 computes 30 ms more, and 60 small all-reduces every step",
            job=(*DDP, *SMALL, "--slow-ranks", "3", "--slow-ms", "30", "--small", "60"),
            expected="straggler",
            expected_ranks=(3,),
            also=("latency_bound",),
        ),
    ]


def _fabric() -> list[Scenario]:
    healthy = Scenario(
        name="fab-healthy", plant="nothing", job=(*DDP, *SMALL), hosts=4, fabric=STAR4
    )
    big_clean = Scenario(name="fab-big", plant="nothing", job=BIG, hosts=4, fabric=STAR4)
    sync_clean = Scenario(name="fab-sync", plant="nothing", job=SYNC, hosts=4, fabric=STAR4)
    eight = {"ranks": 8, "hosts": 4, "fabric": STAR4}
    node_clean = Scenario(
        name="fab8-healthy", plant="nothing", job=(*DDP, *SMALL, "--burn-ms", "6"), **eight
    )
    local2_clean = Scenario(
        name="fab2x2-healthy", plant="nothing", job=(*DDP, *SMALL), hosts=2, fabric=STAR2
    )
    return [
        healthy,
        Scenario(
            name="whole-node",
            plant="host h2 capped at 15 % of a CPU (cgroup): both its ranks compute slowly",
            job=(*DDP, *SMALL, "--burn-ms", "6"),
            faults=("straggler h2 0.15",),
            expected="straggler",
            expected_ranks=(4, 5),
            expected_nodes=("h2",),
            clean=node_clean,
            what_if="straggler:4,5",
            **eight,
        ),
        Scenario(
            name="local-rank-2-nodes",
            plant="local rank 1 computes 12 ms more on both of 2 hosts",
            job=(*DDP, *SMALL, "--slow-ranks", "1,3", "--slow-ms", "12"),
            hosts=2,
            fabric=STAR2,
            expected="locality_variance",
            expected_ranks=(1, 3),
            clean=local2_clean,
            what_if="locality_variance:1,3",
        ),
        Scenario(
            name="local-rank-4-nodes",
            plant="local rank 1 computes 12 ms more on all 4 hosts",
            job=(*DDP, *SMALL, "--slow-ranks", "1,3,5,7", "--slow-ms", "12", "--burn-ms", "6"),
            expected="locality_variance",
            expected_ranks=(1, 3, 5, 7),
            **eight,
        ),
        Scenario(
            name="contention-fixed",
            plant="UDP at 120 Mbit/s h0<->h2 from a third of the run on",
            job=BIG,
            hosts=4,
            fabric=STAR4,
            flows=(("h0", "h2"), ("h2", "h0")),
            flow_rate="120mbit",
            flows_after_s=3.0,
            expected="fabric_contention",
            clean=big_clean,
            what_if="links:cross",
        ),
        Scenario(
            name="contention-greedy",
            plant="greedy TCP h1<->h3 from a third of the run on",
            job=BIG,
            hosts=4,
            fabric=STAR4,
            flows=(("h1", "h3"), ("h3", "h1")),
            flows_after_s=3.0,
            expected="fabric_contention",
        ),
        Scenario(
            name="slow-host-link",
            plant="host h1's link at 50 of 200 Mbit/s all run long",
            job=SYNC,
            hosts=4,
            fabric=STAR4,
            faults=("rate h1-sw 50mbit",),
            expected="slow_link",
            expected_ranks=(0, 1),
            expected_nodes=("h0", "h1"),
            clean=sync_clean,
            what_if="slow_link:0,1",
        ),
        Scenario(
            name="oversubscribed-uplink",
            plant="leaf uplinks at 1:4 (half a host link): the ring crosses them twice",
            job=SYNC,
            hosts=4,
            fabric={
                "topology": "leaf-spine",
                "leaves": 2,
                "hosts": 2,
                "host_rate": "200mbit",
                "oversubscription": 4.0,
            },
            expected="slow_link",
            expected_ranks=(1, 3),
            expected_nodes=("h1", "h3"),
            clean=Scenario(
                name="ls-sync",
                plant="",
                job=SYNC,
                hosts=4,
                fabric={
                    "topology": "leaf-spine",
                    "leaves": 2,
                    "hosts": 2,
                    "host_rate": "200mbit",
                    "oversubscription": 1.0,
                },
            ),
            what_if="slow_link:1,3",
        ),
    ]


LOCAL = {s.name: s for s in _local()}
FABRIC = {s.name: s for s in _fabric()}
ALL = {**LOCAL, **FABRIC}
#: The CI short form: one run each, localhost, the mechanisms that fail most easily.
SHORT = ("healthy", "straggler", "stall", "latency-bound", "poor-overlap")
