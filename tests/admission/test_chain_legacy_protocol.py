"""The legacy ack-slo-manager protocol: ``alibabacloud.com/reclaimed-cpu`` (milli-cores) and
``alibabacloud.com/reclaimed-memory`` (bytes) are batch-cpu and batch-memory by their old names.

The batch rules treat them exactly as the new names (no mixing with native cpu/memory, whole milli-cores and
bytes, request at most the limit, QoS BE), a pod never names batch resources in both protocols, and the agent
counts them for a BE pod's cgroup limits.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.mutating import make_state, mutate, namespace
from tests.mutating import pod as mutating_pod
from tests.validating_helpers import container, pod, validate
from webhook.agent.domain.cgroup_limits import pod_limits
from webhook.cli.webhook import main

OLD_CPU, OLD_MEM = "alibabacloud.com/reclaimed-cpu", "alibabacloud.com/reclaimed-memory"
NEW_CPU, NEW_MEM = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
PROTOCOL = ("a pod names its batch resources in one protocol: kubernetes.io/batch-cpu and batch-memory "
            "(Koordinator) or the legacy alibabacloud.com/reclaimed-cpu and reclaimed-memory, not both")
MIXING = ("a pod uses either batch resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) or native cpu "
          "and memory, not both")
LEGACY_BE = {"alibabacloud.com/qosClass": "BE"}   # the legacy QoS annotation


def legacy(*containers: dict[str, Any], annotations: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    return pod(annotations=LEGACY_BE if annotations is None else annotations, priority=5000,
               priority_class="koord-batch", containers=list(containers), **kw)


def res(cpu: str = "1000", mem: str = "1Gi", cpu_name: str = OLD_CPU, mem_name: str = OLD_MEM) -> dict[str, str]:
    return {cpu_name: cpu, mem_name: mem}


CASES = [
    ("a legacy pod as ack-slo-manager wrote it", legacy(container("app", res(), res())), None, None),
    ("legacy and native cpu in one container", legacy(container("app", {**res(), "cpu": "1"}, res())),
     "batch-mixing", f'container "app" asks for both {OLD_CPU} and cpu: {MIXING}'),
    ("legacy in one container, native memory in another",
     legacy(container("a", res(), res()), container("b", {"memory": "1Gi"})),
     "batch-mixing", f'container "a" asks for {OLD_CPU} and container "b" asks for memory: {MIXING}'),
    ("both protocols in one container", legacy(container("app", {OLD_CPU: "1000", NEW_MEM: "1Gi"})),
     "batch-mixing", f'container "app" asks for both {OLD_CPU} and {NEW_MEM}: {PROTOCOL}'),
    ("both protocols in two containers",
     legacy(container("a", res(), res()), container("b", res(cpu_name=NEW_CPU, mem_name=NEW_MEM))),
     "batch-mixing", f'container "a" asks for {OLD_CPU} and container "b" asks for {NEW_CPU}: {PROTOCOL}'),
    ("reclaimed-cpu in fractions of a milli-core", legacy(container("app", res(cpu="0.5"))),
     "batch-units", f'spec.containers[0].resources.requests[{OLD_CPU}]: Invalid value: "0.5": {OLD_CPU} counts '
                    "milli-cores and must be a whole number: write 500 for half a core, 1k or 1000 for one core"),
    ("reclaimed-memory in fractions of a byte", legacy(container("app", res(mem="0.5"))),
     "batch-units", f'spec.containers[0].resources.requests[{OLD_MEM}]: Invalid value: "0.5": {OLD_MEM} counts '
                    "bytes and must be a whole number: write 512Mi or 536870912 for half a gibibyte"),
    ("a request above its limit", legacy(container("app", res(cpu="2000"), res(cpu="1000"))),
     "batch-units", 'spec.containers[0].resources.requests: Invalid value: "2000": must be less than or equal to '
                    f"{OLD_CPU} limit of 1000"),
    ("reclaimed resources without QoS BE", legacy(container("app", res(), res()), annotations={}),
     "koordinator-rules", "labels.koordinator.sh/qosClass: Required value: must specify koordinator QoS BE with "
                          "koordinator colocation resources"),
]


@pytest.mark.parametrize(("name", "obj", "rule", "message"), CASES, ids=[c[0] for c in CASES])
def test_the_batch_rules_read_the_legacy_names(name: str, obj: dict[str, Any], rule: str | None,
                                               message: str | None) -> None:
    d = validate(obj)
    if rule is None:
        assert d.allowed, d.message
    else:
        assert (d.allowed, d.rule, d.message) == (False, rule, message)


def test_a_legacy_value_is_not_converted_over() -> None:
    """A koord-batch container naming reclaimed-cpu and cpu is left as written, and the mix is refused."""
    obj = mutating_pod(ns="legacy", annotations=LEGACY_BE, requests={OLD_CPU: "500", "cpu": "1"},
                       priorityClassName="koord-batch", priority=5000)
    decision, out = mutate(obj, make_state(namespace("legacy")))
    assert out is not None and out["spec"]["containers"][0]["resources"] == {"requests": {OLD_CPU: "500", "cpu": "1"}}
    assert any(f'already asks for {OLD_CPU} "500"' in w for w in decision.warnings)
    assert validate(out).rule == "batch-mixing"


def test_the_agent_writes_the_same_cgroup_limits_for_either_name() -> None:
    new = pod(containers=[container("app", res(cpu="500", cpu_name=NEW_CPU, mem_name=NEW_MEM),
                                    res(cpu="2k", mem="2Gi", cpu_name=NEW_CPU, mem_name=NEW_MEM))])
    old = pod(containers=[container("app", res(cpu="500"), res(cpu="2k", mem="2Gi"))])
    limits = pod_limits(old)
    assert limits == pod_limits(new)
    assert (limits.pod.cpu_limit_milli, limits.pod.memory_limit) == (2000, 2 * 1024**3)


# -- audit --migrate ---------------------------------------------------------------------------------------------
def legacy_deployment(labels: dict[str, str] | None) -> dict[str, Any]:
    template_meta: dict[str, Any] = {"annotations": {**LEGACY_BE, "team": "a"}}
    if labels is not None:
        template_meta["labels"] = labels
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "old", "namespace": "team-a"},
            "spec": {"template": {"metadata": template_meta, "spec": {
                "initContainers": [container("setup", {OLD_CPU: "100"})],
                "containers": [container("main", {**res(), "ephemeral-storage": "1Gi"}, res(cpu="2k"))]}}}}


@pytest.mark.parametrize("labels", [None, {"app": "old"}])
def test_migrate_patches_the_template_to_koordinators_protocol(labels: dict[str, str] | None, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    deployment = legacy_deployment(labels)
    (tmp_path / "d.json").write_text(json.dumps(deployment))
    assert main(["audit", "-f", str(tmp_path / "d.json"), "--migrate", "-o", "json"]) == 1
    out, err = capsys.readouterr()
    found = json.loads(out)
    assert (found["kind"], found["namespace"], found["name"], found["note"]) == ("Deployment", "team-a", "old", "")
    migrated = jsonpatch.apply_patch(deployment, found["patch"])
    template = migrated["spec"]["template"]
    assert template["metadata"] == {"annotations": {"team": "a"},
                                    "labels": {**(labels or {}), "koordinator.sh/qosClass": "BE"}}
    assert template["spec"]["initContainers"][0]["resources"] == {"requests": {NEW_CPU: "100"}}
    assert template["spec"]["containers"][0]["resources"] == {
        "requests": {NEW_CPU: "1000", NEW_MEM: "1Gi", "ephemeral-storage": "1Gi"},
        "limits": {NEW_CPU: "2k", NEW_MEM: "1Gi"}}
    assert "1 of 1 object(s) use the legacy ack-slo-manager protocol" in err
    # what the table prints is the same patch, as a command for a shell
    assert main(["audit", "-f", str(tmp_path / "d.json"), "--migrate"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "# Deployment team-a/old"
    command = shlex.split(lines[1])
    assert command[:8] == ["kubectl", "patch", "deployments", "old", "-n", "team-a", "--type=json", "-p"]
    assert json.loads(command[8]) == found["patch"]


def test_migrate_names_pods_and_leaves_the_new_protocol_alone(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    bare = legacy(container("app", res(), res()), name="bare")
    owned = legacy(container("app", res()), name="owned")
    owned["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "old-7d9c", "controller": True}]
    new = pod(name="new", labels={"koordinator.sh/qosClass": "BE"},
              containers=[container("app", res(cpu_name=NEW_CPU, mem_name=NEW_MEM))])
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([bare, owned, new]))
    assert main(["audit", "-f", str(tmp_path / "pods.yaml"), "--migrate", "-o", "json"]) == 1
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(f["name"], f["note"]) for f in found] == [
        ("bare", "a pod's resources cannot change: re-create it with this patch applied"),
        ("owned", "made by ReplicaSet/old-7d9c: migrate that, then the pod is made again")]
    (tmp_path / "new.yaml").write_text(yaml.safe_dump(new))
    assert main(["audit", "-f", str(tmp_path / "new.yaml"), "--migrate"]) == 0
    assert "0 of 1 object(s)" in capsys.readouterr().err
