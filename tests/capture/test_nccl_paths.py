"""Every place torch treats an NCCL group specially behaves the same traced as untraced.

One list, docs/tracer.md ("NCCL paths"), names each place; each test here covers one.
Without a GPU, ``workers/fake_nccl.py`` stands in for ``ProcessGroupNCCL`` (a gloo
backend whose NCCL-only Python methods record their calls) and
``workers/nccl_paths.py`` runs every path with 2 ranks, once untraced and once
traced: a path passes when both runs agree on its observable result and that result
is what torch does there. Groups the tracer cannot wrap are covered by
``workers/fail_open.py``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import polars as pl
import pytest
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup
from torch.distributed import distributed_c10d as c10d

from multirank import run_ranks
from syncpace.capture import log, process_group, torch_hooks
from syncpace.trace import load_trace

WORKERS = Path(__file__).parent / "workers"
WORLD = 2
ESTIMATED_BYTES = 13 * 4  # nccl_paths.ESTIMATED_NUMEL float32

# which code paths ran, never how long they took: they hold at any CPU load
pytestmark = [pytest.mark.multirank, pytest.mark.untimed]


def results_of(stdout: str) -> dict:
    line = next(x for x in stdout.splitlines() if x.startswith("RESULTS "))
    return json.loads(line.removeprefix("RESULTS "))["results"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{mode: {rank: results}} for the untraced and the traced run, and the trace."""
    out = tmp_path_factory.mktemp("nccl-paths")
    found = {}
    for mode in ("untraced", "traced"):
        ranks = run_ranks(WORKERS / "nccl_paths.py", WORLD, [mode, str(out / mode)], timeout=180)
        found[mode] = {r.rank: results_of(r.stdout) for r in ranks}
        if mode == "traced":
            for r in ranks:  # nothing fell back to untraced, nothing failed to record
                assert "syncpace:" not in r.stderr, r.stderr[-2000:]
    return found, load_trace(out / "traced")


def both(runs, path: str) -> dict[int, object]:
    """The path's result per rank, once checked to be the same traced and untraced."""
    found, _ = runs
    for rank in range(WORLD):
        assert found["traced"][rank][path] == found["untraced"][rank][path], (path, rank)
    return {rank: found["traced"][rank][path] for rank in range(WORLD)}


def group_of(trace, desc: str) -> str:
    names = [n for n, g in trace.meta[0]["groups"].items() if g.get("desc") == desc]
    assert len(names) == 1, (desc, trace.meta[0]["groups"])
    return names[0]


# Group creation -------------------------------------------------------------------


def test_group_creation_with_nccl_options(runs):
    """The caller's ProcessGroupNCCL.Options reach the backend, as torch hands them:
    their own fields kept (high-priority stream), the timeout overridden by the
    timeout argument, the default group's ranks empty, nothing to split from."""
    for created in both(runs, "create").values():
        assert created == [
            {
                "high_priority": True,
                "timeout_s": 1800.0,
                "global_ranks": [],
                "split_from": None,
                "split_color": None,
                "size": 2,
            }
        ]


def test_eager_init_binds_the_backends_to_the_device(runs):
    """init_process_group(device_id=cuda:0): the NCCL backend connects eagerly to that
    device, and every registration of the group's backends saw the group bound to it
    (C++ hands each backend its group's bound device as it registers it)."""
    for rank in range(WORLD):
        assert both(runs, "eager")[rank] == ["cuda:0"]
        assert both(runs, "registered_bound")[rank] == ["cuda:0"]
        assert both(runs, "identity")[rank]["bound"] == "cuda:0"


def test_a_new_group_splits_from_the_bound_default_group(runs):
    """Once the default group is bound, a new group's NCCL communicator is split from
    the default one (ncclCommSplit): members pass the source and their color,
    non-members take part with a no-color split. Traced members not splitting would
    leave non-members waiting in the split."""
    found = both(runs, "new_group_split_source")
    color = found[0]["color"]
    assert found[0]["member"] and found[0]["nocolor"] == []
    assert found[0]["init"] == [
        {
            "high_priority": False,
            "timeout_s": 1800.0,
            "global_ranks": [0],
            "split_from": True,
            "split_color": color,
            "size": 1,
        }
    ]
    assert not found[1]["member"] and found[1]["init"] == []
    assert found[1]["nocolor"] == ["cuda:0"]


