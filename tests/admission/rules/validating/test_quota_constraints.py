"""quota-constraints: a pod that a matching ResourceQuota's constraints refuse is refused first, with the
apiserver's text (the pod evaluator's ``Constraints``, ``pkg/quota/v1/evaluator/core/pods.go``) and, for a batch
pod, why and the ways out.

The table covers each constrained resource, each scope and PriorityClass scope-selector operator, two quotas of
which one matches, init containers, and the quotas that ask nothing of a container; the last test goes through
the mutating chain first, as the apiserver does, with the example's profile converting the pod.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.admission.rules.validating.test_quota_presence import quota, scope
from tests.validating_helpers import batch, container, pod, state, validate
from webhook.cli.webhook import main
from webhook.cluster.sources import example_folder

NS = "colo-demo"
# The ways out are only those the apiserver honours: its quota evaluator charges no kubernetes.io/ resource, so a
# quota on requests.kubernetes.io/batch-cpu is no way out (the old advice); a NotBestEffort scope is.
WHY_START = (" (this pod asks for kubernetes.io/batch-cpu/kubernetes.io/batch-memory instead of cpu/memory, as a "
             "colocation profile's batch conversion writes them; quota {q} in namespace colo-demo constrains {res}, "
             "which a batch pod cannot set, and a ResourceQuota charges no kubernetes.io/ resource in their place: ")
WHY = WHY_START + ("add the scope NotBestEffort to that quota (this pod is BestEffort, so the quota then leaves it "
                   "alone) or keep the namespace out of the profile's namespaceSelector)")
# A quota scoped BestEffort (refused by the apiserver on compute resources, possible in a file) gets no scope advice.
WHY_BE = WHY_START + "keep the namespace out of the profile's namespaceSelector)"


def q(name: str, hard: dict[str, str], **kw: Any) -> dict[str, Any]:
    return quota(name, ns=NS, hard=hard, **kw)


def plain(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    return pod(containers=[container("main", requests, limits)], **kw)


CPU1 = {"cpu": "1", "memory": "1Gi"}
CASES = [
    # (name, pod, quotas, expected message or None)
    ("batch pod, limits.cpu quota", batch(), [q("compute", {"limits.cpu": "8"})],
     'pods "p" is forbidden: failed quota: compute: must specify limits.cpu for: app'
     + WHY.format(q="compute", res="limits.cpu")),
    ("batch pod, every constrained resource", batch(),
     [q("compute", {k: "8" for k in ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu",
                                     "limits.memory")})],
     'pods "p" is forbidden: failed quota: compute: must specify cpu for: app; limits.cpu for: app; limits.memory '
     "for: app; memory for: app; requests.cpu for: app; requests.memory for: app"
     + WHY.format(q="compute", res="cpu, limits.cpu, limits.memory, memory, requests.cpu, requests.memory")),
    ("batch pod, requests.memory quota", batch(), [q("mem", {"requests.memory": "8Gi"})],
     'pods "p" is forbidden: failed quota: mem: must specify requests.memory for: app'
     + WHY.format(q="mem", res="requests.memory")),
    ("batch pod, quotas on pods, count/pods and batch resources ask nothing", batch(),
     [q("n", {"pods": "10", "count/pods": "10", "requests.kubernetes.io/batch-cpu": "10k"})], None),
    ("batch pod is BestEffort: a NotBestEffort quota does not match it", batch(),
     [q("compute", {"limits.cpu": "8"}, scopes=["NotBestEffort"])], None),
    ("batch pod is BestEffort: a BestEffort quota matches it", batch(),
     [q("be", {"cpu": "8"}, scopes=["BestEffort"])],
     'pods "p" is forbidden: failed quota: be: must specify cpu for: app' + WHY_BE.format(q="be", res="cpu")),
    ("Terminating scope without activeDeadlineSeconds: no match", batch(),
     [q("t", {"cpu": "8"}, scopes=["Terminating"])], None),
    ("NotTerminating scope: a match", batch(), [q("t", {"cpu": "8"}, scopes=["NotTerminating"])],
     'pods "p" is forbidden: failed quota: t: must specify cpu for: app' + WHY.format(q="t", res="cpu")),
    ("PriorityClass In the class the pod has", batch(),
     [q("pc", {"cpu": "8"}, exprs=[scope("PriorityClass", "In", "koord-batch")])],
     'pods "p" is forbidden: failed quota: pc: must specify cpu for: app' + WHY.format(q="pc", res="cpu")),
    ("PriorityClass In another class", batch(),
     [q("pc", {"cpu": "8"}, exprs=[scope("PriorityClass", "In", "koord-prod")])], None),
    ("PriorityClass NotIn the pod's class", batch(),
     [q("pc", {"cpu": "8"}, exprs=[scope("PriorityClass", "NotIn", "koord-batch")])], None),
    ("PriorityClass Exists", batch(), [q("pc", {"cpu": "8"}, exprs=[scope("PriorityClass", "Exists")])],
     'pods "p" is forbidden: failed quota: pc: must specify cpu for: app' + WHY.format(q="pc", res="cpu")),
    ("PriorityClass DoesNotExist", batch(), [q("pc", {"cpu": "8"}, exprs=[scope("PriorityClass", "DoesNotExist")])],
     None),
    ("two quotas, the one that matches refuses", batch(),
     [q("a-prod", {"cpu": "8"}, exprs=[scope("PriorityClass", "In", "koord-prod")]),
      q("b-batch", {"limits.memory": "8Gi"}, exprs=[scope("PriorityClass", "In", "koord-batch")])],
     'pods "p" is forbidden: failed quota: b-batch: must specify limits.memory for: app'
     + WHY.format(q="b-batch", res="limits.memory")),
    ("two quotas that refuse: the first by name", batch(),
     [q("z", {"cpu": "8"}), q("a", {"memory": "8Gi"})],
     'pods "p" is forbidden: failed quota: a: must specify memory for: app' + WHY.format(q="a", res="memory")),
    ("init containers count, names sorted", pod(containers=[container("main", CPU1, CPU1)],
                                                init=[container("setup", {"memory": "1Gi"}), container("fetch")]),
     [q("compute", {"requests.cpu": "8"})],
     'pods "p" is forbidden: failed quota: compute: must specify requests.cpu for: fetch,setup'),
    ("a plain pod that sets what the quota asks", plain(CPU1, CPU1), [q("compute", {"limits.cpu": "8", "cpu": "8"})],
     None),
    ("a plain pod without limits gets the apiserver's text alone", plain(CPU1),
     [q("compute", {"limits.cpu": "8"})], 'pods "p" is forbidden: failed quota: compute: must specify limits.cpu for: main'),
    ("status.hard is what is tracked once the controller filled it", batch(),
     [{**q("compute", {"pods": "10"}), "status": {"hard": {"pods": "10", "cpu": "4"}}}],
     'pods "p" is forbidden: failed quota: compute: must specify cpu for: app' + WHY.format(q="compute", res="cpu")),
    ("a quota in another namespace counts for nothing", batch(), [quota("compute", ns="other", hard={"cpu": "8"})],
     None),
]


@pytest.mark.parametrize(("name", "obj", "quotas", "message"), CASES, ids=[c[0] for c in CASES])
def test_quota_constraints(name: str, obj: dict[str, Any], quotas: list[dict[str, Any]], message: str | None) -> None:
    explain: list[str] = []
    d = validate(obj, cluster=state(*quotas), explain=explain)
    if message is None:
        assert d.allowed, d.message
        assert any(line.startswith("[quota-constraints] quotas in") for line in explain)
    else:
        assert (d.allowed, d.code, d.reason, d.rule, d.message) == (False, 403, "Forbidden", "quota-constraints",
                                                                   message)


def _scoped(quota_obj: dict[str, Any], scope_name: str) -> dict[str, Any]:
    spec = quota_obj["spec"]
    return {**quota_obj, "spec": {**spec, "scopes": [*spec.get("scopes", []), scope_name]}}


def _with_hard(quota_obj: dict[str, Any], extra: dict[str, str]) -> dict[str, Any]:
    return {**quota_obj, "spec": {**quota_obj["spec"], "hard": {**quota_obj["spec"]["hard"], **extra}}}


BATCH_HARD = {"requests.kubernetes.io/batch-cpu": "10k", "requests.kubernetes.io/batch-memory": "64Gi"}
ADVICE_CASES = [
    # (name, refusing quota, the quota as an operator changes it, whether the pod is then admitted)
    ("the advised NotBestEffort scope lifts the denial", q("compute", {"limits.cpu": "8"}),
     lambda qo: _scoped(qo, "NotBestEffort"), True),
    ("the advised NotBestEffort scope, every constrained resource",
     q("compute", {k: "8" for k in ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory")}),
     lambda qo: _scoped(qo, "NotBestEffort"), True),
    ("the advised NotBestEffort scope beside a PriorityClass scope",
     q("pc", {"cpu": "8"}, exprs=[scope("PriorityClass", "In", "koord-batch")]), lambda qo: _scoped(qo, "NotBestEffort"),
     True),
    ("the old advice, batch resources in the quota, changes nothing", q("compute", {"limits.cpu": "8"}),
     lambda qo: _with_hard(qo, BATCH_HARD), False),
]


@pytest.mark.parametrize(("name", "refusing", "change", "admitted"), ADVICE_CASES, ids=[c[0] for c in ADVICE_CASES])
def test_the_advice_works(name: str, refusing: dict[str, Any], change: Any, admitted: bool) -> None:
    """Every way out the denial names, followed, admits the pod; what it no longer names would not."""
    refused = validate(batch(), cluster=state(refusing))
    assert not refused.allowed and "add the scope NotBestEffort to that quota" in refused.message
    assert "requests.kubernetes.io/batch-cpu" not in refused.message
    assert validate(batch(), cluster=state(change(refusing))).allowed is admitted


def test_update_is_not_checked() -> None:
    obj = batch()
    assert validate(obj, "UPDATE", old=obj, cluster=state(q("compute", {"cpu": "8"}))).allowed


def test_a_pod_the_profile_converts_is_refused_with_the_way_out(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Through both chains (`review`): the example profile converts the pod's cpu/memory in colo-demo, then the
    quota on limits.cpu would refuse it; scoped NotBestEffort, the same quota leaves it alone."""
    shutil.copytree(example_folder(), tmp_path / "state")
    compute = q("compute", {"limits.cpu": "8", "limits.memory": "16Gi"})
    (tmp_path / "state" / "quota.yaml").write_text(yaml.safe_dump(compute))
    worker = pod(name="worker", labels={"koordinator.sh/enable-colocation": "true"},
                 containers=[container("main", {"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"})])
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(worker))
    args = ["review", str(tmp_path / "pod.yaml"), "--cluster-state", str(tmp_path / "state"), "-o", "patch"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert ('denied by quota-constraints: pods "worker" is forbidden: failed quota: compute: must specify '
            "limits.cpu for: main; limits.memory for: main" + WHY.format(q="compute", res="limits.cpu, limits.memory")
            ) in err
    (tmp_path / "state" / "quota.yaml").write_text(yaml.safe_dump({**compute, "spec": {**compute["spec"],
                                                                                        "scopes": ["NotBestEffort"]}}))
    assert main(args) == 0, capsys.readouterr().err
