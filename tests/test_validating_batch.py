"""Table tests: batch-mixing and batch-units (validating rules 1 and 2)."""

from __future__ import annotations

import pytest

from tests.validating_helpers import BATCH_CPU, BATCH_MEMORY, batch, container, expect, pod, validate
from webhook.core.quantity import ERR_FORMAT, ERR_NUMERIC, ERR_SUFFIX

BE = {"koordinator.sh/qosClass": "BE"}
ADVICE = ("a pod uses either batch resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) "
          "or native cpu and memory, not both")
WHOLE_CPU = ("kubernetes.io/batch-cpu counts milli-cores and must be a whole number: "
             "write 500 for half a core, 1k or 1000 for one core")
WHOLE_MEM = ("kubernetes.io/batch-memory counts bytes and must be a whole number: "
             "write 512Mi or 536870912 for half a gibibyte")
REQ = "spec.containers[0].resources.requests"
LIM = "spec.containers[0].resources.limits"


def be(containers=None, init=None, overhead=None):  # type: ignore[no-untyped-def]
    return pod(labels=BE, priority=5000, priority_class="koord-batch", containers=containers, init=init,
               overhead=overhead)


MIXING = [
    ("batch only", be([container("app", {BATCH_CPU: "500", BATCH_MEMORY: "1Gi"})]), None),
    ("native only", pod(containers=[container("app", {"cpu": "1", "memory": "1Gi"})]), None),
    ("neither", pod(containers=[container("app")]), None),
    ("batch-cpu and cpu in one container",
     be([container("app", {BATCH_CPU: "500", "cpu": "1"})]),
     f'container "app" asks for both {BATCH_CPU} and cpu: {ADVICE}'),
    ("batch in requests, memory in limits",
     be([container("app", {BATCH_MEMORY: "1Gi"}, {"memory": "1Gi"})]),
     f'container "app" asks for both {BATCH_MEMORY} and memory: {ADVICE}'),
    ("across containers",
     be([container("a", {BATCH_CPU: "500"}), container("b", {"memory": "64Mi"})]),
     f'container "a" asks for {BATCH_CPU} and container "b" asks for memory: {ADVICE}'),
    ("init container native",
     be([container("a", {BATCH_CPU: "500"})], init=[container("setup", {"cpu": "100m"})]),
     f'container "a" asks for {BATCH_CPU} and init container "setup" asks for cpu: {ADVICE}'),
    # spec.overhead is the RuntimeClass's (its plugin refuses any other value after the webhooks): never a mix
    ("overhead native", be([container("a", {BATCH_CPU: "500"})], overhead={"cpu": "250m"}), None),
    ("overhead batch, container native", be([container("a", {"cpu": "1"})], overhead={BATCH_MEMORY: "1Mi"}), None),
    ("zero native cpu asks for nothing", be([container("a", {BATCH_CPU: "500", "cpu": "0"})]), None),
    ("mid resources are not batch", pod(containers=[container("a", {"kubernetes.io/mid-cpu": "500", "cpu": "1"})]),
     None),
]


@pytest.mark.parametrize(("name", "obj", "message"), MIXING, ids=[c[0] for c in MIXING])
def test_batch_mixing(name: str, obj: dict, message: str | None) -> None:
    expect(validate(obj), "batch-mixing", message)


def one(cpu=None, mem=None, lcpu=None, lmem=None):  # type: ignore[no-untyped-def]
    req = {k: v for k, v in ((BATCH_CPU, cpu), (BATCH_MEMORY, mem)) if v is not None}
    lim = {k: v for k, v in ((BATCH_CPU, lcpu), (BATCH_MEMORY, lmem)) if v is not None}
    return be([container("app", req or None, lim or None)])


UNITS = [
    ("500", one("500", "1Gi", "500", "1Gi"), None),
    ("1000", one("1000", lcpu="1000"), None),
    ("1k", one("1k", lcpu="1k"), None),
    ("2k", one("2k", lcpu="2k"), None),
    ("JSON integer", one(1000, lcpu=1000), None),
    ("limit only", one(lcpu="1k", lmem="1Gi"), None),
    ("request only", one("1k", "1Gi"), None),
    ("0.5", one("0.5"), f'{REQ}[{BATCH_CPU}]: Invalid value: "0.5": {WHOLE_CPU}'),
    ("500m", one("500m"), f'{REQ}[{BATCH_CPU}]: Invalid value: "500m": {WHOLE_CPU}'),
    ("1.5 in limits", one(lcpu="1.5"), f'{LIM}[{BATCH_CPU}]: Invalid value: "1.5": {WHOLE_CPU}'),
    ("memory 1500m", one(mem="1500m"), f'{REQ}[{BATCH_MEMORY}]: Invalid value: "1500m": {WHOLE_MEM}'),
    ("memory 0.5Gi is whole bytes", one(mem="0.5Gi", lmem="512Mi"), None),
    ("negative", one("-1"), f'{REQ}[{BATCH_CPU}]: Invalid value: "-1": must be greater than or equal to 0'),
    ("request above limit", one("2k", lcpu="1k"),
     f'{REQ}: Invalid value: "2k": must be less than or equal to {BATCH_CPU} limit of 1k'),
    ("request below limit (a converted Burstable pod)", one("500", lcpu="1k"), None),
    ("equal in other spelling", one("1000", lcpu="1k"), None),
    ("several errors aggregate", one("0.5", "1.5"),
     f'[{REQ}[{BATCH_CPU}]: Invalid value: "0.5": {WHOLE_CPU}, {REQ}[{BATCH_MEMORY}]: Invalid value: "1.5": {WHOLE_MEM}]'),
    ("init container", be([container("app", {BATCH_CPU: "1k"})], init=[container("i", {BATCH_CPU: "0.1"})]),
     f'spec.initContainers[0].resources.requests[{BATCH_CPU}]: Invalid value: "0.1": {WHOLE_CPU}'),
    # the RuntimeClass's, which the pod's author cannot change: not checked
    ("overhead", be([container("app", {BATCH_CPU: "1k"})], overhead={BATCH_CPU: "250m"}), None),
]


