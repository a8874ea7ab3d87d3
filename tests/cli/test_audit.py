"""`colocation-webhook audit`: existing pods and pod templates through the webhook's own chains.

Objects are the recorded pods of a real cluster (tests/fixtures/api) and workloads built around their specs;
files are written as kubectl writes them (indented JSON, YAML Lists, manifests); the live source is the
replay API server answering paginated lists.
"""

from __future__ import annotations

import copy
import json
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.apiserver import ReplayAPIServer, load_exchange
from tests.cluster.test_live import serve_webhook_kinds, write_kubeconfig
from webhook.audit.files import ObjectsError, objects
from webhook.audit.findings import beyond_plugins
from webhook.cli.webhook import main

RECORDED = load_exchange("pods-list-field-selector-node")["response"]["body"]
MIXING = 'container "main" asks for both kubernetes.io/batch-cpu and cpu: a pod uses either batch resources'


def recorded(name: str) -> dict[str, Any]:
    pod: dict[str, Any] = copy.deepcopy(next(p for p in RECORDED["items"] if p["metadata"]["name"] == name))
    pod["kind"], pod["apiVersion"] = "Pod", "v1"   # as kubectl prints list items
    return pod


def plain() -> dict[str, Any]:
    """A pod in an unprofiled namespace, as the apiserver stored it (priority written by admission)."""
    pod = recorded("ls-web-0")
    pod["metadata"].update(name="plain", namespace="default", labels={"app": "web"})
    pod["spec"].pop("priorityClassName")
    pod["spec"].update(priority=0, preemptionPolicy="PreemptLowerPriority")
    return pod


def batch() -> dict[str, Any]:
    """A pod of the profiled namespace written before the webhook ran: native cpu/memory, no class."""
    pod = plain()
    pod["metadata"].update(name="batch", namespace="colo-demo",
                           labels={"app": "batch", "koordinator.sh/enable-colocation": "true"},
                           ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "batch-7d9c",
                                             "uid": "u", "controller": True}])
    return pod


def mixed() -> dict[str, Any]:
    pod = recorded("be-batch-0")
    pod["metadata"]["name"] = "mixed"
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    return pod


# The Priority plugin's output, as the apiserver stores it: (value, preemptionPolicy) of each class the tests use.
PREEMPT = "PreemptLowerPriority"
WRITTEN = {"": (0, PREEMPT), "standard": (100, "Never"), "high": (1000, PREEMPT), "koord-prod": (9000, PREEMPT),
           "system-node-critical": (2000001000, PREEMPT)}
EXAMPLE_STATE = Path(__file__).resolve().parents[2] / "webhook" / "cluster" / "example" / "state.yaml"
# Beside the example state's classes: one with the apiserver's default policy left out, and a global default.
HIGH = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000}
STANDARD = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "standard"},
            "value": 100, "globalDefault": True, "preemptionPolicy": "Never"}
BATCH_PROFILE = ("colocation profile colocation-profile-example applied: QoS BE, priorityClassName koord-batch; "
                 "converted cpu/memory to batch-cpu/batch-memory in 1 place(s) (koord-batch 5000)")


def state_dir(tmp_path: Path, *more: dict[str, Any]) -> Path:
    """The embedded example state and ``more`` objects, as a --cluster-state folder."""
    folder = tmp_path / "state"
    folder.mkdir()
    (folder / "example.yaml").write_text(EXAMPLE_STATE.read_text())
    (folder / "more.yaml").write_text(yaml.safe_dump_all(more))
    return folder


