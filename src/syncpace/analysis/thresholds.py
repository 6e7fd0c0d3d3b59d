"""Thresholds of the diagnosis: every judgement the detectors make is a parameter here.

Metrics never read these; detectors do. ``syncpace diagnose`` exposes each field as a
flag, so a user can tighten or relax any rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from syncpace.config import check_numbers, setting
from syncpace.errors import ConfigError


@dataclass(kw_only=True, slots=True, frozen=True)
class Thresholds:
    critical_cost: float = setting(
        0.10,
        "A cause whose cost (its replayed saving, less the replay's error) is at least "
        "this fraction of iteration time is critical.",
    )
    warning_cost: float = setting(
        0.05,
        "A cause whose cost (its replayed saving, less the replay's error) is at least "
        "this fraction of iteration time is a warning: the reporting threshold, at or "
        "above which the verdict names it; below it, info.",
    )
    straggler_min_share: float = setting(
        0.02, "A late rank must arrive late by at least this fraction of the iteration time."
    )
    straggler_factor: float = setting(
        3.0, "A late rank's median lateness must exceed the typical rank's by this factor."
    )
    late_cpu_share: float = setting(
        0.5,
        "On device time, a late rank whose host enqueue is late (against the typical "
        "rank's) by at least this share of its device lateness, its device waiting on it, "
        "has a late CPU; one whose host is on time or early has a slow GPU.",
    )
    late_cpu_run_ahead_us: float = setting(
        1000.0,
        "On device time, a late rank whose host is late and whose median CPU run-ahead "
        "(device reaching a call after the host issued it) exceeds the typical rank's by "
        "at most this much has a device waiting for its CPU: a late CPU (us).",
    )
    locality_node_fraction: float = setting(
        0.75, "A local rank late on at least this fraction of nodes (>= 2) is a locality pattern."
    )
    sync_wait_share: float = setting(
        0.10,
        "Without a replay, the mean wait for the last arriver (share of the iteration) that "
        "is sync amplification; with one, the jitter's saving is judged by warning_cost, and "
        "stays its own once the stragglers are fixed when it still saves this much.",
    )
    sync_spread: float = setting(
        0.5, "Fraction of ranks that must each arrive last in some iterations (transient jitter)."
    )
    stall_min_share: float = setting(
        1.0,
        "A gap this many iterations beyond its rank's steady one is a stall (in a run of "
        "fewer steps than 1 / warning_cost, warning_cost x its steps: what saves that much).",
    )
    stall_max_steps: float = setting(
        0.05, "Stalls in at most this share of steps (or 2) are one-off events, not jitter."
    )
    stall_tail_factor: float = setting(
        5.0,
        "A long gap this many times the longest excess of the other gaps is a one-off stall "
        "even where jitter recurs; shorter, it may be that jitter's tail.",
    )
    lag_min_share: float = setting(
        0.02,
        "A rank whose cross-node collectives end this share of the iteration late sits "
        "next to a slow link.",
    )
    slow_link_rate_share: float = setting(
        0.9,
        "A host link the fabric's counters show set below this share of the fastest host "
        "link's rate is the slow link a lagging rank points to; where no rank lags, it is "
        "named when also busier than every peer's by the same margin.",
    )
    fabric_inflation: float = setting(
        1.5, "Median transfer time over the run's own best at that size that means contention."
    )
    fabric_episode_share: float = setting(
        0.25,
        "Share of cross-node transfers in episodes of consecutive inflated ones that is "
        "contention too, when it covers less than half the run.",
    )
    fabric_skew_correlation: float = setting(
        0.5, "A late rank's own lateness correlated with transfer time above this is no fabric."
    )
    foreign_inflation: float = setting(
        1.2,
        "Cross-node transfers this much slower while the counters show traffic that is not "
        "the job's on its links (against the clean intervals, else the links' capacity) "
        "are contention; less slower, they are where their replayed cost is reported.",
    )
    latency_knee_bytes: int = setting(
        1 << 20, "Messages below this many bytes are latency-bound (the alpha-beta knee)."
    )
    latency_min_per_step: int = setting(
        32, "Collectives below the knee per iteration and rank that call for bucketing."
    )
    latency_min_share: float = setting(
        0.02, "Share of the iteration spent in sub-knee collectives that makes them matter."
    )
    bandwidth_near_best: float = setting(
        0.8,
        "Large collectives whose median busbw is this close to the run's best are at link rate.",
    )
    bandwidth_min_exposed: float = setting(
        0.05, "Exposed communication share of the iteration above which bandwidth matters."
    )
    overlap_min_exposed: float = setting(
        0.05, "Exposed communication share of the iteration above which overlap matters."
    )
    overlap_max_ratio: float = setting(
        0.5, "Overlapped fraction of communication below which overlap is poor."
    )
    comm_share: float = setting(
        0.25, "Network share of the iteration above which a job is communication-dominated."
    )
    link_gbps: float = setting(
        0.0, "Link rate in GB/s for bandwidth judgements; 0 uses the run's own best busbw."
    )
    link_alpha_us: float = setting(
        0.0, "Latency per collective at the link rate (us), for the link-rate what-if."
    )
    clock_trust_factor: float = setting(
        1.0, "Skews below this times the clock uncertainty are not trustworthy."
    )
    hang_wait_s: float = setting(
        60.0,
        "Ranks waiting in a call this long are hung, even where no stall record or "
        "failure says so (a trace that ended with calls pending).",
    )
    min_steps: int = setting(
        3, "Fewer iterations than this (after warm-up) are too few to judge a run healthy."
    )
    confident_steps: int = setting(
        20,
        "Iterations (after warm-up) a finding needs for its full confidence; with n fewer, "
        "its confidence is scaled by sqrt(n / this).",
    )
    host_loss_ratio: float = setting(
        1e-4, "Share of packets dropped or TCP segments retransmitted on a host that is named."
    )
    link_peak_utilisation: float = setting(
        0.95, "NIC utilisation (in 100 ms windows) at or above which a link is saturated."
    )
    gpu_throttle_share: float = setting(
        0.1, "Share of the run a GPU spent power- or thermally throttled that is named."
    )
    cpu_throttle_share: float = setting(
        0.1,
        "Share of the run a host's CPU limit (its cgroup quota) held the job's ranks "
        "throttled at which the host is starved of CPU, whatever the other hosts show.",
    )
    cpu_wait_share: float = setting(
        0.25,
        "Share of the time a host's sampled rank could run that it waited in the run "
        "queue for a CPU at which the host is starved of CPU, whatever the other hosts "
        "show (a one-host job has no other to compare with).",
    )
    cpu_explains_share: float = setting(
        0.8,
        "Where each rank's waiting for a CPU is measured on its own: a late rank whose "
        "main thread waited for a CPU, beyond the faster half of the ranks, at least this "
        "share of its extra compute per iteration is late by its host's CPU (CPU "
        "starvation), not a straggler; below it, by its own doing. Measured on a real "
        "two-rank job beside two busy processes: a rank capped by its cgroup waited "
        "1.4-1.7 times its extra compute, a rank sleeping longer in its own code 0-0.5 "
        "times (its waiting is not all in its extra time).",
    )
    straggler_steady_t: float = setting(
        3.5,
        "Where each rank's waiting for a CPU is measured on its own: a rank whose compute "
        "over the other ranks' median in the step averages at least this many standard "
        "errors above zero, by straggler_min_share of the iteration on average, and whose "
        "waiting for a CPU does not explain it, is a straggler though not late by the "
        "margin in each half.",
    )

    def __post_init__(self) -> None:
        check_numbers(
            self,
            critical_cost="[0, 1]",
            warning_cost="[0, 1]",
            straggler_min_share="[0, 1]",
            straggler_factor="[1, 1000]",
            late_cpu_share="[0, 1]",
            late_cpu_run_ahead_us="[0, 1000000]",
            locality_node_fraction="[0, 1]",
            sync_wait_share="[0, 1]",
            sync_spread="[0, 1]",
            stall_min_share="[0, 1000]",
            stall_max_steps="[0, 1]",
            stall_tail_factor="[1, 1000]",
            lag_min_share="[0, 1]",
            slow_link_rate_share="[0, 1]",
            fabric_inflation="[1, 1000]",
            fabric_episode_share="(0, 1]",
            fabric_skew_correlation="[0, 1]",
            foreign_inflation="[1, 1000]",
            latency_knee_bytes="[0, 1099511627776]",
            latency_min_per_step="[0, 1000000000]",
            latency_min_share="[0, 1]",
            bandwidth_near_best="[0, 1]",
            bandwidth_min_exposed="[0, 1]",
            overlap_min_exposed="[0, 1]",
            overlap_max_ratio="[0, 1]",
            comm_share="[0, 1]",
            link_gbps="[0, 1000000]",
            link_alpha_us="[0, 1000000]",
            clock_trust_factor="[0, 1000]",
            hang_wait_s="(0, 86400]",
            min_steps="[0, 1000000000]",
            confident_steps="[1, 1000000000]",
            host_loss_ratio="[0, 1]",
            link_peak_utilisation="[0, 1]",
            gpu_throttle_share="[0, 1]",
            cpu_throttle_share="[0, 1]",
            cpu_wait_share="[0, 1]",
            cpu_explains_share="[0, 1000]",
            straggler_steady_t="[0, 1000]",
        )
        if self.warning_cost > self.critical_cost:
            raise ConfigError(
                f"warning_cost ({self.warning_cost}) must not exceed critical_cost "
                f"({self.critical_cost})"
            )
