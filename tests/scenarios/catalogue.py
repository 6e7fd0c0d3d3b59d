"""The planted-cause scenarios: what each plants, through which mechanism, and what the
diagnosis must say. Each is one plain PyTorch job (``job.py``) whose planted phases
carry the cause (a job argument, or a fabric fault in force only then) and whose clean
phases are the same job without it.
"""

from __future__ import annotations

from suite import Scenario

#: DDP over a small MLP, buckets overlapped with a sleeping backward: nothing to fix.
DDP = ("--comm", "ddp", "--compute-ms", "40", "--bwd-ms", "20")
SMALL = ("--buckets", "2", "--bucket-bytes", str(64 * 1024))
#: 4 buckets of 256 KiB and a 60 ms backward to hide them behind
OVERLAP = ("--comm", "ddp", "--compute-ms", "20", "--bwd-ms", "60", "--buckets", "4")
OVERLAP += ("--bucket-bytes", str(256 * 1024))
STAR4 = {"topology": "star", "hosts": 4, "host_rate": "200mbit"}
STAR2 = {"topology": "star", "hosts": 2, "host_rate": "200mbit"}
MIB = str(1 << 20)
#: async 1 MiB buckets during backward, waited at its end: large enough to be judged
#: on bandwidth (the knee is 1 MiB), on 200 Mbit/s host links
BIG = ("--comm", "async", "--compute-ms", "60", "--bwd-ms", "60", "--buckets", "2")
BIG += ("--bucket-bytes", MIB)
#: blocking 1 MiB all-reduces after the compute
SYNC = ("--comm", "sync", "--compute-ms", "40", "--buckets", "2", "--bucket-bytes", MIB)
#: 4 x 8 MiB all-reduces whose planted phases send all of it and clean ones half
HEAVY = ("--buckets", "4", "--bucket-bytes", str(8 << 20))


def _local() -> list[Scenario]:
    return [
        Scenario(name="healthy", plant="nothing", job=(*DDP, *SMALL)),
        Scenario(
            name="straggler",
            plant="rank 2 computes 20 ms more every step",
            job=(*DDP, *SMALL),
            plants={"slow_ranks": "2", "slow_ms": 20},
            expected="straggler",
            expected_ranks=(2,),
            what_if="straggler:2",
        ),
        Scenario(
            name="jitter-strong",
            plant="heavy-tailed compute jitter on every rank (Lomax shape 2, scale 0.35)",
            job=(*DDP, *SMALL),
            plants={"jitter": "pareto:2.0:0.35"},
            expected="sync_amplification",
            what_if="jitter",
            steps=24,
        ),
        Scenario(
            name="jitter-weak",
            plant="heavy-tailed compute jitter on every rank (Lomax shape 3, scale 0.4): "
            "it costs about 1.6 times the threshold",
            job=(*DDP, *SMALL),
            plants={"jitter": "pareto:3.0:0.4"},
            expected="sync_amplification",
            what_if="jitter",
            steps=24,
        ),
        Scenario(
            name="stall",
            plant="rank 1 stalls 2 s once, in step 8 of the phase",
            job=(*DDP, *SMALL),
            plants={"stall_step": 8, "stall_rank": 1, "stall_ms": 2000},
            expected="stall",
            expected_ranks=(1,),
            what_if="stall",
        ),
        Scenario(
            name="latency-bound",
            plant="60 unbucketed 64-byte all-reduces every step",
            job=(*DDP, *SMALL),
            plants={"small": 60},
            expected="latency_bound",
            what_if="coalesced",
            steps=12,
        ),
        Scenario(
            name="poor-overlap",
            plant="every DDP bucket issued at the end of a 60 ms backward (clean: during it)",
            job=OVERLAP,
            plants={"overlap": "poor"},
            expected="poor_overlap",
            what_if="overlap",
        ),
        Scenario(
            name="bandwidth-sync",
            plant="4 x 8 MiB blocking all-reduces after 10 ms of compute (clean: half the bytes)",
            job=("--comm", "sync", "--compute-ms", "10", *HEAVY),
            plants={"bucket_bytes": 8 << 20},
            clean_plants={"bucket_bytes": 4 << 20},
            score_clean=False,
            expected="bandwidth_bound",
            what_if="half-bytes",
        ),
        Scenario(
            name="bandwidth-async",
            plant="4 x 8 MiB async all-reduces in a 10 ms backward (clean: half the bytes)",
            job=("--comm", "async", "--compute-ms", "5", "--bwd-ms", "10", *HEAVY),
            plants={"bucket_bytes": 8 << 20},
            clean_plants={"bucket_bytes": 4 << 20},
            score_clean=False,
            expected="bandwidth_bound",
            what_if="half-bytes",
        ),
        Scenario(
            name="two-causes",
            plant="rank 3 computes 30 ms more, and 30 small all-reduces every step",
            job=(*DDP, *SMALL),
            plants={"slow_ranks": "3", "slow_ms": 30, "small": 30},
            expected="straggler",
            expected_ranks=(3,),
            also=("latency_bound",),
            what_if="all",
            steps=12,
        ),
    ]


