"""BE batch resources as cgroup limits: what a pod asks for, the kernel's units, the order of writes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from webhook.agent.domain.cgroup_limits import (
    MAX_SHARES,
    UNLIMITED,
    CgroupWrite,
    Current,
    Folder,
    Limits,
    cfs_quota,
    container_folder,
    container_ids,
    cpu_shares,
    cpu_weight,
    page_floor,
    parse_current,
    plan_writes,
    pod_limits,
)

MI, GI = 2**20, 2**30
PAGE = 4096


def container(name: str, limits: dict[str, str] | None = None, requests: dict[str, str] | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if limits is not None:
        res["limits"] = limits
    if requests is not None:
        res["requests"] = requests
    return {"name": name, "resources": res}


def be_pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (),
           annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "uid": "u", "labels": {"koordinator.sh/qosClass": "BE"},
                         "annotations": annotations or {}},
            "spec": {"containers": list(containers), "initContainers": list(init)}}


BATCH = {"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "1Gi"}


# -- what a pod asks for -------------------------------------------------------------------------------
def test_container_and_pod_levels_from_resources() -> None:
    limits = pod_limits(be_pod(container("a", BATCH, {"kubernetes.io/batch-cpu": "500"}),
                               container("b", {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "512Mi"})))
    assert limits.containers == {"a": Limits(1500, 500, GI), "b": Limits(2000, 2000, 512 * MI)}  # request := limit
    assert limits.pod == Limits(3500, 2500, GI + 512 * MI)


def test_a_container_without_a_batch_limit_leaves_the_pod_unlimited() -> None:
    limits = pod_limits(be_pod(container("a", BATCH), container("b", None, {"kubernetes.io/batch-cpu": "100"})))
    assert limits.containers["b"] == Limits(None, 100, None)
    assert limits.pod == Limits(None, 1600, None)


def test_init_containers_count_as_the_kubelet_counts_them() -> None:
    big_init = container("init", {"kubernetes.io/batch-cpu": "4k", "kubernetes.io/batch-memory": "2Gi"})
    limits = pod_limits(be_pod(container("a", BATCH), init=(big_init,)))
    assert limits.pod == Limits(4000, 4000, 2 * GI)           # max(init, sum of containers)
    no_limit_init = container("init", None, {"kubernetes.io/batch-cpu": "10"})
    assert pod_limits(be_pod(container("a", BATCH), init=(no_limit_init,))).pod.cpu_limit_milli is None


def test_the_extended_resource_spec_annotation_wins() -> None:
    spec = {"containers": {"a": {"limits": {"kubernetes.io/batch-cpu": "700", "kubernetes.io/batch-memory": "256Mi"},
                                 "requests": {"kubernetes.io/batch-cpu": "300"}}}}
    pod = be_pod(container("a", BATCH), annotations={"node.koordinator.sh/extended-resource-spec": json.dumps(spec)})
    assert pod_limits(pod).containers["a"] == Limits(700, 300, 256 * MI)
    broken = be_pod(container("a", BATCH), annotations={"node.koordinator.sh/extended-resource-spec": "{nope"})
    assert pod_limits(broken).containers["a"] == Limits(1500, 1500, GI)   # unreadable: the container's resources


def test_native_resources_are_not_batch_limits() -> None:
    limits = pod_limits(be_pod(container("a", {"cpu": "1", "memory": "1Gi"})))
    assert limits.pod.empty and limits.containers["a"].empty


# -- units -----------------------------------------------------------------------------------------------
def test_kubelet_conversions() -> None:
    assert cfs_quota(1500, 100000) == 150000
    assert cfs_quota(5, 100000) == 1000                       # the kernel refuses less than 1 ms
    assert cfs_quota(1500, 50000) == 75000
    assert (cpu_shares(0), cpu_shares(1), cpu_shares(1000), cpu_shares(10**9)) == (2, 2, 1024, MAX_SHARES)
    assert (cpu_weight(2), cpu_weight(1024), cpu_weight(MAX_SHARES)) == (1, 39, 10000)
    assert page_floor(GI + 100, PAGE) == GI


@pytest.mark.parametrize("version,texts,current", [
    (1, {"cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n", "cpu.shares": "2\n",
         "memory.limit_in_bytes": "9223372036854771712\n"}, Current(UNLIMITED, 100000, 2, UNLIMITED)),
    (1, {"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000", "memory.limit_in_bytes": "1073741824"},
     Current(50000, 100000, None, GI)),
    (2, {"cpu.max": "max 100000\n", "cpu.weight": "1\n", "memory.max": "max\n"}, Current(UNLIMITED, 100000, 1, UNLIMITED)),
    (2, {"cpu.max": "150000 100000\n", "memory.max": "1073741824\n"}, Current(150000, 100000, None, GI)),
    (2, {"cpu.max": "garbage", "memory.max": None}, Current(None, None, None, None)),
])
def test_parse_current(version: int, texts: dict[str, str | None], current: Current) -> None:
    assert parse_current(version, texts) == current


def test_container_folder_names() -> None:
    assert container_folder("containerd://abc", "systemd") == "cri-containerd-abc.scope"
    assert container_folder("containerd://abc", "cgroupfs") == "abc"
    assert container_folder("cri-o://abc", "systemd") == "crio-abc.scope"
    assert container_folder("docker://abc", "cgroupfs") == "abc"
    assert container_folder("containerd://../x", "cgroupfs") is None
    assert container_folder("weird", "systemd") is None
    pod = {"status": {"containerStatuses": [{"name": "a", "containerID": "containerd://1"}, {"name": "b"}],
                      "initContainerStatuses": [{"name": "i", "containerID": "containerd://2"}]}}
    assert container_ids(pod) == {"i": "containerd://2", "a": "containerd://1"}


# -- the plan --------------------------------------------------------------------------------------------
V1_FRESH = Current(UNLIMITED, 100000, 2, UNLIMITED)
V2_FRESH = Current(UNLIMITED, 100000, 1, UNLIMITED)


def pod_folder(name: str, limits: Limits, current: Current, *children: Folder, version: int = 1) -> Folder:
    return Folder(f"cpu/{name}" if version == 1 else name, f"memory/{name}" if version == 1 else name, current,
                  limits, None, children)


def test_v2_writes_and_nothing_when_in_place() -> None:
    ctr = pod_folder("pod/c", Limits(1500, 500, GI), V2_FRESH, version=2)
    pod = pod_folder("pod", Limits(1500, 500, GI + 1), V2_FRESH, ctr, version=2)
    writes = plan_writes(2, [pod], PAGE)
    assert writes == [
        CgroupWrite("pod", "cpu.weight", "20"), CgroupWrite("pod/c", "cpu.weight", "20"),
        CgroupWrite("pod/c", "cpu.max", "150000 100000"), CgroupWrite("pod/c", "memory.max", str(GI)),
        CgroupWrite("pod", "cpu.max", "150000 100000"), CgroupWrite("pod", "memory.max", str(GI)),
    ]
    done = Current(150000, 100000, 20, GI)
    same = pod_folder("pod", Limits(1500, 500, GI), done, pod_folder("pod/c", Limits(1500, 500, GI), done, version=2),
                      version=2)
    assert plan_writes(2, [same], PAGE) == []


def test_unreadable_files_are_not_written() -> None:
    pod = pod_folder("pod", Limits(1500, 500, GI), Current(None, None, None, None))
    assert plan_writes(1, [pod], PAGE) == []


def test_v1_suppression_lowers_children_first_and_restores_them_parent_first() -> None:
    c = pod_folder("be/pod/c", Limits(3000, 3000, None), Current(300000, 100000, 3072, UNLIMITED))
    p = pod_folder("be/pod", Limits(3000, 3000, None), Current(300000, 100000, 3072, UNLIMITED), c)
    down = plan_writes(1, [Folder("cpu/be", None, Current(UNLIMITED, 100000), quota=100000, children=(p,))], PAGE)
    assert [(w.path, w.value) for w in down] == [("cpu/be/pod/c", "100000"), ("cpu/be/pod", "100000"),
                                                 ("cpu/be", "100000")]
    c2 = pod_folder("be/pod/c", Limits(3000, 3000, None), Current(100000, 100000, 3072, UNLIMITED))
    p2 = pod_folder("be/pod", Limits(3000, 3000, None), Current(100000, 100000, 3072, UNLIMITED), c2)
    up = plan_writes(1, [Folder("cpu/be", None, Current(100000, 100000), quota=UNLIMITED, children=(p2,))], PAGE)
    assert [(w.path, w.value) for w in up] == [("cpu/be", "-1"), ("cpu/be/pod", "300000"), ("cpu/be/pod/c", "300000")]


def test_v2_suppression_does_not_touch_the_pods() -> None:
    p = pod_folder("be/pod", Limits(3000, None, None), Current(300000, 100000, 1, UNLIMITED), version=2)
    writes = plan_writes(2, [Folder("be", None, Current(UNLIMITED, 100000), quota=100000, children=(p,))], PAGE)
    assert writes == [CgroupWrite("be", "cpu.max", "100000 100000")]


# A model of the kernel's cgroup v1 CFS rule: a write is refused when any limited folder would hold more than
# its nearest limited ancestor (the kernel compares quota/period ratios). Any plan must go through it.
def _ratio(q: int, p: int) -> int:
    return (q << 20) // p


class _V1Kernel:
    def __init__(self, quotas: dict[str, int], period: int = 100000) -> None:
        self.quotas, self.period = dict(quotas), period

    def _valid(self, quotas: dict[str, int]) -> bool:
        for path, q in quotas.items():
            if q == UNLIMITED:
                continue
            parent = path.rsplit("/", 1)[0] if "/" in path else None
            while parent is not None and quotas.get(parent, UNLIMITED) == UNLIMITED:
                parent = parent.rsplit("/", 1)[0] if "/" in parent else None
            if parent is not None and _ratio(q, self.period) > _ratio(quotas[parent], self.period):
                return False
        return True

    def write(self, path: str, value: int) -> None:
        after = {**self.quotas, path: value}
        if not self._valid(after):
            raise OSError(22, f"EINVAL writing {value} to {path}")
        self.quotas = after


limit = st.one_of(st.just(UNLIMITED), st.integers(1, 64).map(lambda n: n * 25000))


@settings(max_examples=300, deadline=None)
@given(be_quota=limit, suppress=st.one_of(st.none(), limit), pods=st.lists(
    st.tuples(limit, st.one_of(st.none(), st.integers(1, 16).map(lambda n: n * 250)),
              st.lists(st.tuples(limit, st.one_of(st.none(), st.integers(1, 8).map(lambda n: n * 250))), max_size=3)),
    max_size=4))
def test_v1_plans_are_accepted_by_the_kernel_at_every_step(be_quota: int, suppress: int | None,
                                                           pods: list[Any]) -> None:
    quotas = {"be": be_quota}
    folders = []
    for i, (pod_q, pod_ask, ctrs) in enumerate(pods):
        children = []
        for j, (c_q, c_ask) in enumerate(ctrs):
            quotas[f"be/p{i}/c{j}"] = c_q
            children.append(Folder(f"be/p{i}/c{j}", None, Current(c_q, 100000), Limits(c_ask)))
        quotas[f"be/p{i}"] = pod_q
        folders.append(Folder(f"be/p{i}", None, Current(pod_q, 100000), Limits(pod_ask), children=tuple(children)))
    kernel = _V1Kernel(quotas)
    assume(kernel._valid(quotas))  # else the kernel could never have reached this state
    writes = plan_writes(1, [Folder("be", None, Current(be_quota, 100000), quota=suppress, children=tuple(folders))],
                         PAGE)
    for w in writes:
        kernel.write(w.path, int(w.value))        # raises where the real kernel says EINVAL
    final_be = kernel.quotas["be"]
    assert final_be == (be_quota if suppress is None else suppress)
    for i, (_, pod_ask, ctrs) in enumerate(pods):
        # Never above what the pod asked for; exactly that unless a limited parent forbids it.
        for path, ask in [(f"be/p{i}", pod_ask)] + [(f"be/p{i}/c{j}", c[1]) for j, c in enumerate(ctrs)]:
            q = kernel.quotas[path]
            if ask is not None:
                wanted = cfs_quota(ask, 100000)
                assert q != UNLIMITED and q <= wanted
                if final_be == UNLIMITED and path.count("/") == 1:
                    assert q == wanted


# -- a BE pod's sandbox overhead and native sidecars (issue 27 §3) ------------------------------------------------
SIDECAR = {"name": "proxy", "restartPolicy": "Always",
           "resources": {"limits": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}}}


@pytest.mark.parametrize("name,pod,want", [
    # The overhead stays native cpu/memory (the RuntimeClass's); the sandbox runs in the pod's cgroup, and the
    # kubelet adds it to the pod level's requests and to its limits that exist: so does the BE pod level.
    ("overhead in the pod level", {**be_pod(container("a", BATCH)), "spec": {
        "containers": [container("a", BATCH)], "overhead": {"cpu": "250m", "memory": "160Mi"}}},
     Limits(1750, 1750, GI + 160 * MI)),
    ("a native sidecar beside the container, plus the overhead", {**be_pod(), "spec": {
        "containers": [container("a", BATCH)], "initContainers": [SIDECAR], "overhead": {"cpu": "100m"}}},
     Limits(2100, 2100, GI + 256 * MI)),
    ("no pod-level limit: the overhead goes on the request only", {**be_pod(), "spec": {
        "containers": [container("a", None, {"kubernetes.io/batch-cpu": "100"})], "overhead": {"cpu": "100m"}}},
     Limits(None, 200, None)),
])
def test_the_sandbox_overhead_is_in_the_pod_level(name: str, pod: dict[str, Any], want: Limits) -> None:
    limits = pod_limits(pod)
    assert limits.pod == want
    assert limits.containers["a"] in (Limits(1500, 1500, GI), Limits(None, 100, None))   # no overhead there
