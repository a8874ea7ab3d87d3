"""Today's pod API through the real chains (issue 27 §3): RuntimeClass overhead, pod-level resources
(``spec.resources``), native sidecars, and what the apiserver checks after the webhooks.

Each mutating case runs the mutating chain on the pod as the apiserver hands it over, checks the pod that comes
out (or the denial), then runs the validating chain on that output (as the apiserver sends it) and the mutating
chain again (a fixpoint: no patch).
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from tests.mutating import make_state, mutate, pod, request
from webhook.admission import chain
from webhook.admission.domain.quota import pod_usage
from webhook.core.qos import kube_qos_class
from webhook.core.resources import pod_limits, pod_requests

BC, BM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
MC, MM = "kubernetes.io/mid-cpu", "kubernetes.io/mid-memory"
GI = "1073741824"
BE = {"koordinator.sh/qosClass": "BE"}
ABSENT = object()
MIX = ("a pod uses either batch resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) "
       "or native cpu and memory, not both")
POD_LEVEL_FIX = ("remove cpu and memory from spec.resources and write them in the containers as "
                 "kubernetes.io/batch-cpu and batch-memory (the apiserver takes no batch resource at pod level)")


def c(name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    out: dict[str, Any] = {"name": name, "image": "busybox", **extra}
    if res:
        out["resources"] = res
    return out


def sidecar(name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    return c(name, requests, limits, restartPolicy="Always")


def batch_pod(containers: list[dict[str, Any]], prio: int = 5000, klass: str = "koord-batch", **spec: Any) -> dict[str, Any]:
    return pod(priorityClassName=klass, priority=prio, containers=containers, **spec)


def refused(field: str, raw: str, why: str, cpu: str = BC, mem: str = BM) -> str:
    return (f'{field}: "{raw}" cannot be converted exactly ({why}), and the apiserver takes no '
            f"{cpu if '[cpu]' in field else mem} at pod level (native cpu/memory there would make the kubelet run "
            "the pod as Guaranteed or Burstable, outside its QoS tier): remove cpu and memory from spec.resources "
            f"and write {cpu} and {mem} in each container's resources.requests and resources.limits instead")


# (name, pod, what the mutated pod holds: {dotted path: value or ABSENT}, or the denial text)
MUTATE_CASES: list[tuple[str, dict[str, Any], dict[str, Any] | str]] = [
    # -- RuntimeClass overhead: the RuntimeClass plugin refuses any other value after the webhooks
    ("kata pod: overhead kept as the RuntimeClass wrote it, containers converted",
     batch_pod([c("app", {"cpu": "1", "memory": "1Gi"})], runtimeClassName="kata",
               overhead={"cpu": "250m", "memory": "160Mi"}),
     {"spec.overhead": {"cpu": "250m", "memory": "160Mi"},
      "spec.containers.0.resources": {"requests": {BC: "1000", BM: GI}}}),
    ("gVisor pod with only overhead native: nothing converted there",
     batch_pod([c("app", {BC: "500", BM: "1Gi"}, {BC: "500", BM: "1Gi"})], runtimeClassName="gvisor",
               overhead={"cpu": "100m"}, labels=BE),
     {"spec.overhead": {"cpu": "100m"}}),
    # -- pod-level resources (spec.resources): exact, so moved or dropped
    ("one container: pod-level requests and limits move into it as batch values",
     batch_pod([c("app")], resources={"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "2Gi"}}),
     {"spec.resources": ABSENT,
      "spec.containers.0.resources": {"requests": {BC: "2000", BM: GI}, "limits": {BC: "4000", BM: "2147483648"}}}),
    ("one container with its own lower limit: the limit stays, the pod-level request moves",
     batch_pod([c("app", {"cpu": "250m"}, {"cpu": "1"})], resources={"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}),
     {"spec.resources": ABSENT, "spec.containers.0.resources": {"requests": {BC: "500"}, "limits": {BC: "1000"}}}),
    ("pod-level limits only: the request the apiserver defaults from them moves too",
     batch_pod([c("app")], resources={"limits": {"cpu": "1", "memory": "1Gi"}}),
     {"spec.resources": ABSENT,
      "spec.containers.0.resources": {"requests": {BC: "1000", BM: GI}, "limits": {BC: "1000", BM: GI}}}),
    ("hugepages stay at pod level, cpu moves",
     batch_pod([c("app")], resources={"requests": {"cpu": "1", "hugepages-2Mi": "100Mi"},
                                      "limits": {"hugepages-2Mi": "100Mi"}}),
     {"spec.resources": {"requests": {"hugepages-2Mi": "100Mi"}, "limits": {"hugepages-2Mi": "100Mi"}},
      "spec.containers.0.resources": {"requests": {BC: "1000"}}}),
    ("every container states its own: the pod-level values are only a cap and go",
     batch_pod([c("a", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}),
                c("b", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
               resources={"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "4", "memory": "2Gi"}}),
     {"spec.resources": ABSENT,
      "spec.containers.1.resources": {"requests": {BC: "500", BM: GI}, "limits": {BC: "1000", BM: GI}}}),
    ("a native sidecar runs beside the container: its request is in the aggregate the pod level equals",
     batch_pod([c("app", None, {"cpu": "1"})], initContainers=[sidecar("proxy", None, {"cpu": "500m"})],
               resources={"requests": {"cpu": "1500m"}, "limits": {"cpu": "2"}}),
     {"spec.resources": ABSENT,
      "spec.initContainers.0.resources": {"requests": {BC: "500"}, "limits": {BC: "500"}}}),
    ("koord-mid: pod-level values move as mid resources",
     batch_pod([c("app")], prio=7000, klass="koord-mid", resources={"requests": {"cpu": "1", "memory": "1Gi"}}),
     {"spec.resources": ABSENT, "spec.containers.0.resources": {"requests": {MC: "1000", MM: GI}}}),
    # -- what the apiserver's validation would refuse after the conversion: refused first, with the way out
    ("a container's hugepages would be left without cpu or memory: refused",
     batch_pod([c("app", {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "100Mi"},
                  {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "100Mi"})]),
     f"spec.containers[0].resources: Forbidden: HugePages require cpu or memory (converted to {BC}/{BM}, it would "
     "hold hugepages-2Mi alone, and the apiserver refuses that after the webhooks: remove hugepages-2Mi from the "
     "pod, or keep it out of the band whose resources it is converted to)"),
    # -- pod-level resources: no exact way, refused with the fix
    ("two containers share the pod-level request: refused",
     batch_pod([c("a"), c("b")], resources={"requests": {"cpu": "2", "memory": "1Gi"}}),
     refused("spec.resources.requests[cpu]", "2", "2 containers share it")),
    ("a container and an init container: refused",
     batch_pod([c("app")], initContainers=[c("setup")], resources={"limits": {"memory": "1Gi"}}),
     refused("spec.resources.limits[memory]", "1Gi", "2 containers share it")),
    ("containers without their own limit under a pod-level limit: refused",
     batch_pod([c("a", {"cpu": "1"}), c("b", {"cpu": "1"})], resources={"requests": {"cpu": "2"}, "limits": {"cpu": "3"}}),
     refused("spec.resources.limits[cpu]", "3", "2 containers share it")),
    ("the pod-level request above the one container's own limit: refused",
     batch_pod([c("app", None, {"cpu": "1"})], resources={"requests": {"cpu": "2"}}),
     refused("spec.resources.requests[cpu]", "2", "it is above the container's own limit")),
]


def _at(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if isinstance(obj, list):
            obj = obj[int(part)]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return ABSENT
    return obj


@pytest.mark.parametrize("name,obj,want", MUTATE_CASES, ids=[case[0] for case in MUTATE_CASES])
def test_mutating_chain(name: str, obj: dict[str, Any], want: dict[str, Any] | str) -> None:
    state = make_state()
    before = copy.deepcopy(obj)
    decision, out = mutate(obj, state)
    assert obj == before   # the input is never changed
    if isinstance(want, str):
        assert (decision.allowed, decision.rule, decision.message) == (False, "batch-resources", want)
        return
    assert decision.allowed, decision.message
    assert out is not None
    for path, value in want.items():
        assert _at(out, path) == value, path
    checked = chain.validate(request(out), state, chain.Settings())
    assert checked.allowed, (checked.rule, checked.message)
    assert chain.mutate(request(out), state, chain.Settings()).patch == []


def test_a_converted_pod_never_keeps_native_pod_level_cpu_or_memory() -> None:
    """The pod a band conversion hands back asks for no native cpu/memory anywhere but the sandbox's overhead."""
    for name, obj, want in MUTATE_CASES:
        if isinstance(want, str) or obj["spec"]["priority"] == 0:
            continue
        _, out = mutate(obj, make_state())
        assert out is not None
        level = out["spec"].get("resources") or {}
        assert not any(n in (level.get(k) or {}) for k in ("requests", "limits") for n in ("cpu", "memory")), name