def test_new_group_inherits_the_real_backend(runs):
    """new_group() without a backend takes the default group's from torch's record
    (_world.pg_map), which names the real backend, so options, timeout and the
    subgroup's own record are as untraced."""
    found = both(runs, "new_group")
    for rank in range(WORLD):
        assert found[rank]["init"][0]["global_ranks"] == [0, 1]
        assert found[rank]["init"][0]["split_from"] is True
        assert found[rank]["identity"]["pg_map"] == "cpu:nccl,cuda:nccl"
        assert found[rank]["identity"]["group_desc"] == "undefined"
        assert found[rank]["all_reduce"] == [3.0, 3.0]


def test_new_subgroups(runs):
    found = both(runs, "new_subgroups")
    for rank in range(WORLD):
        assert found[rank] == {
            "size": 1,
            "n": 2,
            "desc": "undefined",
            "all_reduce": [rank + 1.0] * 2,
        }


def test_debug_mode_wraps_each_backend(runs):
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: torch wraps each backend in a
    ProcessGroupWrapper (collective checks); a traced group's backends are wrapped too."""
    for found in both(runs, "debug_wrapper").values():
        assert found == {"backend": "_ProcessGroupWrapper", "all_reduce": [3.0, 3.0]}


# What torch reads back from a group -------------------------------------------------


def test_backend_names_and_configs(runs):
    """get_backend, get_backend_config, _world.pg_map and the Flight Recorder's group
    config name the real backend; the group and its backend name themselves NCCL."""
    for found in both(runs, "identity").values():
        assert found["get_backend"] == "cpu:nccl,cuda:nccl"
        assert found["get_backend_config"] == "cpu:nccl,cuda:nccl"
        assert found["pg_map"] == "cpu:nccl,cuda:nccl"
        assert found["pg_config"]["backend_config"] == "cpu:nccl,cuda:nccl"
        assert found["name"] == found["backend_name"] == "nccl"


def test_backend_lookups_by_device(runs):
    """_get_backend(device) finds the NCCL backend itself (isinstance checks, the
    Flight Recorder's uid), in the devices torch lists in its order."""
    for found in both(runs, "identity").values():
        assert found["cuda_backend"] == "FakeNCCL" and found["one_backend"]
        assert found["uid_is_backends"]
        assert found["devices"] == ["cuda", "cpu"]
        assert found["object_device"] == found["default_device"] == "cpu"
        assert found["is_process_group"]


def test_group_names_store_and_no_new_group_method(runs):
    """The group resolves by its name to itself (functional collectives, symmetric
    memory), has its store, and has no ``new_group`` method, which torch would call
    instead of creating subgroups itself."""
    for found in both(runs, "identity").values():
        assert found["group_name"] == "0" and found["group_desc"] == "default_pg"
        assert found["registered_name"] and found["resolves_to_itself"]
        assert found["store"] == "PrefixStore"
        assert found["has_new_group"] is False


def test_sequence_numbers(runs):
    """_get_sequence_number_for_group counts the backend's collectives, as untraced."""
    for found in both(runs, "sequence").values():
        assert found == [1, 4]


def test_timeouts_reach_the_nccl_backend(runs):
    """_set_pg_timeout and _add_ephemeral_timeout_for_all_pgs find the NCCL backends by
    type and set them (once per group that holds one)."""
    found = both(runs, "timeouts")
    for rank in range(WORLD):
        assert found[rank]["set"] == [77.0]
        assert set(found[rank]["ephemeral"]) == {5.0}
    assert len(found[0]["ephemeral"]) == len(found[1]["ephemeral"]) + 1  # rank 0's [0] group