def _fabric() -> list[Scenario]:
    two_by_two = {"ranks": 4, "hosts": 2, "fabric": STAR2}
    return [
        Scenario(name="fab-healthy", plant="nothing", job=(*DDP, *SMALL), hosts=4, fabric=STAR4),
        Scenario(
            name="whole-node",
            plant="host h1 capped at 5 % of a CPU (cgroup): both its ranks compute slowly",
            job=(*DDP, *SMALL, "--burn-ms", "2"),
            faults=("straggler h1 0.05",),
            # the host sampler sees h1's cgroup throttle both its ranks: CPU starvation
            expected="cpu_starvation",
            expected_ranks=(2, 3),
            expected_nodes=("h1",),
            what_if="cpu_starvation:2,3",
            **two_by_two,
        ),
        Scenario(
            name="local-rank-2-nodes",
            plant="local rank 1 computes 20 ms more on both of 2 hosts",
            job=(*DDP, *SMALL),
            plants={"slow_ranks": "1,3", "slow_ms": 20},
            expected="locality_variance",
            expected_ranks=(1, 3),
            what_if="locality_variance:1,3",
            **two_by_two,
        ),
        Scenario(
            name="local-rank-4-nodes",
            plant="local rank 1 computes 20 ms more on all 4 hosts",
            job=(*DDP, *SMALL),
            plants={"slow_ranks": "1,3,5,7", "slow_ms": 20},
            ranks=8,
            hosts=4,
            fabric=STAR4,
            expected="locality_variance",
            expected_ranks=(1, 3, 5, 7),
            what_if="locality_variance:1,3,5,7",
        ),
        Scenario(
            name="contention-fixed",
            clean_expected="bandwidth_bound",
            plant="UDP at 120 Mbit/s h0<->h2 from a third into each planted phase",
            job=BIG,
            hosts=4,
            fabric=STAR4,
            flows=(("h0", "h2"), ("h2", "h0")),
            flow_rate="120mbit",
            flows_after_s=1.5,
            expected="fabric_contention",
            what_if="links:cross",
        ),
        Scenario(
            name="contention-greedy",
            clean_expected="bandwidth_bound",
            plant="greedy TCP h1<->h3 from a third into each planted phase",
            job=BIG,
            hosts=4,
            fabric=STAR4,
            flows=(("h1", "h3"), ("h3", "h1")),
            flows_after_s=1.5,
            expected="fabric_contention",
            what_if="links:cross",
        ),
        Scenario(
            name="slow-host-link",
            clean_expected="bandwidth_bound",
            plant="host h1's link at 50 of 200 Mbit/s",
            job=SYNC,
            hosts=4,
            fabric=STAR4,
            faults=("rate h1-sw 50mbit",),
            expected="slow_link",
            expected_ranks=(0, 1),
            expected_nodes=("h0", "h1"),
            what_if="slow_link:0,1",
        ),
        Scenario(
            name="oversubscribed-uplink",
            clean_expected="bandwidth_bound",
            plant="both leaf uplinks at 100 Mbit/s (1:4) under 200 Mbit/s hosts: the ring "
            "crosses them twice",
            job=SYNC,
            hosts=4,
            fabric={
                "topology": "leaf-spine",
                "leaves": 2,
                "hosts": 2,
                "host_rate": "200mbit",
                "oversubscription": 1.0,
            },
            faults=("rate leaf0-spine 100mbit", "rate leaf1-spine 100mbit"),
            expected="slow_link",
            expected_ranks=(1, 3),
            expected_nodes=("h1", "h3"),
            what_if="slow_link:1,3",
        ),
    ]


LOCAL = {s.name: s for s in _local()}
FABRIC = {s.name: s for s in _fabric()}
ALL = {**LOCAL, **FABRIC}
