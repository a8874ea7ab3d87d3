"""Table tests of the batch-mixing rule (validating rule 1): no pod mixes batch and native cpu/memory, a value
that is no quantity and a pod outline that is not the API's are a 400 (its first checks, before any rule)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.validating_helpers import (
    BATCH_CPU,
    BATCH_MEMORY,
    batch,
    be_pod,
    container,
    expect,
    one_container,
    pod,
    resized,
    validate,
)
from webhook.core.quantity import ERR_FORMAT, ERR_NUMERIC, ERR_SUFFIX

ADVICE = ("a pod uses either batch resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) "
          "or native cpu and memory, not both")
REQ = "spec.containers[0].resources.requests"
LIM = "spec.containers[0].resources.limits"


MIXING = [
    ("batch only", be_pod([container("app", {BATCH_CPU: "500", BATCH_MEMORY: "1Gi"})]), None),
    ("native only", pod(containers=[container("app", {"cpu": "1", "memory": "1Gi"})]), None),
    ("neither", pod(containers=[container("app")]), None),
    ("batch-cpu and cpu in one container",
     be_pod([container("app", {BATCH_CPU: "500", "cpu": "1"})]),
     f'container "app" asks for both {BATCH_CPU} and cpu: {ADVICE}'),
    ("batch in requests, memory in limits",
     be_pod([container("app", {BATCH_MEMORY: "1Gi"}, {"memory": "1Gi"})]),
     f'container "app" asks for both {BATCH_MEMORY} and memory: {ADVICE}'),
    ("across containers",
     be_pod([container("a", {BATCH_CPU: "500"}), container("b", {"memory": "64Mi"})]),
     f'container "a" asks for {BATCH_CPU} and container "b" asks for memory: {ADVICE}'),
    ("init container native",
     be_pod([container("a", {BATCH_CPU: "500"})], init=[container("setup", {"cpu": "100m"})]),
     f'container "a" asks for {BATCH_CPU} and init container "setup" asks for cpu: {ADVICE}'),
    # spec.overhead is the RuntimeClass's (its plugin refuses any other value after the webhooks): never a mix
    ("overhead native", be_pod([container("a", {BATCH_CPU: "500"})], overhead={"cpu": "250m"}), None),
    ("overhead batch, container native", be_pod([container("a", {"cpu": "1"})], overhead={BATCH_MEMORY: "1Mi"}), None),
    ("zero native cpu asks for nothing", be_pod([container("a", {BATCH_CPU: "500", "cpu": "0"})]), None),
    ("mid resources are not batch", pod(containers=[container("a", {"kubernetes.io/mid-cpu": "500", "cpu": "1"})]),
     None),
]


@pytest.mark.parametrize(("name", "obj", "message"), MIXING, ids=[c[0] for c in MIXING])
def test_batch_mixing(name: str, obj: dict[str, Any], message: str | None) -> None:
    expect(validate(obj), "batch-mixing", message)


# A value that is no quantity: the apiserver's decoder refuses the pod (400); we answer the same with
# the field named, before any other rule reads the value (it used to count as "asks for cpu").
INVALID_QUANTITIES = [
    ("cpu abc next to converted batch-memory",
     be_pod([container("app", {"cpu": "abc", BATCH_MEMORY: "1Gi"})]),
     f'{REQ}[cpu]: Invalid value: "abc": {ERR_FORMAT}'),
    ("cpu 1e3m", pod(containers=[container("app", {"cpu": "1e3m"})]), f'{REQ}[cpu]: Invalid value: "1e3m": {ERR_FORMAT}'),
    ("memory in limits", pod(containers=[container("app", None, {"memory": "1.1.M"})]),
     f'{LIM}[memory]: Invalid value: "1.1.M": {ERR_NUMERIC}'),
    ("batch-cpu 1 core", one_container("1 core"), f'{REQ}[{BATCH_CPU}]: Invalid value: "1 core": {ERR_FORMAT}'),
    ("batch-memory bad suffix", one_container(mem="1ki"), f'{REQ}[{BATCH_MEMORY}]: Invalid value: "1ki": {ERR_SUFFIX}'),
    ("any resource", pod(containers=[container("app", {"example.com/gpu": "one"})]),
     f'{REQ}[example.com/gpu]: Invalid value: "one": {ERR_FORMAT}'),
    ("init container and overhead, all listed",
     pod(containers=[container("app")], init=[container("setup", {"cpu": "x"})], overhead={"memory": "y"}),
     (f'[spec.initContainers[0].resources.requests[cpu]: Invalid value: "x": {ERR_FORMAT}, '
      f'spec.overhead[memory]: Invalid value: "y": {ERR_FORMAT}]')),
]


@pytest.mark.parametrize(("name", "obj", "message"), INVALID_QUANTITIES, ids=[c[0] for c in INVALID_QUANTITIES])
def test_invalid_quantity_is_a_bad_request_naming_the_field(name: str, obj: dict[str, Any], message: str) -> None:
    d = validate(obj)
    assert (d.allowed, d.code, d.reason, d.rule, d.message) == (False, 400, "BadRequest", "batch-mixing", message)


def test_a_yaml_number_is_a_quantity() -> None:
    """`cpu: 0.5` in YAML is the JSON number 0.5, which the apiserver reads as "0.5"."""
    assert validate(pod(containers=[container("app", {"cpu": 0.5, "memory": 1e9})])).allowed


SHAPES = [
    ("spec missing", {"metadata": {"name": "p", "namespace": "n"}}, "spec: Required value: a pod needs a spec"),
    ("labels not a map", {"metadata": {"labels": ["a"]}, "spec": {}}, "metadata.labels: Invalid value: must be a map of strings"),
    ("containers not a list", {"metadata": {}, "spec": {"containers": {}}}, "spec.containers: Invalid value: must be a list"),
    ("resources not an object", {"metadata": {}, "spec": {"containers": [{"name": "a", "resources": 1}]}},
     "spec.containers[0].resources: Invalid value: must be an object"),
    ("limits not a map", {"metadata": {}, "spec": {"initContainers": [{"name": "a", "resources": {"limits": "1"}}]}},
     "spec.initContainers[0].resources.limits: Invalid value: must be a map of quantities"),
    ("overhead not a map", {"metadata": {}, "spec": {"overhead": "1"}}, "spec.overhead: Invalid value: must be a map of quantities"),
    ("requests an empty list", {"metadata": {}, "spec": {"containers": [{"name": "a", "resources": {"requests": []}}]}},
     "spec.containers[0].resources.requests: Invalid value: must be a map of quantities"),
    ("label value a map", {"metadata": {"labels": {"app": {"a": "b"}}}, "spec": {}},
     "metadata.labels[app]: Invalid value: must be a string"),
    ("annotation value a list", {"metadata": {"annotations": {"a": ["b"]}}, "spec": {}},
     "metadata.annotations[a]: Invalid value: must be a string"),
    ("generateName a number", {"metadata": {"generateName": 3}, "spec": {}}, "metadata.generateName: Invalid value: must be a string"),
    ("priorityClassName a map", {"metadata": {}, "spec": {"priorityClassName": {"a": 1}}},
     "spec.priorityClassName: Invalid value: must be a string"),
    ("priority a string", {"metadata": {}, "spec": {"priority": "10"}}, "spec.priority: Invalid value: must be an integer"),
    ("status a string", {"metadata": {}, "spec": {}, "status": "x"}, "status: Invalid value: must be an object"),
    ("phase a map", {"metadata": {}, "spec": {}, "status": {"phase": {}}}, "status.phase: Invalid value: must be a string"),
    ("affinity a list", {"metadata": {}, "spec": {"affinity": ["x"]}}, "spec.affinity: Invalid value: must be an object"),
    ("podAffinity a string", {"metadata": {}, "spec": {"affinity": {"podAffinity": "x"}}},
     "spec.affinity.podAffinity: Invalid value: must be an object"),
    ("preferred term not a map", {"metadata": {}, "spec": {"affinity": {"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": 3}]}}}},
     "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm: "
     "Invalid value: must be an object"),
    ("container name a number", {"metadata": {}, "spec": {"containers": [{"name": 1}]}},
     "spec.containers[0].name: Invalid value: must be a string"),
]


@pytest.mark.parametrize(("name", "obj", "message"), SHAPES, ids=[c[0] for c in SHAPES])
def test_malformed_pod_is_a_bad_request(name: str, obj: dict[str, Any], message: str) -> None:
    d = validate(obj)
    assert (d.allowed, d.code, d.reason, d.rule, d.message) == (False, 400, "BadRequest", "batch-mixing", message)


@pytest.mark.parametrize(("name", "obj", "message"), SHAPES, ids=[c[0] for c in SHAPES])
def test_the_mutating_chain_refuses_the_same_outline(name: str, obj: dict[str, Any], message: str) -> None:
    from tests.mutating import make_state, request
    from webhook.admission import chain

    d = chain.mutate(request(obj), make_state(), chain.Settings())
    assert (d.allowed, d.code, d.message, d.rule_failed) == (False, 400, message, False)


def test_malformed_old_object_on_update() -> None:
    d = validate(batch(), "UPDATE", old={"metadata": {}, "spec": None})
    assert (d.code, d.message) == (400, "oldObject.spec: Required value: a pod needs a spec")


def test_a_resize_of_a_mixed_pod_is_allowed_and_said() -> None:
    """A pod admitted mixing batch-cpu and memory (the webhook down, no policy): resizing it brings no mix it did
    not have (ratcheting), with the carried finding said in a warning. A pod with batch resources only cannot be
    given native cpu or memory by a resize: its QoS class would change, which the apiserver refuses first
    (``ValidatePodResize``: "Pod QOS Class may not change as a result of resizing")."""
    mixed = be_pod([container("app", {BATCH_CPU: "500", "memory": "64Mi"})])
    decision = validate(resized(mixed, memory="128Mi"), "UPDATE", old=mixed, sub="resize")
    expect(decision, "batch-mixing", None)
    assert decision.warnings[0].startswith("batch-mixing: already so before this update, allowed: ")
