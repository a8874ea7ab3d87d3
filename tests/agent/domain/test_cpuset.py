"""BE CPU suppression, cpuset policy: CPU lists, the CPU choice on 1-, 2- and 4-socket topologies, the write order."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webhook.agent.domain.cgroup_limits import CgroupWrite
from webhook.agent.domain.cpu_suppress import suppress_milli
from webhook.agent.domain.cpuset import (
    BE_MIN_CPUS,
    CPUSET_FILE,
    CpuListError,
    CpusetFolder,
    ProcessorInfo,
    choose,
    cpu_count,
    cpuset_size,
    format_cpu_list,
    parse_cpu_list,
    plan_cpuset_writes,
    pools,
    spread,
)


# -- CPU lists ------------------------------------------------------------------------------------------------
def test_cpu_lists_read_and_print_as_the_kernel_does() -> None:
    assert parse_cpu_list("0-3,8\n") == {0, 1, 2, 3, 8}
    assert parse_cpu_list("") == frozenset() and parse_cpu_list("\n") == frozenset()
    assert format_cpu_list({8, 0, 1, 2, 3, 10, 11}) == "0-3,8,10-11"
    assert format_cpu_list([5]) == "5" and format_cpu_list([]) == ""
    assert (cpuset_size("0-3,8"), cpuset_size(""), cpuset_size("3-1"), cpuset_size("x")) == (5, 0, None, None)


@pytest.mark.parametrize("text", ["3-1", "x", "1-", "-1", "0-3,a"])
def test_a_bad_cpu_list_names_where_and_what(text: str) -> None:
    with pytest.raises(CpuListError, match=r"kubepods/besteffort/cpuset.cpus: .* in '"):
        parse_cpu_list(text, "kubepods/besteffort/cpuset.cpus")


# -- topologies ------------------------------------------------------------------------------------------------
def topology(sockets: int, cores: int, threads: int = 2) -> list[ProcessorInfo]:
    """Linux numbering: the first threads of every core of every socket, then the second threads (``cpu i`` and
    ``cpu i + sockets × cores`` are siblings); one NUMA node per socket; core IDs restart on each socket."""
    out = []
    per_thread = sockets * cores
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                out.append(ProcessorInfo(t * per_thread + s * cores + c, c, s, s))
    return sorted(out, key=lambda p: (p.node, p.socket, p.core, p.cpu))


def pod(name: str, qos: str, cpus: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "labels": {"koordinator.sh/qosClass": qos},
                         "annotations": {"scheduling.koordinator.sh/resource-status": json.dumps({"cpuset": cpus})}},
            "status": {"phase": phase}}


def node(reserved: str | None = None, system_qos: dict[str, Any] | None = None) -> dict[str, Any]:
    ann = {}
    if reserved is not None:
        ann["node.koordinator.sh/reservation"] = json.dumps({"reservedCPUs": reserved})
    if system_qos is not None:
        ann["node.koordinator.sh/system-qos-resource"] = json.dumps(system_qos)
    return {"metadata": {"name": "n1", "annotations": ann}}


ONE = topology(1, 4)       # cpus 0-3 first threads of cores 0-3, 4-7 their siblings
TWO = topology(2, 4)       # socket 0: cpus 0-3 (+8-11), socket 1: cpus 4-7 (+12-15)
FOUR = topology(4, 2)      # socket s: cpus 2s, 2s+1 (+ 8+2s, 9+2s)


@pytest.mark.parametrize(("name", "procs", "count", "expected"), [
    # one socket: the two threads of core 0, then a single CPU of the next core
    ("1-socket, 2", ONE, 2, {0, 4}),
    ("1-socket, 3", ONE, 3, {0, 4, 1}),
    ("1-socket, 8", ONE, 8, set(range(8))),
    # two sockets: a core's pair on each socket in turn
    ("2-socket, 4", TWO, 4, {0, 8, 4, 12}),
    ("2-socket, 5", TWO, 5, {0, 8, 4, 12, 1}),
    ("2-socket, 6", TWO, 6, {0, 8, 4, 12, 1, 9}),
    # four sockets: a pair on each of sockets 0, 1, 2, then one CPU of socket 3
    ("4-socket, 7", FOUR, 7, {0, 8, 2, 10, 4, 12, 6}),
    ("4-socket, 16", FOUR, 16, set(range(16))),
    ("too few", ONE, 9, set()),
])
def test_spread_over_sockets_pairs_first(name: str, procs: list[ProcessorInfo], count: int,
                                         expected: set[int]) -> None:
    got = spread(count, procs)
    assert set(got) == expected, name
    assert len(got) == len(set(got))


def test_spread_without_hyperthreads_takes_single_cpus_round_robin() -> None:
    procs = topology(2, 4, threads=1)       # cpus 0-3 on socket 0, 4-7 on socket 1, no siblings
    assert spread(3, procs) == [0, 4, 1]


def test_a_larger_numa_group_goes_first() -> None:
    procs = [p for p in TWO if p.cpu not in (0, 8)]     # socket 0 lost a core (held elsewhere)
    assert spread(2, procs) == [4, 12]


# -- how many -------------------------------------------------------------------------------------------------
def test_cpu_count_rounds_up_keeps_two_and_grows_by_a_tenth() -> None:
    assert cpu_count(2100, 16, 16) == 3
    assert cpu_count(-4000, 16, 16) == BE_MIN_CPUS == cpu_count(0, 16, 16) == cpu_count(1, 16, 16)
    assert cpu_count(16000, 2, 16) == 2 + 2            # ⌈16 × 10 %⌉ = 2 more per cycle
    assert cpu_count(16000, 2, 30) == 2 + 3
    assert cpu_count(16000, 0, 8) == BE_MIN_CPUS       # a tier holding nothing: the step never goes below 2
    assert cpu_count(1000, 16, 16) == 2                # a cut applies at once


def test_the_count_comes_from_the_cfs_quota_budget() -> None:
    # 8 CPUs × 65 % = 5200m, LS pods use 2500m, system 200m: 2500m -> 3 CPUs
    budget = suppress_milli(8000, 65, None, 4000.0, [(False, 2500.0), (True, 1300.0)], 0)
    assert budget.milli == 2500
    assert choose(budget.milli, frozenset(range(8)), 8, pools(ONE, [], None)).cpus == {0, 4, 1}


# -- which ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "procs", "pods", "nd", "budget", "held", "expected", "excluded"), [
    # the first pair is core 2's (cores 0 and 1 lost a thread), the single the first free CPU in core order
    ("1-socket, reserved 0-1", ONE, [], node("0-1"), 3000, 8, {2, 6, 4}, {0, 1}),
    ("1-socket, LSE on core 0", ONE, [pod("db", "LSE", "0,4")], None, 2000, 8, {1, 5}, {0, 4}),
    ("1-socket, floor of 2 despite LS load", ONE, [], None, -3000, 8, {0, 4}, set()),
    ("2-socket, LSE holds socket 0", TWO, [pod("db", "LSE", "0-3,8-11")], None, 4000, 16, {4, 12, 5, 13},
     set(range(4)) | set(range(8, 12))),
    ("2-socket, reserved + system QoS", TWO, [], node("0", {"cpuset": "4"}), 3000, 16, {1, 9, 12}, {0, 4}),
    ("2-socket, system QoS shared", TWO, [], node(None, {"cpuset": "4", "cpusetExclusive": False}), 2000, 16,
     {0, 8}, set()),
    ("2-socket, finished LSE pod holds nothing", TWO, [pod("done", "LSE", "0-3", phase="Succeeded")], None,
     2000, 16, {0, 8}, set()),
    # socket 0 all LSE, socket 1 half, socket 2 one CPU reserved: the fullest sockets (3, then 2) give a pair each
    ("4-socket, LSE + reserved", FOUR, [pod("a", "LSE", "0-1,8-9"), pod("b", "LSE", "2,10")], node("4"),
     4000, 16, {6, 14, 5, 13}, {0, 1, 8, 9, 2, 10, 4}),
    ("4-socket, pool smaller than asked", FOUR, [pod("a", "LSE", "0-7"), pod("b", "LSE", "8-13")], None,
     8000, 16, {14, 15}, set(range(14))),
    ("4-socket, grows by a tenth", FOUR, [], None, 16000, 2, {0, 8, 2, 10}, set()),
])
def test_choice(name: str, procs: list[ProcessorInfo], pods: list[dict[str, Any]], nd: dict[str, Any] | None,
                budget: int, held: int, expected: set[int], excluded: set[int]) -> None:
    pool = pools(procs, pods, nd)
    choice = choose(budget, frozenset(range(held)), len(procs), pool)
    assert choice.cpus == expected, name
    assert pool.excluded == excluded
    assert not choice.cpus & pool.excluded
    assert pool.allowed == {p.cpu for p in procs} - excluded
    assert len(choice.cpus) >= min(BE_MIN_CPUS, len(pool.allowed))


def test_lsr_cpus_are_shared_in_proportion() -> None:
    # LSR holds 4 of the 8 CPUs: half of what BE gets comes from them (Koordinator lets BE share LSR's CPUs)
    pool = pools(ONE, [pod("web", "LSR", "0-1,4-5")], None)
    assert {p.cpu for p in pool.lsr} == {0, 1, 4, 5}
    assert choose(4000, frozenset(range(8)), 8, pool).cpus == {0, 4, 2, 6}


def test_two_cpus_even_when_lse_pods_take_almost_everything() -> None:
    for procs in (ONE, TWO, FOUR):
        held_by_lse = format_cpu_list(p.cpu for p in procs[:-2])
        pool = pools(procs, [pod("big", "LSE", held_by_lse)], None)
        assert len(choose(-10000, frozenset(), len(procs), pool).cpus) == 2
        assert len(choose(-10000, frozenset(range(len(procs))), len(procs), pool).cpus) == 2


def test_malformed_annotations_are_named_and_skipped() -> None:
    bad = pod("db", "LSE", "0-x")
    broken = {"metadata": {"name": "n1", "annotations": {"node.koordinator.sh/reservation": "{"}}}
    pool = pools(ONE, [bad], broken)
    assert pool.excluded == frozenset()
    assert any("pod ns/db: annotation scheduling.koordinator.sh/resource-status: cpuset" in p and "'0-x'" in p
               for p in pool.problems), pool.problems
    assert any(p.startswith("node n1: annotation node.koordinator.sh/reservation: not JSON") for p in pool.problems)


# -- the write order ------------------------------------------------------------------------------------------
TREE = ("kubepods/besteffort", "kubepods/besteffort/podA", "kubepods/besteffort/podA/c1",
        "kubepods/besteffort/podA/c2", "kubepods/besteffort/podB")


def folders(cpus: str, **override: str) -> list[CpusetFolder]:
    return [CpusetFolder(p, parse_cpu_list(override.get(p.rsplit("/", 1)[-1], cpus))) for p in TREE]


def v1_kernel(start: list[CpusetFolder], writes: list[CgroupWrite]) -> dict[str, frozenset[int]]:
    """Apply ``writes`` as cgroup v1 does: a folder's CPUs must be within its parent's and hold its children's."""
    held = {f.path: f.cpus or frozenset() for f in start}
    for w in writes:
        assert w.file == CPUSET_FILE
        value = parse_cpu_list(w.value)
        parent = w.path.rsplit("/", 1)[0]
        if parent in held:
            assert value <= held[parent], f"EINVAL: {w.path} = {w.value} outside its parent's"
        for child, cpus in held.items():
            if child.rsplit("/", 1)[0] == w.path:
                assert cpus <= value, f"EBUSY: {w.path} = {w.value} drops a CPU of {child}"
        held[w.path] = value
    return held