def test_completion_hook_goes_to_the_default_backend(runs):
    """_register_on_completion_hook and _has_hooks reach the group's default backend
    (gloo under the fake: the same refusal traced and untraced)."""
    for rank in range(WORLD):
        assert both(runs, "hook")[rank].startswith("EXC RuntimeError: Only ProcessGrouppNCCL")
        assert both(runs, "has_hooks")[rank] is False


# Groups made from groups ------------------------------------------------------------


def test_split_group(runs):
    """split_group (ncclCommSplit): the child as untraced (description from the
    parent's split count, bound device, backend, store, its own name) and traced."""
    found = both(runs, "split_group")
    for rank in range(WORLD):
        assert found[rank] == {
            "size": 1,
            "desc": "default_pg:split:7",
            "bound": "cuda:0",
            "backend": "cpu:nccl,cuda:nccl",
            "config": "cpu:nccl,cuda:nccl",
            "store": "PrefixStore",
            "resolves_to_itself": True,
            "sequence": 0,
            "all_reduce": [rank + 1.0] * 2,
        }
    _, trace = runs
    split = group_of(trace, "default_pg:split:7")
    events = trace.events.filter(pl.col("group") == split)
    assert events.filter(pl.col("rank") == 0)["op"].to_list() == ["all_reduce"]


def test_device_mesh_splits_its_dimensions(runs):
    """With the default group bound, DeviceMesh makes a dimension by split_group; the
    dimension spanning the world is the default group. Both traced, named."""
    found = both(runs, "device_mesh")
    for rank in range(WORLD):
        assert found[rank]["dp"] == {
            "size": 2,
            "desc": "default_pg",
            "is_default": True,
            "all_reduce": [3.0, 3.0],
        }
        assert found[rank]["tp"]["desc"] == "mesh_tp" and found[rank]["tp"]["size"] == 1
    _, trace = runs
    tp = group_of(trace, "mesh_tp")
    assert trace.meta[0]["groups"][tp]["mesh_dims"] == ["tp"]
    # rank 0's own tp group (each rank's is another): its one all-reduce
    assert trace.events.filter(pl.col("group") == tp)["rank"].to_list() == [0]


def test_shrink_group(runs):
    """shrink_group (ncclCommShrink): the shrunk subgroup as untraced, and traced."""
    found = both(runs, "shrink_group")
    assert found[1] is None  # the excluded rank takes no part
    assert found[0]["calls"] == [[[1], 0]]
    assert found[0]["size"] == 1 and found[0]["desc"].endswith(":shrunk")
    assert found[0]["devices"] == ["cuda"] and found[0]["bound"] == "cuda:0"
    assert found[0]["config"] == "cpu:nccl,cuda:nccl" and found[0]["registered"]
    _, trace = runs
    assert trace.meta[0]["groups"][found[0]["group_name"]]["ranks"] == [0]


# Collectives on special paths -------------------------------------------------------


def test_coalescing_manager(runs):
    """_coalescing_manager's fast path (one allreduce_coalesced for the block)."""
    for found in both(runs, "coalescing").values():
        assert found == {"works": 1, "values": [[3.0] * 3, [3.0] * 5]}


def test_batch_isend_irecv(runs):
    """batch_isend_irecv: without coalescing support torch's one-by-one path (the
    coalesced one is covered by test_coalescing.py)."""
    found = both(runs, "batch_isend_irecv")
    assert found[0] == {"works": 2, "received": [2.0] * 4}
    assert found[1] == {"works": 2, "received": [1.0] * 4}
    _, trace = runs
    p2p = trace.events.filter(pl.col("op").is_in(["send", "recv"]))
    assert sorted(p2p.group_by("rank", "op").len().rows()) == [
        (0, "recv", 1),
        (0, "send", 1),
        (1, "recv", 1),
        (1, "send", 1),
    ]


def test_fsdp2_reduce_scatter_path(runs):
    """FSDP2 (fully_shard) trains the same traced: its all-gathers and reduce-scatters
    go through the traced group."""
    found = both(runs, "fsdp2")
    assert found[0] == found[1] and len(found[0]) == 4
    _, trace = runs
    ops = set(trace.events.filter(pl.col("group") == "0")["op"].to_list())
    assert {"all_gather", "reduce_scatter"} <= ops