@pytest.mark.parametrize(("name", "obj", "message"), UNITS, ids=[c[0] for c in UNITS])
def test_batch_units(name: str, obj: dict, message: str | None) -> None:
    expect(validate(obj), "batch-units", message)


# A value that is no quantity: the apiserver's decoder refuses the pod (400); we answer the same with
# the field named, before any other rule reads the value (it used to count as "asks for cpu").
INVALID_QUANTITIES = [
    ("cpu abc next to converted batch-memory",
     be([container("app", {"cpu": "abc", BATCH_MEMORY: "1Gi"})]),
     f'{REQ}[cpu]: Invalid value: "abc": {ERR_FORMAT}'),
    ("cpu 1e3m", pod(containers=[container("app", {"cpu": "1e3m"})]), f'{REQ}[cpu]: Invalid value: "1e3m": {ERR_FORMAT}'),
    ("memory in limits", pod(containers=[container("app", None, {"memory": "1.1.M"})]),
     f'{LIM}[memory]: Invalid value: "1.1.M": {ERR_NUMERIC}'),
    ("batch-cpu 1 core", one("1 core"), f'{REQ}[{BATCH_CPU}]: Invalid value: "1 core": {ERR_FORMAT}'),
    ("batch-memory bad suffix", one(mem="1ki"), f'{REQ}[{BATCH_MEMORY}]: Invalid value: "1ki": {ERR_SUFFIX}'),
    ("any resource", pod(containers=[container("app", {"example.com/gpu": "one"})]),
     f'{REQ}[example.com/gpu]: Invalid value: "one": {ERR_FORMAT}'),
    ("init container and overhead, all listed",
     pod(containers=[container("app")], init=[container("setup", {"cpu": "x"})], overhead={"memory": "y"}),
     (f'[spec.initContainers[0].resources.requests[cpu]: Invalid value: "x": {ERR_FORMAT}, '
      f'spec.overhead[memory]: Invalid value: "y": {ERR_FORMAT}]')),
]


@pytest.mark.parametrize(("name", "obj", "message"), INVALID_QUANTITIES, ids=[c[0] for c in INVALID_QUANTITIES])
def test_invalid_quantity_is_a_bad_request_naming_the_field(name: str, obj: dict, message: str) -> None:
    d = validate(obj)
    assert (d.allowed, d.code, d.reason, d.rule, d.message) == (False, 400, "BadRequest", "batch-mixing", message)


def test_a_yaml_number_is_a_quantity() -> None:
    """`cpu: 0.5` in YAML is the JSON number 0.5, which the apiserver reads as "0.5"."""
    assert validate(pod(containers=[container("app", {"cpu": 0.5, "memory": 1e9})])).allowed


def test_small_batch_cpu_is_not_warned_here() -> None:
    """The validating rules see a conversion's output ("50" from cpu: 50m) like a user's "50": the
    mutating batch-resources rule, which sees what the user wrote, warns instead."""
    d = validate(batch(cpu="2"))
    assert d.allowed and d.warnings == [] and "batch-units" not in d.audit_annotations


def test_update_checked_too() -> None:
    # What the update brings is refused; what the old pod already carried is not (tests/test_ratcheting.py).
    d = validate(one("0.5"), "UPDATE", old=one("500"))
    assert not d.allowed and d.rule == "batch-units"


def test_subresource_and_delete_skipped() -> None:
    from tests.validating_helpers import request, state
    from webhook.admission import chain

    bad = one("0.5")
    assert chain.validate(request(bad, "UPDATE", bad, sub="status"), state(), chain.Settings()).allowed
    assert chain.validate(request(bad, "DELETE", bad), state(), chain.Settings()).allowed


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
def test_malformed_pod_is_a_bad_request(name: str, obj: dict, message: str) -> None:
    d = validate(obj)
    assert (d.allowed, d.code, d.reason, d.rule, d.message) == (False, 400, "BadRequest", "batch-mixing", message)


@pytest.mark.parametrize(("name", "obj", "message"), SHAPES, ids=[c[0] for c in SHAPES])
def test_the_mutating_chain_refuses_the_same_outline(name: str, obj: dict, message: str) -> None:
    from tests.mutating import make_state, request
    from webhook.admission import chain

    d = chain.mutate(request(obj), make_state(), chain.Settings())
    assert (d.allowed, d.code, d.message, d.rule_failed) == (False, 400, message, False)


def test_malformed_old_object_on_update() -> None:
    d = validate(batch(), "UPDATE", old={"metadata": {}, "spec": None})
    assert (d.code, d.message) == (400, "oldObject.spec: Required value: a pod needs a spec")
