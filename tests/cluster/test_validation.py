"""Objects the apiserver would refuse are never used: the checks (webhook/cluster/validation.py, upstream's texts), a
files state that holds one (an error naming the file and line, the last good state kept on reload), and the live
source (left out with one warning and a metric, never a rule that raises)."""

from __future__ import annotations

import copy
import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.apiserver import ReplayAPIServer
from tests.cluster.test_live import PC, WEBHOOK_LISTS, live, pc_list_body, wait_for
from tests.mutating import mutate, pod
from webhook.cluster.files import FilesSource, StateFileError, load_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

LABEL_KEY = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
             "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
             "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
DNS_LABEL = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
             "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def pc(name: str = "high", **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, **fields}


def ns(name: str = "team-a", **labels: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def quota(spec: dict[str, Any], **status: Any) -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "team-a"},
           "spec": spec}
    if status:
        obj["status"] = status
    return obj


def limits(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "l", "namespace": "team-a"},
            "spec": {"limits": list(items)}}


def config_map(data: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"}, "data": data}


# -- the checks, upstream's texts -------------------------------------------------------------------------------------
CASES = [
    # (name, object, expected errors: (field path, text) in order)
    ("a class as the apiserver takes it", pc(value=1000, globalDefault=False, preemptionPolicy="Never"), []),
    ("a class without value has 0 (optional in scheduling.k8s.io/v1)", pc(), []),
    ("a YAML 1.0 is the JSON 1 kubectl sends", pc(value=1.0), []),
    ("a negative value", pc(value=-5), []),
    ("value a string", pc(value="high"),
     [(("value",), "json: cannot unmarshal string into Go struct field PriorityClass.value of type int32")]),
    ("value beyond int32", pc(value=99999999999),
     [(("value",), "json: cannot unmarshal number 99999999999 into Go struct field PriorityClass.value of type "
                   "int32")]),
    ("value 1.5", pc(value=1.5),
     [(("value",), "json: cannot unmarshal number 1.5 into Go struct field PriorityClass.value of type int32")]),
    ("value true", pc(value=True),
     [(("value",), "json: cannot unmarshal bool into Go struct field PriorityClass.value of type int32")]),
    ("globalDefault a string", pc(value=1, globalDefault="yes"),
     [(("globalDefault",), "json: cannot unmarshal string into Go struct field PriorityClass.globalDefault of "
                           "type bool")]),
    ("preemptionPolicy a number", pc(value=1, preemptionPolicy=1),
     [(("preemptionPolicy",), "json: cannot unmarshal number into Go struct field PriorityClass.preemptionPolicy "
                              "of type v1.PreemptionPolicy")]),
    ("a user class above one billion", pc(value=1_000_000_001),
     [(("value",), "value: Forbidden: maximum allowed value of a user defined priority is 1000000000")]),
    ("one billion is the most", pc(value=1_000_000_000), []),
    ("preemptionPolicy Sometimes", pc(value=1, preemptionPolicy="Sometimes"),
     [(("preemptionPolicy",), 'preemptionPolicy: Unsupported value: "Sometimes": supported values: '
                              '"PreemptLowerPriority", "Never"')]),
    ("preemptionPolicy empty", pc(value=1, preemptionPolicy=""), [(("preemptionPolicy",), "preemptionPolicy: Required value")]),
    ("a system class as the apiserver makes it", pc("system-node-critical", value=2000001000), []),
    ("a system class with another value", pc("system-cluster-critical", value=5),
     [(("metadata", "name"), "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved "
                             "for system use only. error: value of system-cluster-critical PriorityClass must be "
                             "2000000000")]),
    ("an unknown system- name", pc("system-mine", value=2_000_000_000),
     [(("metadata", "name"), "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved "
                             "for system use only. error: system-mine is not a known system priority class")]),
    ("a class name that is no DNS subdomain", pc("High", value=1),
     [(("metadata", "name"), 'metadata.name: Invalid value: "High": a lowercase RFC 1123 subdomain must consist of '
                             "lower case alphanumeric characters, '-' or '.', and must start and end with an "
                             "alphanumeric character (e.g. 'example.com', regex used for validation is "
                             "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")]),
    ("a namespace label unquoted true", ns("team-a", **{"koordinator.sh/enable-colocation": True}),
     [(("metadata", "labels", "koordinator.sh/enable-colocation"),
       "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.labels of type string")]),
    ("labels a list", {**ns(), "metadata": {"name": "team-a", "labels": ["a"]}},
     [(("metadata", "labels"), "json: cannot unmarshal array into Go struct field ObjectMeta.metadata.labels of "
                               "type map[string]string")]),
    ("a namespace name with a dot", ns("team.a"),
     [(("metadata", "name"), 'metadata.name: Invalid value: "team.a": must not contain dots')]),
    ("a label key and value the apiserver refuses", ns(**{"a b": "x y"}),
     [(("metadata", "labels", "a b"), f'metadata.labels: Invalid value: "a b": {LABEL_KEY}'),
      (("metadata", "labels", "a b"), 'metadata.labels: Invalid value: "x y": a valid label must be an empty string '
                                      "or consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                                      "with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
                                      "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")]),
    ("annotations over 256 KiB", {**ns(), "metadata": {"name": "team-a", "annotations": {"a": "x" * 262144}}},
     [(("metadata", "annotations"), "metadata.annotations: Too long: may not be more than 262144 bytes")]),
    ("a quota as the apiserver takes it",
     quota({"hard": {"cpu": "10", "pods": 20, "requests.nvidia.com/gpu": "2", "count/pods": "5"},
            "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In",
                                                    "values": ["koord-batch"]}]}},
           hard={"cpu": "10"}, used={"cpu": "1500m"}), []),
    ("a quota amount that is no quantity", quota({"hard": {"cpu": "ten"}}),
     [(("spec", "hard", "cpu"), 'spec.hard[cpu]: Invalid value: "ten": quantities must match the regular expression '
                                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]),
    ("a quota's status amount that is no quantity", quota({"hard": {"cpu": "1"}}, used={"cpu": True}),
     [(("status", "used", "cpu"), "status.used[cpu]: Invalid value: true: quantities must match the regular "
                                  "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]),
    ("negative, fractional pods, a name no quota knows", quota({"hard": {"cpu": "-1", "pods": "1500m", "foo": "1"}}),
     [(("spec", "hard", "cpu"), 'spec.hard[cpu]: Invalid value: "-1": must be greater than or equal to 0'),
      (("spec", "hard", "pods"), 'spec.hard[pods]: Invalid value: "1500m": must be an integer'),
      (("spec", "hard", "foo"), 'spec.hard[foo]: Invalid value: "foo": must be a standard resource type or fully '
                                "qualified"),
      (("spec", "hard", "foo"), 'spec.hard[foo]: Invalid value: "foo": must be a standard resource for quota')]),
    ("scopes: unknown, conflicting, not for the resource",
     quota({"hard": {"cpu": "1"}, "scopes": ["Forever", "BestEffort", "NotBestEffort"]}),
     [(("spec", "scopes"), 'spec.scopes: Invalid value: ["Forever","BestEffort","NotBestEffort"]: unsupported scope'),
      (("spec", "scopes"), 'spec.scopes: Invalid value: ["Forever","BestEffort","NotBestEffort"]: unsupported scope '
                           "applied to resource"),
      (("spec", "scopes"), 'spec.scopes: Invalid value: ["Forever","BestEffort","NotBestEffort"]: conflicting '
                           "scopes")]),
    ("a scope selector's operator and values",
     quota({"scopeSelector": {"matchExpressions": [
         {"scopeName": "PriorityClass", "operator": "In"},
         {"scopeName": "BestEffort", "operator": "In", "values": ["x"]},
         {"scopeName": "PriorityClass", "operator": "Exists", "values": ["x"]},
         {"scopeName": "PriorityClass", "operator": "Equals", "values": ["x"]}]}}),
     [(("spec", "scopeSelector", "matchExpressions", 0, "values"),
       "spec.scopeSelector.matchExpressions.values: Required value: must be at least one value when `operator` is "
       "'In' or 'NotIn' for scope selector"),
      (("spec", "scopeSelector", "matchExpressions", 1, "operator"),
       'spec.scopeSelector.matchExpressions.operator: Invalid value: "In": must be \'Exists\' when scope is any of '
       "ResourceQuotaScopeTerminating, ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, "
       "ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity"),
      (("spec", "scopeSelector", "matchExpressions", 2, "values"),
       'spec.scopeSelector.matchExpressions.values: Invalid value: ["x"]: must be no value when `operator` is '
       "'Exist' or 'DoesNotExist' for scope selector"),
      (("spec", "scopeSelector", "matchExpressions", 3, "operator"),
       'spec.scopeSelector.matchExpressions.operator: Invalid value: "Equals": not a valid selector operator')]),
    ("a scope selector's operator a number",
     quota({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": 1}]}}),
     [(("spec", "scopeSelector", "matchExpressions", 0, "operator"),
       "json: cannot unmarshal number into Go struct field ScopedResourceSelectorRequirement."
       "spec.scopeSelector.matchExpressions.operator of type v1.ScopeSelectorOperator")]),
    ("a quota namespace that is no DNS label", {**quota({}), "metadata": {"name": "q", "namespace": "Team_A"}},
     [(("metadata", "namespace"), f'metadata.namespace: Invalid value: "Team_A": {DNS_LABEL}')]),
    ("a LimitRange as the apiserver takes it",
     limits({"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "2"}, "default": {"cpu": "1"},
             "defaultRequest": {"cpu": "500m"}, "maxLimitRequestRatio": {"cpu": "4"}},
            {"type": "Pod", "max": {"memory": "8Gi"}},
            {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}}), []),
    ("min above max, a ratio below 1, a second Container item, a Pod default",
     limits({"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"}, "maxLimitRequestRatio": {"cpu": "0.5"}},
            {"type": "Container"}, {"type": "Pod", "default": {"cpu": 1}}),
     [(("spec", "limits", 0, "min", "cpu"), 'spec.limits[0].min[cpu]: Invalid value: "2": min value 2 is greater '
                                            "than max value 1"),
      (("spec", "limits", 0, "maxLimitRequestRatio", "cpu"),
       'spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: "500m": ratio 500m is less than 1'),
      (("spec", "limits", 1, "type"), 'spec.limits[1].type: Duplicate value: "Container"'),
      (("spec", "limits", 2, "default"), "spec.limits[2].default: Forbidden: may not be specified when `type` is "
                                         "'Pod'")]),
    ("a ratio above max/min, a type no one knows, a PVC item without storage",
     limits({"type": "Container", "min": {"cpu": "1"}, "max": {"cpu": "2"}, "maxLimitRequestRatio": {"cpu": "3"}},
            {"type": "Node"}, {"type": "PersistentVolumeClaim"}),
     [(("spec", "limits", 0, "maxLimitRequestRatio", "cpu"),
       'spec.limits[0].maxLimitRequestRatio[cpu]: Invalid value: "3": ratio 3 is greater than max/min = 2.000000'),
      (("spec", "limits", 1, "type"), 'spec.limits[1].type: Invalid value: "Node": must be a standard limit type or '
                                      "fully qualified"),
      (("spec", "limits", 2, "limits"), "spec.limits[2].limits: Required value: either minimum or maximum storage "
                                        "value is required, but neither was provided")]),
    ("a LimitRange resource no container has", limits({"type": "Container", "max": {"storage": "1Gi"}}),
     [(("spec", "limits", 0, "max", "storage"),
       'spec.limits[0].max[storage]: Invalid value: "storage": must be a standard resource for containers')]),
    ("a ConfigMap value unquoted", config_map({"colocation-config": 1}),
     [(("data", "colocation-config"), "json: cannot unmarshal number into Go struct field ConfigMap.data of type "
                                      "string")]),
    ("a ConfigMap key with a space", config_map({"a b": "x"}),
     [(("data", "a b"), "data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric "
                        "characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used "
                        "for validation is '[-._a-zA-Z0-9]+')")]),
]


@pytest.mark.parametrize(("name", "obj", "expected"), CASES, ids=[c[0] for c in CASES])
def test_object_errors(name: str, obj: dict[str, Any], expected: list[tuple[Any, str]]) -> None:
    from webhook.cluster.validation import object_errors

    assert object_errors(obj) == expected


def test_every_shipped_state_passes() -> None:
    """The embedded example, manifests/ and the recorded API lists are what a cluster holds: nothing refused."""
    from harness.apiserver import load_exchange
    from webhook.cluster.validation import object_errors

    root = Path(__file__).resolve().parents[2]
    objects = [o for folder in (root / "webhook/cluster/example", root / "manifests")
               for kind in load_folder(folder).values() for o in kind]
    for name, _ in WEBHOOK_LISTS.values():
        kind = {"priorityclasses": "PriorityClass", "namespaces": "Namespace", "resourcequotas": "ResourceQuota",
                "limitranges": "LimitRange", "clustercolocationprofiles": "ClusterColocationProfile",
                "configmaps": "ConfigMap"}[name.split("-")[0]]
        objects += [{**o, "kind": kind} for o in load_exchange(name)["response"]["body"]["items"]]
    assert objects
    assert [(o["kind"], o["metadata"]["name"], object_errors(o)) for o in objects if object_errors(o)] == []


# -- a files state ------------------------------------------------------------------------------------------------------
def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


FILE_CASES = [
    # (name, file text, the error after "<file>:")
    ("a class value as a string", """\
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: high}
        value: "high"
        """, '4: PriorityClass high: json: cannot unmarshal string into Go struct field PriorityClass.value of type '
             'int32'),
    ("beyond int32", """\
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: high}
        value: 99999999999
        """, "4: PriorityClass high: json: cannot unmarshal number 99999999999 into Go struct field "
             "PriorityClass.value of type int32"),
    ("1.5", """\
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: high}
        value: 1.5
        """, "4: PriorityClass high: json: cannot unmarshal number 1.5 into Go struct field PriorityClass.value of "
             "type int32"),
    ("true", """\
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: high}
        value: true
        """, "4: PriorityClass high: json: cannot unmarshal bool into Go struct field PriorityClass.value of type "
             "int32"),
    ("preemptionPolicy Sometimes", """\
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: high}
        value: 10
        preemptionPolicy: Sometimes
        """, '5: PriorityClass high: preemptionPolicy: Unsupported value: "Sometimes": supported values: '
             '"PreemptLowerPriority", "Never"'),
    ("two globalDefault classes", """\
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: a}
        value: 10
        globalDefault: true
        ---
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: b}
        value: 5
        globalDefault: true
        """, "11: PriorityClass b: PriorityClass a is already marked as default. Only one default can exist "
             "(at {file}:1)"),
    ("one name twice, in a List", """\
        apiVersion: v1
        kind: List
        items:
        - apiVersion: v1
          kind: Namespace
          metadata: {name: team-a}
        - apiVersion: v1
          kind: Namespace
          metadata: {name: team-a, labels: {x: "y"}}
        """, '7: Namespace team-a: namespaces "team-a" already exists; it is also at {file}:4, and a state holds '
             "each object once"),
    ("a quota amount that is no quantity", """\
        apiVersion: v1
        kind: ResourceQuota
        metadata: {name: q, namespace: team-a}
        spec:
          hard:
            cpu: ten
        """, '6: ResourceQuota team-a/q: spec.hard[cpu]: Invalid value: "ten": quantities must match the regular '
             "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
    ("a LimitRange with min above max", """\
        apiVersion: v1
        kind: LimitRange
        metadata: {name: l}
        spec:
          limits:
          - type: Container
            max: {memory: 1Gi}
            min: {memory: 2Gi}
        """, '8: LimitRange default/l: spec.limits[0].min[memory]: Invalid value: "2Gi": min value 2Gi is greater '
             "than max value 1Gi"),
]


@pytest.mark.parametrize(("name", "text", "error"), FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_a_files_state_refuses_what_the_apiserver_would(tmp_path: Path, name: str, text: str, error: str) -> None:
    path = write(tmp_path, "state.yaml", text)
    with pytest.raises(StateFileError) as caught:
        load_folder(tmp_path)
    assert str(caught.value) == f"{path}:" + error.replace("{file}", str(path))


def test_a_reload_that_meets_an_invalid_object_keeps_the_last_good_state(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    from webhook.server.metrics import Metrics

    path = write(tmp_path, "pc.yaml", """\
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: koord-batch}
        value: 5000
        """)
    state = ClusterState(WEBHOOK_KINDS)
    source = FilesSource(tmp_path, state)
    source.load()
    path.write_text(path.read_text().replace("5000", '"high"'))
    assert source.reload() is False
    kept = state.priority_class("koord-batch")
    assert kept is not None and kept["value"] == 5000
    why = f"{path}:4: PriorityClass koord-batch: json: cannot unmarshal string into Go struct field " \
          "PriorityClass.value of type int32"
    assert state.reload_error == why
    text = _scrape(Metrics(state))
    assert "colocation_webhook_cluster_state_reload_failing 1.0" in text
    assert "colocation_webhook_cluster_state_reload_failures_total 1.0" in text
    path.write_text(path.read_text().replace('"high"', "6000"))
    assert source.reload() is True
    reloaded = state.priority_class("koord-batch")
    assert reloaded is not None and reloaded["value"] == 6000
    assert "colocation_webhook_cluster_state_reload_failing 0.0" in _scrape(Metrics(state))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        f"cluster state reload failed, keeping the last good state: {why}"]


def _scrape(metrics: Any) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


def test_a_cluster_scoped_object_keeps_no_namespace(tmp_path: Path) -> None:
    """The apiserver drops the namespace of a cluster-scoped object (rest.BeforeCreate): a PriorityClass written
    with one is found by its name, as in the cluster."""
    write(tmp_path, "pc.yaml", """\
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: koord-batch, namespace: default}
        value: 5000
        """)
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(tmp_path, state).load()
    assert state.priority_class("koord-batch") is not None


def test_a_mounted_config_map_is_read_once(tmp_path: Path) -> None:
    """A ConfigMap volume holds each key as a link into ``..data``, itself a link to a ``..<time>`` folder: the
    hidden entries are not read, so the objects are not there twice."""
    real = tmp_path / "..2026_11_28_10_00_00.1"
    write(real, "state.yaml", yaml.safe_dump(pc("koord-batch", value=5000)))
    (tmp_path / "..data").symlink_to(real.name)
    (tmp_path / "state.yaml").symlink_to("..data/state.yaml")
    assert [o["metadata"]["name"] for o in load_folder(tmp_path)["PriorityClass"]] == ["koord-batch"]


def test_a_symlinked_folder_is_read_and_a_loop_ends(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    write(shared, "pc.yaml", yaml.safe_dump(pc("koord-batch", value=5000)))
    state = tmp_path / "state"
    state.mkdir()
    (state / "base").symlink_to(shared)
    (shared / "loop").symlink_to(shared)
    assert [o["metadata"]["name"] for o in load_folder(state)["PriorityClass"]] == ["koord-batch"]


# -- the live source -----------------------------------------------------------------------------------------------------
def test_live_leaves_out_an_invalid_object_with_one_warning_and_a_metric(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """No real apiserver serves such a class; a replayed one does, and the rule that reads it never raises."""
    from webhook.server.metrics import Metrics

    caplog.set_level(logging.INFO, logger="webhook.cluster.live")
    bad = copy.deepcopy(pc_list_body()["items"][0])
    bad["metadata"].update(name="high", uid="uid-high", resourceVersion="400")
    bad["value"] = "high"
    with ReplayAPIServer(speed=20) as api:
        for kind, (name, path) in WEBHOOK_LISTS.items():
            if kind == "PriorityClass":
                api.add_json("GET", path, pc_list_body(extra=[bad]))
            else:
                api.add_exchange(name, path=path)
            api.add_watch(path, [{"type": "MODIFIED", "object": bad}] if path == PC else [])
        state = ClusterState(WEBHOOK_KINDS)
        with live(state, api.url, tmp_path) as src:
            wait_for(lambda: state.ready and src.status()["PriorityClass"].events, what="the sync and the event")
            assert state.priority_class("high") is None
            assert state.invalid("PriorityClass") == {("", "high"): (
                "json: cannot unmarshal string into Go struct field PriorityClass.value of type int32")}
            decision, _ = mutate(pod("p", "default", priorityClassName="high"), state)
            assert not decision.allowed
            assert decision.message.endswith("no PriorityClass with name high was found")
            assert 'colocation_webhook_cache_invalid_objects{kind="PriorityClass"} 1.0' in _scrape(Metrics(state))
    warned = [r.getMessage() for r in caplog.records if "PriorityClass high" in r.getMessage()]
    assert warned == ["PriorityClass high: json: cannot unmarshal string into Go struct field PriorityClass.value of "
                      "type int32; not applied until it is fixed"]


def test_a_kustomize_overlay_patch_is_a_second_object_and_says_so(tmp_path: Path) -> None:
    """Read as it is, an overlay's patch would replace the base's object, or be replaced by it: which one the
    cluster holds is kustomize's output, not the folder."""
    base = write(tmp_path, "base/ns.yaml", yaml.safe_dump(ns("team-a")))
    write(tmp_path, "overlay/kustomization.yaml", "resources: [../base]\npatches: [{path: ns.yaml}]\n")
    patch = write(tmp_path, "overlay/ns.yaml", yaml.safe_dump(ns("team-a", colocation="on")))
    with pytest.raises(StateFileError) as caught:
        load_folder(tmp_path)
    assert str(caught.value) == (
        f'{patch}:1: Namespace team-a: namespaces "team-a" already exists; it is also at {base}:1, and a state '
        "holds each object once; a kustomize overlay's patch is no object of its own: give the state kustomize "
        "builds (kubectl kustomize DIR > FILE)")


def test_an_object_that_turns_invalid_leaves_the_state_and_comes_back_fixed() -> None:
    """What the live source's watch does (ClusterState.upsert with a reason): the class is gone while invalid, a
    profile stays marked."""
    state = ClusterState(WEBHOOK_KINDS)
    state.upsert("PriorityClass", pc("koord-batch", value=5000))
    state.upsert("PriorityClass", pc("koord-batch", value="high"), invalid="bad value")
    assert state.priority_class("koord-batch") is None
    assert state.invalid_counts()["PriorityClass"] == 1
    state.upsert("PriorityClass", pc("koord-batch", value=5001))
    valid = state.priority_class("koord-batch")
    assert valid is not None and valid["value"] == 5001
    assert state.invalid_counts()["PriorityClass"] == 0
    profile = {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
               "metadata": {"name": "p"}, "spec": {}}
    state.upsert("ClusterColocationProfile", profile, invalid="unknown field")
    assert [(p.name, p.error) for p in state.colocation_profiles()] == [("p", "unknown field")]