def paths(writes: list[CgroupWrite]) -> list[tuple[str, str]]:
    return [(w.path.removeprefix("kubepods/besteffort").lstrip("/") or "tier", w.value) for w in writes]


def test_narrowing_goes_from_the_containers_up() -> None:
    start = folders("0-3")
    writes = plan_cpuset_writes(start, frozenset({0, 1}))
    assert paths(writes) == [("podB", "0-1"), ("podA/c2", "0-1"), ("podA/c1", "0-1"), ("podA", "0-1"),
                             ("tier", "0-1")]
    assert set(v1_kernel(start, writes).values()) == {frozenset({0, 1})}


def test_widening_goes_from_the_tier_down() -> None:
    start = folders("0-1")
    writes = plan_cpuset_writes(start, frozenset(range(4)))
    assert paths(writes) == [("tier", "0-3"), ("podA", "0-3"), ("podA/c1", "0-3"), ("podA/c2", "0-3"),
                             ("podB", "0-3")]
    assert set(v1_kernel(start, writes).values()) == {frozenset(range(4))}


def test_moving_to_other_cpus_widens_to_the_union_first() -> None:
    start = folders("0-1")
    writes = plan_cpuset_writes(start, frozenset({2, 3}))
    assert paths(writes) == [("tier", "0-3"), ("podA", "0-3"), ("podA/c1", "0-3"), ("podA/c2", "0-3"),
                             ("podB", "0-3"),
                             ("podB", "2-3"), ("podA/c2", "2-3"), ("podA/c1", "2-3"), ("podA", "2-3"), ("tier", "2-3")]
    assert set(v1_kernel(start, writes).values()) == {frozenset({2, 3})}