# (name, pod as the validating chain gets it, (rule, message) or None)
VALIDATE_CASES: list[tuple[str, dict[str, Any], tuple[str, str] | None]] = [
    ("pod-level cpu next to container batch-cpu: a mix, with the fix",
     pod(labels=BE, containers=[c("app", {BC: "1000"})], resources={"requests": {"cpu": "1"}}),
     ("batch-mixing", f'container "app" asks for {BC} and the pod (spec.resources) asks for cpu: {MIX}; '
                      f"{POD_LEVEL_FIX}")),
    ("pod-level memory limit next to an init container's batch-memory: a mix",
     pod(labels=BE, containers=[c("app")], initContainers=[c("setup", {BM: "1Gi"})],
         resources={"limits": {"memory": "1Gi"}}),
     ("batch-mixing", f'init container "setup" asks for {BM} and the pod (spec.resources) asks for memory: {MIX}; '
                      f"{POD_LEVEL_FIX}")),
    ("RuntimeClass overhead next to batch resources: no mix",
     pod(labels=BE, priority=5000, priorityClassName="koord-batch", containers=[c("app", {BC: "1000"}, {BC: "1000"})],
         runtimeClassName="kata", overhead={"cpu": "250m", "memory": "160Mi"}), None),
    ("a pod-level value that is no quantity: 400 naming the field",
     pod(containers=[c("app")], resources={"requests": {"cpu": "abc"}}),
     ("batch-mixing", 'spec.resources.requests[cpu]: Invalid value: "abc": quantities must match the regular '
                      "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")),
    ("spec.resources not an object: 400",
     pod(containers=[c("app")], resources=["cpu"]), ("batch-mixing", "spec.resources: Invalid value: must be an object")),
]