def written(pod: dict[str, Any], class_name: str) -> dict[str, Any]:
    """``pod`` as its user writes it: ``class_name`` or none, no priority."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    for key in ("priorityClassName", "priority", "preemptionPolicy"):
        spec.pop(key, None)
    if class_name:
        spec["priorityClassName"] = class_name
    return pod


def admitted(pod: dict[str, Any], class_name: str) -> dict[str, Any]:
    """``pod`` as the apiserver stored it: its class (the global default's where it named none), the Priority
    plugin's priority and preemptionPolicy."""
    pod = written(pod, class_name)
    value, policy = WRITTEN[class_name]
    pod["spec"].update(priority=value, preemptionPolicy=policy)
    return pod


def workload(kind: str, pod: dict[str, Any], name: str, owner: str = "") -> dict[str, Any]:
    """A ``kind`` whose pod template is made of ``pod``, owned by ``owner`` ("Kind/name") if given."""
    meta = pod["metadata"]
    template = {"metadata": {"labels": meta["labels"]},   # what a template never carries left out
                "spec": {k: v for k, v in pod["spec"].items() if k not in ("nodeName", "priority",
                                                                           "preemptionPolicy")}}
    if kind in ("Job", "CronJob"):
        template["spec"]["restartPolicy"] = "Never"
    spec: dict[str, Any] = {"selector": {"matchLabels": meta["labels"]}, "template": template}
    if kind == "Job":
        spec = {"template": template}
    elif kind == "CronJob":
        spec = {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": template}}}
    obj: dict[str, Any] = {"apiVersion": "batch/v1" if kind in ("Job", "CronJob") else "apps/v1", "kind": kind,
           "metadata": {"name": name, "namespace": meta["namespace"]}, "spec": spec}
    if owner:
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner.split("/")[0],
                                               "name": owner.split("/")[1], "uid": "u", "controller": True}]
    return obj


# Every audited kind made from one pod: (kind/name as audit reports it, its owner, the object).
OWNERS = {"Pod/app-7d9c-x": "ReplicaSet/app-7d9c", "Deployment/app": "", "StatefulSet/app": "", "DaemonSet/app": "",
          "ReplicaSet/app-7d9c": "Deployment/app", "Job/app-29000": "CronJob/app", "CronJob/app": ""}