def test_nothing_is_written_where_the_cpus_are_already_right() -> None:
    assert plan_cpuset_writes(folders("0-1"), frozenset({0, 1})) == []
    # a new container the runtime created with the tier's old CPUs: only it, then nothing above it
    start = folders("0-1", c2="0-3")
    assert paths(plan_cpuset_writes(start, frozenset({0, 1}))) == [("podA/c2", "0-1")]
    assert plan_cpuset_writes([], frozenset({0})) == [] and plan_cpuset_writes(folders("0-1"), frozenset()) == []


def test_folders_without_a_cpuset_file_are_left_out() -> None:
    start = [CpusetFolder("kubepods/besteffort", frozenset(range(4))), CpusetFolder("kubepods/besteffort/podA", None)]
    assert paths(plan_cpuset_writes(start, frozenset({0, 1}))) == [("tier", "0-1")]


@pytest.mark.parametrize(("before", "after"), [("0-3", "1"), ("1", "0-3"), ("0,2", "1,3"), ("0-1", "1-2")])
def test_every_transition_is_accepted_by_cgroup_v1_at_every_step(before: str, after: str) -> None:
    start = folders(before)
    target = parse_cpu_list(after)
    assert set(v1_kernel(start, plan_cpuset_writes(start, target)).values()) == {target}