def test_fsdp2_allocates_from_the_backend(runs):
    """FSDP2's ProcessGroupAllocMixin asks the group's backend for its buffers."""
    for found in both(runs, "fsdp_alloc").values():
        assert found == {"shape": [6], "calls": [[6, "torch.float32", "cuda"]]}


def test_time_estimator_runs_nothing_traced(runs):
    """Inside _time_estimator NCCL only estimates: the estimate is the backend's, and
    no event claims the call ran."""
    for found in both(runs, "time_estimator").values():
        assert found["estimated"] == 4.5
    _, trace = runs
    assert trace.events.filter(pl.col("bytes") == ESTIMATED_BYTES).height == 0


def test_symmetric_memory_sees_a_group_with_a_store(runs):
    """C++ symmetric memory finds the group by name and reads its store; during its
    rendezvous the name resolves to a group holding one, and to the traced group after."""
    for found in both(runs, "symmetric_memory").values():
        assert found == {"handle": "handle", "during": [["ProcessGroup", True, 2]], "after": True}


# Teardown ---------------------------------------------------------------------------


def test_destroy_waits_for_completion_hooks(runs):
    """destroy_process_group waits for a group's completion hooks to finish (torch does
    only for type(pg) is ProcessGroup): once, traced and untraced."""
    for found in both(runs, "destroy_waits_for_hooks").values():
        assert found == 1


def test_abort(runs):
    """_abort_process_group: a subgroup is aborted and forgotten; the world is aborted
    inside NCCL's group start/end, and the trace closed before it."""
    for rank in range(WORLD):
        assert both(runs, "abort_subgroup")[rank] is False
        assert both(runs, "abort_world")[rank] == {
            "calls": ["group_start", "group_end"],
            "initialized": False,
        }
    _, trace = runs
    assert {m["closed_by"] for m in trace.meta.values()} == {"destroy"}


# Failing open -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fail_open(tmp_path_factory):
    out = tmp_path_factory.mktemp("fail-open")
    ranks = run_ranks(WORKERS / "fail_open.py", WORLD, [str(out)], timeout=180)
    lines = {r.rank: [x for x in r.stderr.splitlines() if x.startswith("syncpace:")] for r in ranks}
    return {r.rank: results_of(r.stdout) for r in ranks}, lines, load_trace(out)


def untraced_lines(lines: list[str]) -> list[str]:
    return [x for x in lines if "runs untraced" in x]


def test_a_group_that_cannot_be_prepared_runs_untraced(fail_open):
    """Rank 1 cannot prepare its default group: torch's own path builds it, untraced,
    on the same store keys, so it meets rank 0's traced group in every collective."""
    found, lines, trace = fail_open
    assert found[0]["default"] == ["TracingProcessGroup", [3.0, 3.0]]
    assert found[1]["default"] == ["ProcessGroup", [3.0, 3.0]]
    assert found[1]["default_again"] == found[0]["default_again"] == [3.0, 3.0]
    assert [x for x in lines[1] if "process group 0 " in x] == [
        "syncpace: process group 0 runs untraced (as does any other failing the same way): "
        "cannot prepare its backends: forced failure"
    ]
    assert trace.ranks == [0]  # rank 1 is not traced at all


def test_a_group_that_cannot_be_wrapped_runs_untraced_with_one_warning(fail_open):
    """The wrapper's constructor raises for two groups: both run untraced, one warning
    per rank names why; the next group is traced again."""
    found, lines, trace = fail_open
    for rank in range(WORLD):
        assert found[rank]["unwrapped"] == [
            ["ProcessGroup", "1", [3.0, 3.0]],
            ["ProcessGroup", "2", [3.0, 3.0]],
        ]
        assert found[rank]["rewrapped"] == ["TracingProcessGroup", "3", [3.0, 3.0]]
        wrap = [x for x in untraced_lines(lines[rank]) if "process group 1 " in x]
        assert wrap == [
            "syncpace: process group 1 runs untraced (as does any other failing the same "
            "way): forced failure"
        ]
        assert not any("process group 2 " in x for x in lines[rank])
    groups = set(trace.events["group"].to_list())
    assert {"0", "3"} <= groups and not {"1", "2"} & groups