@pytest.mark.parametrize("name,obj,want", VALIDATE_CASES, ids=[case[0] for case in VALIDATE_CASES])
def test_validating_chain(name: str, obj: dict[str, Any], want: tuple[str, str] | None) -> None:
    decision = chain.validate(request(obj), make_state(), chain.Settings())
    if want is None:
        assert decision.allowed, (decision.rule, decision.message)
    else:
        assert (decision.allowed, decision.rule, decision.message) == (False, *want)


# -- foresight: LimitRanger and ResourceQuota see the pod level and the sidecars as the apiserver does ------------
POD_MIN_CPU = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "pod-min", "namespace": "default"},
               "spec": {"limits": [{"type": "Pod", "min": {"cpu": "100m"}}]}}


def test_limit_ranger_reads_pod_level_cpu() -> None:
    """A pod-level cpu meets a ``type: Pod`` min: the mutating chain does not pretend LimitRanger would refuse the
    pod; the validating chain names what is really wrong (the mix)."""
    state = make_state(POD_MIN_CPU)
    obj = pod(labels=BE, containers=[c("app", {BC: "1000"})], resources={"requests": {"cpu": "1"}})
    decision, out = mutate(obj, state)
    assert decision.allowed, decision.message
    assert out is not None
    checked = chain.validate(request(out), state, chain.Settings())
    assert checked.rule == "batch-mixing"
    assert checked.message.startswith(f'container "app" asks for {BC} and the pod (spec.resources) asks for cpu')