def every_kind(pod: dict[str, Any], class_name: str, stored_class: str) -> list[dict[str, Any]]:
    """The pod (stored with ``stored_class``) and every workload kind with ``pod`` written with ``class_name``
    as its template, owned as in a cluster (a Deployment's ReplicaSet, a CronJob's Job)."""
    template = written(pod, class_name)
    stored = admitted(pod, stored_class)
    stored["metadata"].update(name="app-7d9c-x", ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app-7d9c", "uid": "u", "controller": True}])
    objs = [stored]
    for key, owner in OWNERS.items():
        kind, name = key.split("/")
        if kind != "Pod":
            objs.append(workload(kind, template, name, owner))
    return objs


def kubectl_list(items: list[Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def audit(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, str]], str]:
    code = main(["audit", "-o", "json", *args])
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


def verdicts(found: list[dict[str, str]]) -> dict[str, tuple[str, str]]:
    return {f"{f['kind']}/{f['name']}": (f["verdict"], f["reason"]) for f in found}


# -- what a finding says ----------------------------------------------------------------------------------------
def test_each_object_agrees_would_be_changed_or_would_be_denied(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    items = [plain(), batch(), mixed(), workload("Deployment", batch(), "web"), workload("CronJob", batch(), "nightly"),
             {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"}}]
    (tmp_path / "all.json").write_text(json.dumps(kubectl_list(items), indent=4))
    code, found, err = audit(["-f", str(tmp_path / "all.json"), "--all"], capsys)
    assert code == 1
    assert verdicts(found) == {
        "Pod/plain": ("agrees", ""),
        "Pod/batch": ("changed", "colocation-profile, batch-resources"),
        "Pod/mixed": ("denied", "batch-mixing"),
        "Deployment/web": ("changed", "colocation-profile, batch-resources"),
        "CronJob/nightly": ("changed", "colocation-profile, batch-resources"),
    }   # the Service has no pod: not audited
    by_name = {f["name"]: f for f in found}
    assert by_name["batch"]["owner"] == "ReplicaSet/batch-7d9c"
    assert by_name["batch"]["detail"] == ("colocation profile colocation-profile-example applied: QoS BE, "
                                          "priorityClassName koord-batch; converted cpu/memory to "
                                          "batch-cpu/batch-memory in 1 place(s) (koord-batch 5000)")
    assert by_name["mixed"]["detail"].startswith(MIXING)
    assert "audited 5 object(s): 1 agree, 3 would be changed, 1 would be denied" in err


def _stale(pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["priority"] = 7
    return pod


def _gone(pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"].update(priorityClassName="gone", priority=5)
    return pod


@pytest.mark.parametrize(("change", "default_class", "expected"), [
    (None, False, ("agrees", "")),
    # The Priority plugin gives a pod made again its class's value now, with or without this webhook.
    (_stale, False, ("agrees", "")),
    (None, True, ("agrees", "")),   # made before the default class: made again, it gets the default's
    # The plugin would refuse it, and what the rules would do after is unknown: a denial stays a finding.
    (_gone, False, ("denied", "priority")),
], ids=["as stored", "a priority its class no longer gives", "made before the default class", "class deleted"])
def test_a_pod_as_stored_agrees_though_admission_wrote_its_priority(
        change: Any, default_class: bool, expected: tuple[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """spec.priority and preemptionPolicy were written by the Priority plugin: what it would write again, or
    anew, is the apiserver's doing, not the rules'."""
    pod = plain()
    if change is not None:
        pod = change(pod)
    state = state_dir(tmp_path, *([STANDARD] if default_class else []))
    (tmp_path / "p.json").write_text(json.dumps(kubectl_list([pod])))
    code, found, _ = audit(["-f", str(tmp_path / "p.json"), "--cluster-state", str(state), "--all"], capsys)
    assert verdicts(found) == {"Pod/plain": expected}
    assert code == (0 if expected[0] == "agrees" else 1)
    if expected[0] == "denied":
        assert found[0]["detail"] == 'pods "plain" is forbidden: no PriorityClass with name gone was found'


@pytest.mark.parametrize("kind", ["Pod", "Deployment"])
def test_a_change_no_rule_warns_about_is_named_by_its_patch(kind: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A batch pod created before the webhook lacks the extended-resource-spec annotation it now writes; so
    does its Deployment's template, and the priority the plugin gives every pod is no part of the change."""
    pod = recorded("be-batch-0")
    obj = pod if kind == "Pod" else workload(kind, written(pod, "koord-batch"), "be-batch")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(obj))
    code, found, _ = audit(["-f", str(tmp_path / "p.yaml")], capsys)
    assert code == 1
    assert found[0]["verdict"] == "changed" and found[0]["reason"] == "batch-resources"
    assert found[0]["detail"] == "add /metadata/annotations (node.koordinator.sh/extended-resource-spec)"


def test_objects_that_cannot_be_audited_are_findings_not_crashes(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    no_template = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "x"},
                   "spec": {}}
    no_kind = {k: v for k, v in plain().items() if k != "kind"}   # a raw API list's item
    (tmp_path / "odd.json").write_text(json.dumps(kubectl_list([no_template, no_kind, 7])))
    code, found, err = audit(["-f", str(tmp_path / "odd.json")], capsys)
    assert code == 1
    details = [f["detail"] for f in found]
    assert details == ["no pod template at spec.template", f"{tmp_path / 'odd.json'}[item 1]: has no kind",
                       f"{tmp_path / 'odd.json'}[item 2]: holds int, not an object"]
    assert {f["verdict"] for f in found} == {"unusable"} and "3 could not be audited" in err


# -- what the apiserver does to every pod anyway is no finding ------------------------------------------------------
@pytest.mark.parametrize("default_class", [False, True], ids=["no default class", "a default class"])
@pytest.mark.parametrize("class_name", ["", "high", "koord-prod", "system-node-critical"])
def test_plain_workloads_of_every_kind_agree(class_name: str, default_class: bool, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Pod templates carry no spec.priority: the Priority plugin writes it into every pod (and the default
    class's name where the pod names none). Our priority rule writing the same is no finding: exit 0."""
    state = state_dir(tmp_path, HIGH, *([STANDARD] if default_class else []))
    stored_class = class_name or ("standard" if default_class else "")
    (tmp_path / "objects.json").write_text(json.dumps(kubectl_list(every_kind(plain(), class_name, stored_class))))
    code, found, err = audit(["-f", str(tmp_path / "objects.json"), "--cluster-state", str(state), "--all"], capsys)
    assert verdicts(found) == dict.fromkeys(OWNERS, ("agrees", ""))
    assert {f"{f['kind']}/{f['name']}": f["owner"] for f in found} == OWNERS
    assert code == 0, err


@pytest.mark.parametrize("default_class", [False, True], ids=["no default class", "a default class"])
def test_a_workload_a_profile_converts_is_named_with_its_owner(default_class: bool, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The profiled namespace: every kind is a finding, named with its owner, saying what the profile and the
    conversion change (a pod stored before the webhook ran carries the default class's priority, if any)."""
    state = state_dir(tmp_path, HIGH, *([STANDARD] if default_class else []))
    objs = every_kind(batch(), "", "standard" if default_class else "")
    (tmp_path / "objects.json").write_text(json.dumps(kubectl_list(objs)))
    code, found, _ = audit(["-f", str(tmp_path / "objects.json"), "--cluster-state", str(state)], capsys)
    assert code == 1
    assert verdicts(found) == dict.fromkeys(OWNERS, ("changed", "colocation-profile, batch-resources"))
    assert {f"{f['kind']}/{f['name']}": f["owner"] for f in found} == OWNERS
    assert {f["detail"] for f in found} == {BATCH_PROFILE}


TIERS = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"tier": tier}}}
         for ns, tier in (("shop", "prod"), ("basic", "basic"))] + [
    {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
     "metadata": {"name": f"{tier}-tier"},
     "spec": {"namespaceSelector": {"matchLabels": {"tier": tier}}, "priorityClassName": pc}}
    for tier, pc in (("prod", "koord-prod"), ("basic", "standard"))]


@pytest.mark.parametrize(("namespace", "class_name", "expected", "detail"), [
    # a class the plugin would not give: spec.priority changes from the default's 100 (or high's 1000) to 9000
    ("shop", "", "changed", "colocation profile prod-tier applied: priorityClassName koord-prod"),
    ("shop", "high", "changed", "colocation profile prod-tier applied: priorityClassName koord-prod"),
    ("basic", "high", "changed", "colocation profile basic-tier applied: priorityClassName standard"),
    # what the plugin gives anyway: the profile's class already, or the global default for a pod that names none
    ("shop", "koord-prod", "agrees", None),
    ("basic", "", "agrees", None),
], ids=["default->koord-prod", "high->koord-prod", "high->standard", "koord-prod already", "default->default"])
def test_a_profile_that_sets_another_priority_class_is_a_finding(namespace: str, class_name: str, expected: str,
                                                                 detail: str | None, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    state = state_dir(tmp_path, HIGH, STANDARD, *TIERS)
    pod = plain()
    pod["metadata"]["namespace"] = namespace
    (tmp_path / "objects.json").write_text(json.dumps(kubectl_list(every_kind(pod, class_name,
                                                                              class_name or "standard"))))
    code, found, _ = audit(["-f", str(tmp_path / "objects.json"), "--cluster-state", str(state), "--all"], capsys)
    reason = "colocation-profile" if expected == "changed" else ""
    assert verdicts(found) == dict.fromkeys(OWNERS, (expected, reason))
    assert code == (1 if expected == "changed" else 0)
    if detail is not None:
        assert {f["detail"] for f in found} == {detail}


def _op(path: str, value: Any, op: str = "add") -> dict[str, Any]:
    return {"op": op, "path": f"/spec/{path}", "value": value}


@pytest.mark.parametrize(("spec", "default", "ops", "left"), [
    # what the plugin writes: the pod's class's value and policy, the default's (and its name) where it names none
    ({"priorityClassName": "high"}, None, [_op("priority", 1000), _op("preemptionPolicy", PREEMPT)], []),
    ({}, STANDARD, [_op("priorityClassName", "standard"), _op("priority", 100), _op("preemptionPolicy", "Never")],
     []),
    ({}, None, [_op("priority", 0), _op("preemptionPolicy", PREEMPT)], []),
    # anything else stays: another class and its value, a value of another type, a removal, other fields
    ({}, STANDARD, [_op("priorityClassName", "high"), _op("priority", 1000), _op("preemptionPolicy", "Never")],
     [_op("priorityClassName", "high"), _op("priority", 1000)]),
    ({"priorityClassName": "high"}, None, [_op("priorityClassName", "standard")], [_op("priorityClassName", "standard")]),
    ({}, None, [_op("priority", 0.0), _op("priority", 0, "remove"), _op("schedulerName", "koord-scheduler")],
     [_op("priority", 0.0), _op("priority", 0, "remove"), _op("schedulerName", "koord-scheduler")]),
    # the plugin would refuse the pod (no such class): it writes nothing, so nothing is left out
    ({"priorityClassName": "gone"}, None, [_op("priority", 0)], [_op("priority", 0)]),
], ids=["own class", "default class", "no default", "another class", "class over the pod's", "not the plugin's",
        "the plugin refuses"])
def test_only_what_the_priority_plugin_writes_anyway_is_left_out(spec: dict[str, Any], default: dict[str, Any] | None,
                                                                 ops: list[dict[str, Any]],
                                                                 left: list[dict[str, Any]]) -> None:
    classes = {"high": HIGH, "standard": STANDARD}
    assert beyond_plugins({"spec": spec}, ops, classes.get, default) == left


# -- output and filters --------------------------------------------------------------------------------------------
def test_table_summary_and_filters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = batch()
    other["metadata"].update(name="other", namespace="default")
    (tmp_path / "pods.json").write_text(json.dumps(kubectl_list([plain(), batch(), mixed(), other,
                                                                 workload("Deployment", batch(), "web")]), indent=2))
    f = str(tmp_path / "pods.json")
    assert main(["audit", "-f", f]) == 1
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAMESPACE", "NAME", "OWNER", "VERDICT", "REASON", "DETAIL"]
    assert [line.split()[:4] for line in table[1:]] == [
        ["colo-demo", "pod/batch", "ReplicaSet/batch-7d9c", "changed"], ["colo-demo", "pod/mixed", "-", "denied"],
        ["colo-demo", "deployment/web", "-", "changed"]]   # agreeing objects only with --all
    assert main(["audit", "-f", f, "-o", "summary"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "VERDICT   REASON                                OBJECTS",
        "changed   colocation-profile, batch-resources   2",
        "denied    batch-mixing                          1",
        "agrees    -                                     2"]
    code, found, _ = audit(["-f", f, "--kinds", "deploy"], capsys)
    assert [x["name"] for x in found] == ["web"]
    code, found, _ = audit(["-f", f, "-n", "default", "--all"], capsys)
    assert code == 0 and [x["name"] for x in found] == ["plain", "other"]
    code, found, _ = audit(["-f", f, "-l", "app in (batch),koordinator.sh/enable-colocation", "--all"], capsys)
    assert [x["name"] for x in found] == ["batch", "other"]   # the Deployment's own labels: none


@pytest.mark.parametrize(("args", "message"), [
    (["--kinds", "pods,services"], "--kinds: unknown kind 'services'; audit reads pods, deployments"),
    (["-l", "a=b=c"], "-l 'a=b=c': cannot read the selector at 'a=b=c'"),
    (["-f", "/nonexistent.json"], "/nonexistent.json: cannot read: No such file or directory"),
    ([], "name what to audit: -f FILE|DIR"),
    (["--kubeconfig", "k"], "-f reads objects from files; --kubeconfig/--in-cluster from a cluster: choose one"),
])
def test_unusable_flags_and_files_exit_2_naming_them(args: list[str], message: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.json").write_text(json.dumps(plain()))
    if "-f" not in args and args != []:
        args = ["-f", str(tmp_path / "p.json"), *args]
    assert main(["audit", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("text", "message"), [
    ('{"items": [{"a": 1},', "bad.json: not valid JSON at character 20: Expecting value"),
    ('{"items": [{"a": 1} {"b": 2}]}', "bad.json: not valid JSON at character 20: expected ',' or ']', found '{'"),
    ("[1, 2]", "bad.json: holds a list of 2 items at the top level; expected objects or a List"),
    ("kind: Pod\nmetadata: [\n", "bad.json:3: invalid YAML"),
])
def test_a_broken_file_is_named_with_where(text: str, message: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text(text)
    assert main(["audit", "-f", str(tmp_path / "bad.json")]) == 2
    assert message in capsys.readouterr().err


# -- reading files ---------------------------------------------------------------------------------------------------
def test_every_layout_kubectl_writes_reads_the_same(tmp_path: Path) -> None:
    items = [plain(), batch(), mixed()]
    layouts = {
        "indented.json": json.dumps(kubectl_list(items), indent=4),
        "compact.json": json.dumps(kubectl_list(items)),
        "lines.json": "\n".join(json.dumps(i) for i in items),
        "list.yaml": yaml.safe_dump(kubectl_list(items)),
        "docs.yaml": "# three pods\n---\n" + "---\n".join(yaml.safe_dump(i) for i in items) + "---\n",
    }
    for name, text in layouts.items():
        (tmp_path / name).write_text(text)
        assert [o for _, o in objects([str(tmp_path / name)])] == items, name
    folder = [o for _, o in objects([str(tmp_path)])]
    assert folder == items * len(layouts)


def test_an_inner_object_closing_at_the_items_indentation_is_still_read_whole(tmp_path: Path) -> None:
    """The indented layout is cut at the first line that closes at the item's indentation; where an inner
    object closes there too, the cut text is no whole object and the general decoder reads it."""
    text = '{\n  "items": [\n    {\n      "kind": "Pod", "a": {\n    },\n      "b": 1\n    }\n  ]\n}\n'
    (tmp_path / "odd.json").write_text(text)
    assert [o for _, o in objects([str(tmp_path / "odd.json")])] == [{"kind": "Pod", "a": {}, "b": 1}]


def _peak_reading(path: Path) -> int:
    tracemalloc.start()
    try:
        for _ in objects([str(path)]):
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("fmt", "small", "large"), [("json", 100, 1500), ("yaml", 20, 300)])
def test_a_list_is_read_an_item_at_a_time(fmt: str, small: int, large: int, tmp_path: Path) -> None:
    """Memory while reading a List does not grow with its length (15 times the items, not twice the memory)."""
    peaks = []
    for n in (small, large):
        path = tmp_path / f"{n}.{fmt}"
        data = kubectl_list([plain() for _ in range(n)])
        path.write_text(json.dumps(data, indent=4) if fmt == "json" else yaml.safe_dump(data))
        peaks.append(_peak_reading(path))
    assert peaks[1] < 2 * peaks[0], peaks


def test_a_json_sequence_item_error_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"kind": "Pod"}\n{"kind": ')
    with pytest.raises(ObjectsError, match=r"x\.json: not valid JSON at character 25"):
        list(objects([str(tmp_path / "x.json")]))


# -- a live cluster --------------------------------------------------------------------------------------------------
PODS = "/api/v1/pods"
DEPLOYMENTS = "/apis/apps/v1/deployments"


def test_a_cluster_is_read_page_by_page_with_its_own_state(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with ReplayAPIServer(speed=20) as api:
        serve_webhook_kinds(api)
        # derived from the recorded pod list: its five pods in pages of two, then one Deployment
        pages = [RECORDED["items"][0:2], RECORDED["items"][2:4], RECORDED["items"][4:]]
        for i, page in reversed(list(enumerate(pages))):  # the first page's query matches them all: added last
            body = {**RECORDED, "items": page, "metadata": {"resourceVersion": "332",
                                                            **({"continue": f"page-{i + 1}"} if i < 2 else {})}}
            api.add_json("GET", PODS, body, query={"continue": f"page-{i}"} if i else {"limit": "2"},
                         watch=False)
        web = workload("Deployment", batch(), "web")
        api.add_json("GET", DEPLOYMENTS, {"kind": "DeploymentList", "apiVersion": "apps/v1",
                                          "metadata": {"resourceVersion": "332"},
                                          "items": [{k: v for k, v in web.items() if k not in ("kind", "apiVersion")}]},
                     watch=False)
        kubeconfig = write_kubeconfig(tmp_path, api.url)
        code, found, err = audit(["--kubeconfig", str(kubeconfig), "--kinds", "pods,deployments",
                                  "--page-size", "2", "-l", "app", "--all"], capsys)
        pod_lists = [r.query for r in api.requests_to("GET", PODS) if "watch" not in r.query]
        deployment_lists = [r.query for r in api.requests_to("GET", DEPLOYMENTS)]
    assert code == 1, err
    assert [q.get("continue") for q in pod_lists] == [None, "page-1", "page-2"]
    assert all(q["limit"] == "2" and q["labelSelector"] == "app" for q in pod_lists + deployment_lists)
    assert verdicts(found) == {
        "Pod/be-batch-0": ("changed", "batch-resources"), "Pod/be-batch-1": ("changed", "batch-resources"),
        "Pod/be-evict-ok": ("changed", "batch-resources"), "Pod/be-protected": ("changed", "batch-resources"),
        "Pod/ls-web-0": ("agrees", ""), "Deployment/web": ("changed", "colocation-profile, batch-resources")}
    assert "embedded example state" not in err   # the rules read the audited cluster's own state


def test_an_api_error_while_listing_exits_2_with_the_status(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    with ReplayAPIServer(speed=20) as api:
        serve_webhook_kinds(api)
        api.add_exchange("priorityclasses-get-missing-404", path=PODS)   # a recorded 404 Status
        code = main(["audit", "--kubeconfig", str(write_kubeconfig(tmp_path, api.url)), "--kinds", "po"])
    assert code == 2
    assert "listing pods: HTTP 404" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "expected"), [
    ("app=web", [{"key": "app", "operator": "In", "values": ["web"]}]),
    ("app==web, tier in (a, b),!canary,env!=dev,x", [
        {"key": "app", "operator": "In", "values": ["web"]}, {"key": "tier", "operator": "In", "values": ["a", "b"]},
        {"key": "canary", "operator": "DoesNotExist"}, {"key": "env", "operator": "NotIn", "values": ["dev"]},
        {"key": "x", "operator": "Exists"}]),
    ("a notin (b)", [{"key": "a", "operator": "NotIn", "values": ["b"]}]),
])
def test_kubectl_selector_syntax(text: str, expected: list[dict[str, Any]]) -> None:
    from webhook.core.selectors import parse_selector
    assert parse_selector(text) == {"matchExpressions": expected}


@pytest.mark.parametrize(("text", "message"), [
    ("a in ()", "values: Required value"), ("a=b=c", "cannot read the selector at 'a=b=c'"),
    ("(", "cannot read the selector at '('"),
])
def test_a_selector_kubectl_would_refuse_is_an_error(text: str, message: str) -> None:
    from webhook.core.selectors import SelectorError, parse_selector
    with pytest.raises(SelectorError, match=re.escape(message)):
        parse_selector(text)


def test_a_file_broken_half_way_shows_what_came_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "half.json").write_text('{"items": [' + json.dumps(mixed()) + ', {"kind": ')
    assert main(["audit", "-f", str(tmp_path / "half.json")]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[1].split()[:4] == ["colo-demo", "pod/mixed", "-", "denied"]
    assert "half.json: not valid JSON at character" in err


@pytest.mark.parametrize(("name", "text", "message"), [
    ("deep.json", '{"items": [' + "[" * 100_000 + "]" * 100_000 + "]}", ": nests too deeply to read"),
    ("deep.yaml", "a: " + "[" * 5_000 + "]" * 5_000 + "\n", ":1: invalid YAML: exceeded maximum nesting depth"),
])
def test_nesting_too_deep_to_read_is_named_not_a_traceback(name: str, text: str, message: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / name).write_text(text)
    assert main(["audit", "-f", str(tmp_path / name)]) == 2
    assert f"{tmp_path / name}{message}" in capsys.readouterr().err


def test_a_findings_warnings_are_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The server cuts each warning to the apiserver's 120 characters; audit's JSON holds them whole."""
    namespace = "a-namespace-name-of-sixty-three-characters-which-the-api-allows0"
    pod = plain()
    pod["metadata"]["namespace"] = namespace
    (tmp_path / "pod.json").write_text(json.dumps(pod))
    code, found, _ = audit(["-f", str(tmp_path / "pod.json"), "--all"], capsys)
    assert code == 0
    assert found[0]["detail"] == (f"namespace {namespace} is not in the webhook's cluster state; no colocation "
                                  "profile applied")


def test_migrate_names_a_conflict_and_leaves_it_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both protocols naming one resource (or the QoS) with different values: which is meant is the user's to say,
    so that part is left as it is and named with both values; the rest is migrated, the output still a script."""
    import shlex

    import jsonpatch

    old, new = "alibabacloud.com/reclaimed-cpu", "kubernetes.io/batch-cpu"
    deployment: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "old", "namespace": "team-a"},
                  "spec": {"template": {
                      "metadata": {"annotations": {"alibabacloud.com/qosClass": "BE"},
                                   "labels": {"koordinator.sh/qosClass": "LS"}},
                      "spec": {"containers": [
                          {"name": "main", "resources": {"requests": {old: "1000", new: "500"},
                                                         "limits": {old: "1k", new: 1000}}},
                          {"name": "side", "resources": {"requests": {old: "200"}}}]}}}}
    (tmp_path / "d.json").write_text(json.dumps(deployment))
    assert main(["audit", "-f", str(tmp_path / "d.json"), "--migrate", "-o", "json"]) == 1
    out, err = capsys.readouterr()
    found = json.loads(out)
    assert found["conflicts"] == [
        'annotation alibabacloud.com/qosClass "BE" and label koordinator.sh/qosClass "LS" differ: left as they are, '
        "keep the one meant",
        f'container "main" requests: {old} "1000" and {new} "500" differ: left as it is, keep the one meant']
    migrated = jsonpatch.apply_patch(deployment, found["patch"])["spec"]["template"]
    assert migrated["metadata"] == deployment["spec"]["template"]["metadata"]    # the QoS conflict: untouched
    main_res, side_res = (c["resources"] for c in migrated["spec"]["containers"])
    assert main_res == {"requests": {old: "1000", new: "500"}, "limits": {new: 1000}}  # the same amount: one name
    assert side_res == {"requests": {new: "200"}}
    assert err.strip() == ("audit --migrate: 1 of 1 object(s) use the legacy ack-slo-manager protocol; 2 conflict(s) "
                           "between the two protocols left as they are, named with their object")
    assert main(["audit", "-f", str(tmp_path / "d.json"), "--migrate"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["# Deployment team-a/old", *(f"# conflict: {c}" for c in found["conflicts"])]
    assert json.loads(shlex.split(lines[3])[8]) == found["patch"] and len(lines) == 4