def test_a_split_that_cannot_be_wrapped_is_the_plain_split(fail_open):
    found, lines, trace = fail_open
    assert found[0]["split"] == ["ProcessGroup", 2, "split-unwrapped", [2.0, 2.0]]
    assert [x for x in lines[0] if "split-unwrapped" in x] == [
        "syncpace: process group split-unwrapped runs untraced (as does any other failing "
        "the same way): forced failure"
    ]
    assert "split-unwrapped" not in set(trace.events["group"].to_list())
    assert len(untraced_lines(lines[0])) == 2 and len(untraced_lines(lines[1])) == 2


# CUDA-graph capture (in this process: no group is created through torch) ------------


class Recorder:
    """What TracingProcessGroup asks of the tracer, counting the calls it records."""

    rank = step = arrival_step = 0
    paused = False
    device_timeline = None  # host times only

    def __init__(self) -> None:
        self.begun = 0

    def now(self) -> int:
        return 0

    def begin(self, row: tuple) -> int:
        self.begun += 1
        return -1

    def completed(self, work, row, token):
        return ("recorded", work)

    def on_group(self, *args) -> None:
        pass


def test_calls_captured_into_a_cuda_graph_pass_through_untraced(monkeypatch, caplog):
    """Completion cannot be observed while a CUDA stream is captured (querying an
    event there is illegal) and a captured call runs at each replay, not at its call:
    such calls go to the backend untouched, with one warning."""
    store = dist.HashStore()
    inner = ProcessGroup(store, 0, 1)
    gloo = dist.ProcessGroupGloo(dist.PrefixStore("cpu/", store), 0, 1)
    gloo_type = ProcessGroup.BackendType.GLOO
    for device in ("cpu", "cuda"):
        inner._register_backend(torch.device(device), gloo_type, gloo)
    inner._set_default_backend(gloo_type)
    capturing = [True]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(log, "_warned", set())
    recorder = Recorder()
    pg = process_group.wrap_group(
        inner,
        recorder,
        backend_name="nccl",
        global_ranks=[0],
        types={"cpu": gloo_type, "cuda": gloo_type},
        default_type=gloo_type,
    )
    with caplog.at_level(logging.WARNING, logger="syncpace"):
        for _ in range(2):
            t = torch.ones(3)
            work = pg.allreduce([t])
            assert isinstance(work, dist.Work)  # the backend's own work, not wrapped
            work.wait()
            assert t.tolist() == [1.0, 1.0, 1.0]
        assert recorder.begun == 0
        capturing[0] = False
        assert pg.allreduce([torch.ones(3)])[0] == "recorded"
        assert recorder.begun == 1
    assert [r.getMessage() for r in caplog.records] == [
        "syncpace: collectives captured into a CUDA graph are not traced"
    ]


def test_groups_on_torchcomms_are_left_to_torch(monkeypatch, caplog):
    """With TorchComms enabled torch builds its backends (not gloo's or NCCL's): the
    group creation goes to torch unchanged, with one warning."""
    asked = []

    def helper(
        group_size,
        group_rank,
        global_ranks_in_group,
        backend,
        store,
        group_name,
        backend_options=None,
        timeout=None,
        pg_tag=None,
        device_id=None,
        group_desc=None,
    ):
        asked.append(str(backend))
        return "group", None

    monkeypatch.setattr(c10d, "_use_torchcomms_enabled", lambda: True)
    monkeypatch.setattr(log, "_warned", set())
    wrapped = torch_hooks._wrap_helper(helper)
    with caplog.at_level(logging.WARNING, logger="syncpace"):
        for name in ("7", "8"):
            assert wrapped(2, 0, [0, 1], "nccl", None, name) == ("group", None)
    assert asked == ["nccl", "nccl"]
    assert [r.getMessage() for r in caplog.records] == [
        "syncpace: process groups on TorchComms are not traced"
    ]
