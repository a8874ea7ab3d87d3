"""A misspelled field in the cluster state is an error naming its path, as kubectl's strict field validation says
it (``unknown field "spec.selecter"``), never a silent default: a profile with ``selecter:`` would match every pod.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.apiserver import API_FIXTURES
from tests.mutating import labels_of, make_state, mutate, namespace, pod, profile
from webhook.cli import agent as agent_cli
from webhook.cli import webhook as webhook_cli
from webhook.cluster.files import FilesSource, StateFileError, load_folder
from webhook.cluster.state import AGENT_KINDS, KINDS, WEBHOOK_KINDS, ClusterState
from webhook.cluster.strict import check

CCP = "apiVersion: config.koordinator.sh/v1alpha1\nkind: ClusterColocationProfile\nmetadata:\n  name: colo-be\n"
PC = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: koord-batch\nvalue: 5000\n"
RQ = "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: q\n  namespace: prod-apps\nspec:\n"
POD = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: be-0\n  namespace: colo-demo\nspec:\n  containers:\n"


pytestmark = pytest.mark.usefixtures("restore_logging")


# -- the files source: path:line: Kind name: unknown field "..." ------------------------------------------
@pytest.mark.parametrize("name,file,text,line,message", [
    ("profile selecter", "p.yaml", CCP + "spec:\n  qosClass: BE\n  selecter:\n    matchLabels: {app: batch}\n", 7,
     'ClusterColocationProfile colo-be: unknown field "spec.selecter"'),
    ("profile selector field (LabelSelector)", "p.yaml", CCP + "spec:\n  selector:\n    matchLabel: {app: batch}\n", 7,
     'ClusterColocationProfile colo-be: unknown field "spec.selector.matchLabel"'),
    ("profile expression field", "p.yaml",
     CCP + "spec:\n  namespaceSelector:\n    matchExpressions:\n    - key: team\n      operater: In\n", 9,
     'ClusterColocationProfile colo-be: unknown field "spec.namespaceSelector.matchExpressions[0].operater"'),
    ("profile metadata", "p.yaml", CCP + "  lables: {a: b}\nspec: {}\n", 5,
     'ClusterColocationProfile colo-be: unknown field "metadata.lables"'),
    ("profile top level", "p.yaml", CCP + "sepc:\n  qosClass: BE\n", 5,
     'ClusterColocationProfile colo-be: unknown field "sepc"'),
    ("profile status", "p.yaml", CCP + "spec: {}\nstatus:\n  phase: x\n", 7,
     'ClusterColocationProfile colo-be: unknown field "status.phase"'),
    ("profile two fields, file order", "p.yaml", CCP + "spec:\n  qosclass: BE\n  probabilty: 50\n", 6,
     'ClusterColocationProfile colo-be: unknown field "spec.qosclass", unknown field "spec.probabilty"'),
    ("priority class", "pc.yaml", PC + "preemptionpolicy: Never\n", 6,
     'PriorityClass koord-batch: unknown field "preemptionpolicy"'),
    ("namespace", "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: colo-demo\n  lables:\n    a: b\n", 5,
     'Namespace colo-demo: unknown field "metadata.lables"'),
    ("resource quota", "rq.yaml", RQ + "  hrad:\n    pods: '1'\n", 7, 'ResourceQuota prod-apps/q: unknown field "spec.hrad"'),
    ("resource quota scope selector", "rq.yaml",
     RQ + "  scopeSelector:\n    matchExpressions:\n    - scopename: PriorityClass\n      operator: In\n", 9,
     'ResourceQuota prod-apps/q: unknown field "spec.scopeSelector.matchExpressions[0].scopename"'),
    ("config map", "cm.yaml", ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: slo-controller-config\n"
                               "  namespace: koordinator-system\ndate:\n  colocation-config: '{}'\n"), 6,
     'ConfigMap koordinator-system/slo-controller-config: unknown field "date"'),
    ("pod container", "pod.yaml", POD + "  - name: a\n    image: x\n  - nmae: b\n    image: y\n", 10,
     'Pod colo-demo/be-0: unknown field "spec.containers[1].nmae"'),
    ("pod resources", "pod.yaml", POD + "  - name: a\n    resources:\n      limit: {cpu: '1'}\n", 10,
     'Pod colo-demo/be-0: unknown field "spec.containers[0].resources.limit"'),
    ("node status", "node.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus:\n  capacitty: {cpu: '8'}\n", 5,
     'Node n1: unknown field "status.capacitty"'),
    ("second document", "two.yaml", PC + "---\n" + CCP + "spec:\n  selecter: {}\n", 12,
     'ClusterColocationProfile colo-be: unknown field "spec.selecter"'),
    ("item of a List", "list.yaml", "apiVersion: v1\nkind: List\nitems:\n- " + PC.replace("\n", "\n  ").rstrip()
     + "\n- " + CCP.replace("\n", "\n  ") + "spec:\n    selecter: {}\n", 14,
     'ClusterColocationProfile colo-be: unknown field "spec.selecter"'),
    ("JSON List item", "ns.json", json.dumps({"apiVersion": "v1", "kind": "NamespaceList", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b", "lables": {}}}]}, indent=1), 17,
     'Namespace b: unknown field "metadata.lables"'),
])
def test_unknown_field_names_file_line_object_and_path(tmp_path: Path, name: str, file: str, text: str, line: int,
                                                       message: str) -> None:
    (tmp_path / file).write_text(text)
    with pytest.raises(StateFileError) as exc:
        load_folder(tmp_path)
    assert str(exc.value) == f"{tmp_path / file}:{line}: {message}"


@pytest.mark.parametrize("name,obj", [
    ("every Koordinator field, free-form patch, IntOrString", {
        "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
        "metadata": {"name": "p", "labels": {"any/key": "v"}, "annotations": {"config.koordinator.sh/skip-update-resources": ""},
                     "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:anything": {}}}}]},
        "spec": {"namespaceSelector": {"matchLabels": {"a": "b"}},
                 "selector": {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]},
                 "probability": "50%", "qosClass": "BE", "priorityClassName": "koord-batch", "koordinatorPriority": 1,
                 "labels": {"x": "y"}, "annotations": {"x": "y"}, "labelKeysMapping": {"a": "b"},
                 "annotationKeysMapping": {"a": "b"}, "labelSuffixes": {"a": "-x"}, "schedulerName": "koord-scheduler",
                 "patch": {"spec": {"anything": [{"goes": 1}]}, "metadata": {"labels": {"a": "b"}}}},
        "status": {}}),
    ("pod with IntOrString, quantities as numbers, overhead", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
        "spec": {"overhead": {"cpu": "1"}, "containers": [
            {"name": "a", "resources": {"limits": {"cpu": 1}},
             "livenessProbe": {"httpGet": {"port": "http", "path": "/"}}}]},
        "status": {"phase": "Running"}}),
    ("a kind the state does not hold", {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                                        "spec": {"replicaz": 3}}),
])
def test_known_fields_pass(name: str, obj: dict[str, Any]) -> None:
    assert check(obj) is None


def _recorded_objects() -> list[tuple[str, dict[str, Any]]]:
    """Every object of a kind the state holds in the recorded apiserver answers (lists, gets, watch events)."""
    out: list[tuple[str, dict[str, Any]]] = []

    def visit(value: Any, where: str, list_kind: str | None = None) -> None:
        if isinstance(value, list):
            for v in value:
                visit(v, where, list_kind)
            return
        if not isinstance(value, dict):
            return
        kind = value.get("kind") or list_kind
        if kind in KINDS and isinstance(value.get("metadata"), dict):
            out.append((where, {**value, "kind": kind}))
        list_of = value["kind"][:-4] if str(value.get("kind", "")).endswith("List") else None
        for key in ("items", "object", "body", "body_lines", "response"):
            if key in value:
                visit(value[key], where, list_of if key == "items" else None)

    for path in sorted(API_FIXTURES.glob("*.json")):
        visit(json.loads(path.read_text()), path.name)
    return out


def test_recorded_apiserver_objects_have_no_unknown_fields() -> None:
    objects = _recorded_objects()
    # every held kind is covered by a recording, but LimitRange: the recorded cluster had none (the next test)
    assert {o["kind"] for _, o in objects} == set(KINDS) - {"LimitRange"}
    assert [(where, check(o)) for where, o in objects if check(o)] == []


def test_a_limitrange_is_checked_against_its_api_schema() -> None:
    """LimitRange as the API documents it (core/v1 LimitRangeItem): every field known; a misspelled one named."""
    lr: dict[str, Any] = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits", "namespace": "team-a"},
          "spec": {"limits": [{"type": "Container", "min": {"cpu": "10m"}, "max": {"cpu": "2"},
                               "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"},
                               "maxLimitRequestRatio": {"cpu": "4"}},
                              {"type": "Pod", "max": {"memory": "8Gi"}}]}}
    assert check(lr) is None
    lr["spec"]["limits"][0]["defualt"] = {"cpu": "1"}
    assert check(lr) == 'unknown field "spec.limits[0].defualt"'


# -- start-up: both programs exit 2 with the same message -----------------------------------------------------
def test_start_up_exits_2_with_path_line_in_both_programs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "profiles.yaml").write_text(CCP + "spec:\n  qosClass: BE\n  selecter:\n    matchLabels: {app: batch}\n")
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod("p", "colo-demo")))
    expected = f'--cluster-state: {state / "profiles.yaml"}:7: ClusterColocationProfile colo-be: unknown field "spec.selecter"\n'

    assert webhook_cli.main(["review", str(tmp_path / "pod.yaml"), "--cluster-state", str(state)]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "colocation-webhook: " + expected)

    assert agent_cli.main(["once", "--node-name", "n", "--cluster-state", str(state), "--cpu-sample-seconds", "0"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "colocation-agent: " + expected)


# -- reload: keep the last good state, say so once -------------------------------------------------------------
def test_reload_keeps_last_good_state_and_logs_each_error_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "profiles.yaml"
    f.write_text(CCP + "spec:\n  qosClass: BE\n  selector:\n    matchLabels: {app: batch}\n")
    state = ClusterState(WEBHOOK_KINDS)
    src = FilesSource(tmp_path, state)
    src.load()
    caplog.set_level(logging.INFO, logger="webhook.cluster.files")
    steps = [
        ("typo", CCP + "spec:\n  qosClass: BE\n  selecter:\n    matchLabels: {app: batch}\n"),
        ("same typo, file touched again", CCP + "spec:\n  qosClass: BE\n  selecter:\n    matchLabels: {app: web}\n"),
        ("another typo", CCP + "spec:\n  qosClass: BE\n  selector:\n    matchLabel: {app: batch}\n"),
        ("fixed", CCP + "spec:\n  qosClass: LS\n  selector:\n    matchLabels: {app: batch}\n"),
        ("changed again", CCP + "spec:\n  qosClass: BE\n  selector:\n    matchLabels: {app: batch}\n"),
    ]
    seen = []
    for step, text in steps:
        caplog.clear()
        f.write_text(text)
        ok = src.reload()
        qos = state.colocation_profiles()[0].spec["qosClass"]
        selector = state.colocation_profiles()[0].spec["selector"]
        seen.append((step, ok, qos, selector["matchLabels"], [(r.levelname, r.getMessage()) for r in caplog.records]))
    where = f"{f}:7: ClusterColocationProfile colo-be"
    kept = "cluster state reload failed, keeping the last good state: "
    counts = ("{'PriorityClass': 0, 'Namespace': 0, 'ResourceQuota': 0, 'LimitRange': 0, 'ClusterColocationProfile': 1, "
              "'ConfigMap': 0}")
    assert seen == [
        ("typo", False, "BE", {"app": "batch"}, [("ERROR", f'{kept}{where}: unknown field "spec.selecter"')]),
        ("same typo, file touched again", False, "BE", {"app": "batch"}, []),
        ("another typo", False, "BE", {"app": "batch"},
         [("ERROR", f'{kept}{f}:8: ClusterColocationProfile colo-be: unknown field "spec.selector.matchLabel"')]),
        ("fixed", True, "LS", {"app": "batch"},
         [("INFO", f"cluster state recovered: reloaded from {tmp_path}: {counts}")]),
        ("changed again", True, "BE", {"app": "batch"}, [("INFO", f"cluster state reloaded from {tmp_path}: {counts}")]),
    ]
    assert state.ready


# -- slo-controller-config in another namespace: one clear warning ------------------------------------------
def _config_map(namespace: str | None, name: str = "slo-controller-config") -> str:
    meta = f"  name: {name}\n" + (f"  namespace: {namespace}\n" if namespace else "")
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n{meta}data:\n  colocation-config: '{{\"enable\": true}}'\n"


@pytest.mark.parametrize("name,configured,manifests,warnings", [
    ("no namespace means default", "koordinator-system", [_config_map(None)],
     [("cm0.yaml:1: ConfigMap slo-controller-config is in namespace default, not in the configured namespace "
       "koordinator-system, and is not read: move it to koordinator-system, or set --config-namespace default")]),
    ("another namespace", "koordinator-system", [_config_map("kube-system")],
     [("cm0.yaml:1: ConfigMap slo-controller-config is in namespace kube-system, not in the configured namespace "
       "koordinator-system, and is not read: move it to koordinator-system, or set --config-namespace kube-system")]),
    ("a configured namespace, found in the usual one", "koord-system", [_config_map("koordinator-system")],
     [("cm0.yaml:1: ConfigMap slo-controller-config is in namespace koordinator-system, not in the configured "
       "namespace koord-system, and is not read: move it to koord-system, or set --config-namespace koordinator-system")]),
    ("one in place, a leftover elsewhere", "koordinator-system",
     [_config_map("koordinator-system"), _config_map("default")],
     [("cm1.yaml:1: ConfigMap slo-controller-config is in namespace default, not in the configured namespace "
       "koordinator-system, and is not read: move it to koordinator-system, or set --config-namespace default")]),
    ("in place", "koordinator-system", [_config_map("koordinator-system")], []),
    ("other ConfigMaps elsewhere", "koordinator-system", [_config_map("default", "kube-root-ca.crt")], []),
])
def test_config_map_in_another_namespace_is_warned_once(tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str,
                                                        configured: str, manifests: list[str],
                                                        warnings: list[str]) -> None:
    for i, text in enumerate(manifests):
        (tmp_path / f"cm{i}.yaml").write_text(text)
    caplog.set_level(logging.WARNING, logger="webhook.cluster.files")
    src = FilesSource(tmp_path, ClusterState(AGENT_KINDS), config_map=(configured, "slo-controller-config"))
    src.load()
    assert [r.getMessage() for r in caplog.records] == [f"{tmp_path}/{w}" for w in warnings]
    caplog.clear()
    assert src.reload()
    assert caplog.records == []  # once, not on every reload


def test_agent_once_warns_about_a_misplaced_config_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cm.yaml").write_text(_config_map(None))
    assert agent_cli.main(["once", "--node-name", "n", "--cluster-state", str(tmp_path), "--cpu-sample-seconds", "0"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.rstrip().endswith(f"{tmp_path}/cm.yaml:1: ConfigMap slo-controller-config is in namespace default, not "
                                 "in the configured namespace koordinator-system, and is not read: move it to "
                                 "koordinator-system, or set --config-namespace default")


# -- a profile the source marked invalid never applies, and each review says why --------------------------
def test_invalid_profile_fails_closed_with_its_reason() -> None:
    typo = profile("colo-typo", namespaceSelector={"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                   selecter={"matchLabels": {"app": "batch"}}, qosClass="BE")
    state = make_state()
    state.upsert("ClusterColocationProfile", typo, check(typo))
    decision, patched = mutate(pod("p", "colo-demo", labels={"app": "web"}), state)
    assert decision.allowed and patched is not None
    assert "koordinator.sh/qosClass" not in labels_of(patched)
    assert decision.warnings == ['colocation profile colo-typo ignored: unknown field "spec.selecter"']
    # not in a namespace the profile's namespaceSelector leaves out
    state.upsert("Namespace", namespace("other"))
    assert mutate(pod("p", "other"), state)[0].warnings == []