LIMITS_CPU = [{"resource": "pods", "matchContains": ["limits.cpu"]}]


def test_quota_presence_sees_pod_level_limits() -> None:
    """limitedResources on limits.cpu: a pod whose only cpu limit is at pod level is charged limits.cpu, so the
    apiserver's quota plugin wants a covering quota, and the presence rule says so first."""
    obj = pod(containers=[c("app")], resources={"limits": {"cpu": "1"}})
    decision = chain.validate(request(obj), make_state(), chain.Settings(limited_resources=LIMITS_CPU))
    assert (decision.rule, decision.message) == ("quota-presence", "insufficient quota to consume: limits.cpu")


def _spec(**spec: Any) -> dict[str, Any]:
    return {"spec": spec}


# (name, pod, requests, limits) as upstream PodRequests/PodLimits count them
USAGE_CASES = [
    ("a sidecar's limit adds to the containers'",
     _spec(containers=[c("app", None, {"cpu": "1"})], initContainers=[sidecar("proxy", None, {"cpu": "500m"})]),
     {"cpu": "1.5"}, {"cpu": "1.5"}),
    ("an init container after a sidecar runs beside it",
     _spec(containers=[c("app", None, {"cpu": "1"})],
           initContainers=[sidecar("proxy", None, {"cpu": "500m"}), c("migrate", None, {"cpu": "2"})]),
     {"cpu": "2.5"}, {"cpu": "2.5"}),
    ("pod-level values win for what they name",
     _spec(containers=[c("app", {"cpu": "1", "memory": "1Gi"})], resources={"requests": {"cpu": "3"},
                                                                             "limits": {"cpu": "4"}}),
     {"cpu": "3", "memory": "1073741824"}, {"cpu": "4"}),
    ("pod-level limits only: requests defaulted from the containers' aggregate",
     _spec(containers=[c("app", {"cpu": "1"})], resources={"limits": {"cpu": "4"}}), {"cpu": "1"}, {"cpu": "4"}),
]


@pytest.mark.parametrize("name,obj,requests,limits", USAGE_CASES, ids=[case[0] for case in USAGE_CASES])
def test_pod_requests_and_limits_follow_upstream(name: str, obj: dict[str, Any], requests: dict[str, Any], limits: dict[str, Any]) -> None:
    assert pod_requests(obj) == {k: Decimal(v) for k, v in requests.items()}
    assert pod_limits(obj) == {k: Decimal(v) for k, v in limits.items()}
    usage = pod_usage(obj)   # what the quota foresight charges
    assert {k[len("limits."):]: v for k, v in usage.items() if k.startswith("limits.")} == \
        {k: Decimal(v) for k, v in limits.items()}


@pytest.mark.parametrize("name,spec,qos", [
    ("pod-level requests only", {"containers": [c("app")], "resources": {"requests": {"cpu": "1"}}}, "Burstable"),
    ("pod-level limits on cpu and memory", {"containers": [c("app")],
                                            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, "Guaranteed"),
    ("pod level decides over the containers (Guaranteed on their own)",
     {"containers": [c("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
      "resources": {"requests": {"memory": "1Gi"}}}, "Burstable"),
])
def test_qos_class_with_pod_level_resources(name: str, spec: dict[str, Any], qos: str) -> None:
    assert kube_qos_class({"spec": spec}) == qos
