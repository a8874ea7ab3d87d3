"""charts/colocation-webhook: the install, not a second install (docs/helm.md).

Helm's own engine (helm-python-sdk, a test extra: harness/chart.py says why it is nowhere else) renders the chart at
its defaults and with each switch; each render is compared, object by object, with the kustomize output of the
same set-up of manifests/. The only differences allowed are ALLOWED below (Helm's labels, which carry the release
name; the bootstrap Job's hook annotations; the keep policy on Koordinator's objects); anything else fails, in
either direction. The chart's static objects are copies of manifests/ (files/), held byte-equal here.
"""

from __future__ import annotations

import importlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any

# helm_python: the test extra this file needs (harness/chart.py); missing, the file fails to import, loudly.
import helm_python as helm
import pytest
import yaml

from harness import chart
from webhook.agent.domain.coexistence import Capability, parse_disabled
from webhook.cli import webhook as webhook_cli

kubernetes_validate = importlib.import_module("kubernetes_validate")   # untyped: no stubs
ROOT = chart.ROOT
Obj = dict[str, Any]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
HELM_LABELS = {"helm.sh/chart": f"colocation-webhook-{VERSION}", "app.kubernetes.io/managed-by": "Helm",
               "app.kubernetes.io/instance": chart.RELEASE, "app.kubernetes.io/version": VERSION}
HOOK = {"helm.sh/hook": "post-install,post-upgrade", "helm.sh/hook-delete-policy": "before-hook-creation"}
KEEP = {"helm.sh/resource-policy": "keep"}
KOORDINATOR_OWNED = {"Namespace", "CustomResourceDefinition", "PriorityClass"}
SLO_CONFIG = "v1 ConfigMap koordinator-system/slo-controller-config"
CIDR = "10.0.0.0/24"
# The kubectl-side edit the network-policy component asks for (its placeholder, docs/security.md "NetworkPolicy").
NETWORK_EDIT = ("CONTROL-PLANE-CIDR", CIDR)
# Oldest and newest Kubernetes docs/install.md ("Requirements") supports; kubernetes-validate's oldest schemas are
# 1.25's, so the objects are validated against 1.25 and 1.36, helm lint checks kubeVersion for 1.23 and 1.36.
OLDEST, NEWEST = "1.23.0", "1.36.0"
SCHEMAS = ("1.25.0", "1.36.0")
CUSTOM_KINDS = {"PodMonitor", "PrometheusRule", "Certificate", "Issuer"}

ALL_ON: Obj = {
    "crds": {"managed": True},
    "koordinator": {"createNamespace": True, "priorityClasses": {"managed": True},
                    "sloControllerConfig": {"managed": True}},
    "agent": {"besideKoordlet": True, "besideKoordManager": True, "nodePolicy": {"enabled": True},
              "evictionNodePolicy": {"enabled": True}},
    "admissionPolicies": {"enabled": True}, "mutatingPolicies": {"enabled": True}, "monitoring": {"enabled": True},
    "networkPolicy": {"enabled": True, "controlPlaneCIDR": CIDR}, "audit": {"enabled": True},
}
ALL_COMPONENTS = ["koordinator", "components/beside-koordlet", "components/beside-koord-manager",
                  "components/agent-node-policy", "components/agent-eviction-node-policy",
                  "components/admission-policies", "components/mutating-policies", "components/monitoring",
                  "components/network-policy", "components/audit"]
# name: (values, kustomize resources, components)
SETUPS: dict[str, tuple[Obj, list[str], list[str]]] = {
    "defaults": ({}, ["."], []),
    "koordinator": ({k: ALL_ON[k] for k in ("crds", "koordinator")}, ["."], ["koordinator"]),
    "beside-koordlet": ({"agent": {"besideKoordlet": True}}, ["."], ["components/beside-koordlet"]),
    "beside-koord-manager": ({"agent": {"besideKoordManager": True}}, ["."], ["components/beside-koord-manager"]),
    "agent-node-policy": ({"agent": {"nodePolicy": {"enabled": True}}}, ["."], ["components/agent-node-policy"]),
    "agent-eviction-node-policy": ({"agent": {"nodePolicy": {"enabled": True}, "evictionNodePolicy": {"enabled": True}}},
                                   ["."], ["components/agent-node-policy", "components/agent-eviction-node-policy"]),
    "admission-policies": ({"admissionPolicies": {"enabled": True}}, ["."], ["components/admission-policies"]),
    "mutating-policies": ({"mutatingPolicies": {"enabled": True}}, ["."], ["components/mutating-policies"]),
    "monitoring": ({"monitoring": {"enabled": True}}, ["."], ["components/monitoring"]),
    "network-policy": ({"networkPolicy": {"enabled": True, "controlPlaneCIDR": CIDR}}, ["."],
                       ["components/network-policy"]),
    "audit": ({"audit": {"enabled": True}}, ["."], ["components/audit"]),
    "cert-manager": ({"certificates": {"mode": "cert-manager"}}, ["overlays/cert-manager"], []),
    "everything": (ALL_ON, ["."], ALL_COMPONENTS),
    "everything-cert-manager": ({**ALL_ON, "certificates": {"mode": "cert-manager"}}, ["overlays/cert-manager"],
                                ALL_COMPONENTS),
}


def _helm_side(obj: Obj) -> Obj:
    """The Helm render with the allowed differences checked and taken away; fails on a missing or wrong one."""
    where = chart.key(obj)
    meta = obj["metadata"]
    labels = meta.get("labels", {})
    assert {k: labels.get(k) for k in HELM_LABELS} == HELM_LABELS, f"{where}: Helm's labels"
    expected_annotations: dict[str, str] = {}
    if obj["kind"] == "Job" and meta["name"] == "colocation-webhook-certs":
        expected_annotations = HOOK
    if (obj["kind"] in KOORDINATOR_OWNED and meta["name"] != "colocation-system") or where == SLO_CONFIG:
        expected_annotations = KEEP
    annotations = meta.get("annotations", {})
    assert {k: annotations.get(k) for k in expected_annotations} == expected_annotations, f"{where}: annotations"
    assert not {k for k in annotations if k.startswith("helm.sh/")} - set(expected_annotations), where
    out = chart.without(obj, *(("metadata", "labels", k) for k in HELM_LABELS),
                        *(("metadata", "annotations", k) for k in expected_annotations))
    return out


def _kustomize_side(obj: Obj) -> Obj:
    """kustomize breaks the base64 of a generated Secret (and the caBundle copied from it) into lines of 76; the
    apiserver's base64 decoding skips line breaks, so both are the same bytes: compared without them."""
    out: Obj = json.loads(json.dumps(obj))
    if out["kind"] == "Secret":
        out["data"] = {k: v.replace("\n", "") for k, v in out.get("data", {}).items()}
    for hook in out.get("webhooks", []):
        if "caBundle" in hook["clientConfig"]:
            hook["clientConfig"]["caBundle"] = hook["clientConfig"]["caBundle"].replace("\n", "")
    return out


def _compare(helm_objs: list[Obj], kustomize_objs: list[Obj]) -> list[str]:
    ours = {k: _helm_side(o) for k, o in chart.by_key(helm_objs).items()}
    theirs = {k: _kustomize_side(o) for k, o in chart.by_key(kustomize_objs).items()}
    problems = [f"only in the chart: {k}" for k in sorted(set(ours) - set(theirs))]
    problems += [f"only in manifests/: {k}" for k in sorted(set(theirs) - set(ours))]
    for k in sorted(set(ours) & set(theirs)):
        if ours[k] != theirs[k]:
            problems.append(f"{k} differs:\n  chart:     {json.dumps(ours[k], sort_keys=True)}\n"
                            f"  manifests: {json.dumps(theirs[k], sort_keys=True)}")
    return problems


def _edited(objs: list[Obj], edit: tuple[str, str]) -> list[Obj]:
    loaded: list[Obj] = json.loads(json.dumps(objs).replace(*edit))
    return loaded


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_the_chart_renders_what_kustomize_applies(setup: str) -> None:
    values, resources, components = SETUPS[setup]
    theirs = chart.kustomize_setup(resources, components)
    if "components/network-policy" in components:
        theirs = _edited(theirs, NETWORK_EDIT)
    assert _compare(chart.render(values), theirs) == []


def _generated_certs(tmp_path: Path) -> dict[str, str]:
    out = tmp_path / "certs"
    assert webhook_cli.main(["certs", "generate", "--service", "colocation-webhook", "--namespace",
                             "colocation-system", "--out", str(out)]) == 0
    return {name: (out / name).read_text() for name in ("tls.crt", "tls.key", "ca.crt")}


def test_a_provided_certificate_renders_what_the_generated_certs_overlay_applies(tmp_path: Path) -> None:
    """certificates.mode provided with the files `certs generate` writes (helm's --set-file reads them as text)."""
    pems = _generated_certs(tmp_path)
    values = {"certificates": {"mode": "provided", "provided": {
        "tlsCrt": pems["tls.crt"], "tlsKey": pems["tls.key"], "caCrt": pems["ca.crt"]}}}
    theirs = chart.kustomize_setup(["overlays/generated-certs"],
                                   edit={f"overlays/generated-certs/certs/{n}": t for n, t in pems.items()})
    assert _compare(chart.render(values), theirs) == []


def test_the_comparison_fails_when_they_part() -> None:
    """The drift test is not a no-op: one field changed on either side, a missing Helm label, an extra annotation."""
    ours, theirs = chart.render(), chart.kustomize_setup(["."])
    assert _compare(ours, theirs) == []
    edited = _edited(ours, ("--drain-delay=10", "--drain-delay=11"))
    assert any("apps/v1 Deployment colocation-system/colocation-webhook differs" in p for p in _compare(edited, theirs))
    assert _compare(ours[1:], theirs) == [f"only in manifests/: {chart.key(ours[0])}"]
    unlabelled = json.loads(json.dumps(ours))
    del unlabelled[0]["metadata"]["labels"]["app.kubernetes.io/instance"]
    with pytest.raises(AssertionError, match="Helm's labels"):
        _compare(unlabelled, theirs)
    annotated = json.loads(json.dumps(ours))
    annotated[0]["metadata"].setdefault("annotations", {})["helm.sh/resource-policy"] = "keep"
    with pytest.raises(AssertionError):
        _compare(annotated, theirs)


def _files() -> list[Path]:
    return sorted(p for p in (chart.CHART / "files").rglob("*") if p.is_file())


def test_the_static_objects_are_the_manifests_files() -> None:
    """files/<path> is manifests/<path>, byte for byte, and every one is used by a template."""
    templates = "".join(p.read_text() for p in (chart.CHART / "templates").glob("*"))
    stale = [str(p.relative_to(ROOT)) for p in _files()
             if p.read_bytes() != (chart.MANIFESTS / p.relative_to(chart.CHART / "files")).read_bytes()]
    assert stale == [], f"copy them again from manifests/ (cp manifests/<path> charts/colocation-webhook/files/<path>): {stale}"
    unused = [str(p.relative_to(ROOT)) for p in _files() if f'"{p.relative_to(chart.CHART).as_posix()}"' not in templates]
    assert unused == []


def test_chart_metadata_is_the_projects() -> None:
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    assert (meta["version"], meta["appVersion"]) == (VERSION, VERSION)
    # docs/install.md, "Requirements": the range the chart's kubeVersion says.
    oldest = re.search(r"Kubernetes (1\.\d+) or newer", (ROOT / "docs" / "install.md").read_text())
    assert oldest is not None
    assert meta["kubeVersion"] == f">={oldest[1]}.0-0" == f">={OLDEST}-0"
    newest = re.search(r"v(1\.\d+)\.", VERSION_OF_TIER)
    assert newest is not None and NEWEST.startswith(newest[1])


# The newest Kubernetes the real-apiserver tier runs (tests/e2e/test_real_apiserver_chart.py, docs/helm.md).
VERSION_OF_TIER = "v1.36.2"


@pytest.mark.parametrize("kube", [OLDEST, NEWEST])
@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "everything"])
def test_lint_is_clean(kube: str, values: Obj) -> None:
    report = helm.lint(str(chart.CHART), values, strict=True, kube_version=f"v{kube}")
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == [], report


def _versioned(values: Obj, kube: str) -> Obj:
    """What a cluster of that version can take: the policies need 1.30, the mutating policies 1.36."""
    minor = int(kube.split(".")[1])
    out: Obj = json.loads(json.dumps(values))
    if minor < 36:
        out.pop("mutatingPolicies", None)
    if minor < 30:
        out.pop("admissionPolicies", None)
        out.get("agent", {}).pop("nodePolicy", None)
        out.get("agent", {}).pop("evictionNodePolicy", None)
    return out


@pytest.mark.parametrize("kube", SCHEMAS)
@pytest.mark.parametrize("mode", ["bootstrap", "cert-manager"])
def test_every_rendered_object_is_valid_for_the_kubernetes_versions(kube: str, mode: str) -> None:
    values = {**_versioned(ALL_ON, kube), "certificates": {"mode": mode}}
    no_schema = set()
    for obj in chart.render(values):
        try:
            kubernetes_validate.validate(obj, kube, strict=True)
        except kubernetes_validate.utils.SchemaNotFoundError:
            no_schema.add(obj["kind"])
        except kubernetes_validate.utils.ValidationError as exc:
            pytest.fail(f"{chart.key(obj)} is not valid for Kubernetes {kube}: "
                        f"{'.'.join(str(p) for p in exc.path)}: {exc.message}")
    assert no_schema <= CUSTOM_KINDS | {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}


# -- values.schema.json ---------------------------------------------------------------------------------------------
def _schema() -> Obj:
    loaded: Obj = json.loads(chart.SCHEMA.read_text())
    return loaded


def _objects_in(node: Any, where: str = "") -> list[tuple[str, Obj]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            found.append((where, node))
        for k, v in node.items():
            found += _objects_in(v, f"{where}/{k}")
    elif isinstance(node, list):
        for n, v in enumerate(node):
            found += _objects_in(v, f"{where}/{n}")
    return found


def test_every_object_of_the_schema_refuses_what_it_does_not_list() -> None:
    """additionalProperties false everywhere; a map's values have a type (annotations, nodeSelector: strings)."""
    loose = [where for where, node in _objects_in(_schema())
             if node.get("additionalProperties") is not False
             and node.get("additionalProperties") != {"type": "string"}
             and not (node.get("additionalProperties") or {}).get("$ref", "").endswith("Quantity")]
    assert loose == []


def test_the_generated_parts_are_current() -> None:
    """The embedded Kubernetes schemas and the README's table: `python -m harness.chart` makes them."""
    assert chart.main(["--check"]) == 0


def test_the_defaults_are_the_schemas() -> None:
    with helm.Chart.load(str(chart.CHART)) as loaded:
        loaded.validate_schema(loaded.values)
    described = [w for w, n in _objects_in(_schema()["properties"]) if "description" not in n]
    assert described == []


def test_the_agent_capabilities_are_the_agents() -> None:
    enum = _schema()["properties"]["agent"]["properties"]["disable"]["items"]["enum"]
    assert sorted(enum) == sorted(c.value for c in Capability)


@pytest.mark.parametrize(("values", "error"), [
    ({"webhook": {"replcas": 3}}, "additional properties 'replcas' not allowed"),
    ({"webhook": {"replicas": "3"}}, "got string, want integer"),
    ({"replicaCount": 3}, "additional properties 'replicaCount' not allowed"),
    ({"image": {"pullPolicy": "Sometimes"}}, "value must be one of"),
    ({"image": {"digest": "sha256:abc"}}, "does not match pattern"),
    ({"webhook": {"affinity": {"podAntiAfinity": {}}}}, "additional properties 'podAntiAfinity' not allowed"),
    ({"agent": {"tolerations": [{"operater": "Exists"}]}}, "additional properties 'operater' not allowed"),
    ({"webhook": {"resources": {"limit": {"cpu": "1"}}}}, "additional properties 'limit' not allowed"),
    ({"agent": {"disable": ["cpu-supress"]}}, "value must be one of"),
    ({"webhookConfiguration": {"failurePolicy": "ignore"}}, "value must be one of"),
    ({"certificates": {"mode": "self-signed"}}, "value must be one of"),
    ({"webhook": {"extraArgs": ["max-cache-age=300"]}}, "does not match pattern"),
    ({"monitoring": {"enabled": "true"}}, "got string, want boolean"),
])
def test_the_schema_refuses_a_misspelt_or_mistyped_value(values: Obj, error: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(error)):
        chart.render(values)


@pytest.mark.parametrize(("values", "error"), [
    ({"networkPolicy": {"enabled": True}}, "networkPolicy.controlPlaneCIDR is required"),
    ({"certificates": {"mode": "provided"}}, "certificates.provided.caCrt is required"),
    ({"agent": {"evictionNodePolicy": {"enabled": True}}}, "agent.evictionNodePolicy.enabled needs agent.nodePolicy"),
])
def test_a_switch_missing_what_it_needs_is_refused(values: Obj, error: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(error)):
        chart.render(values)


# -- the values reach the objects -----------------------------------------------------------------------------------
def _pods(objs: list[Obj]) -> dict[str, Obj]:
    specs: dict[str, Obj] = {}
    for obj in objs:
        spec = obj.get("spec", {})
        template = spec.get("jobTemplate", {}).get("spec", spec).get("template")
        if template:
            specs[obj["metadata"]["name"]] = template["spec"]
    return specs


def test_the_values_reach_the_objects() -> None:
    digest = "sha256:" + "0" * 64
    objs = chart.by_key(chart.render({
        "imageRepositoryHost": "registry.example.com/team", "image": {"tag": "0.2.0", "digest": digest,
                                                                       "pullPolicy": "Always"},
        "imagePullSecrets": ["regcred"], "serviceAccount": {"annotations": {"example.com/role": "r"}},
        "webhookConfiguration": {"failurePolicy": "Fail", "timeoutSeconds": 5, "excludedNamespaces": ["kube-system"]},
        "webhook": {"replicas": 3, "port": 9443, "metricsPort": 9090, "logLevel": "debug",
                    "extraArgs": ["--max-cache-age=300"], "nodeSelector": {"pool": "system"},
                    "priorityClassName": ""},
        "agent": {"disable": ["cpu-suppress"], "besideKoordManager": True, "extraArgs": ["--log-format=json"]},
        "audit": {"enabled": True, "schedule": "0 * * * *"},
    }))
    pods = _pods(list(objs.values()))
    assert set(pods) == {"colocation-webhook", "colocation-agent", "colocation-webhook-certs", "colocation-audit"}
    for name, pod in pods.items():
        assert pod["imagePullSecrets"] == [{"name": "regcred"}], name
        assert {c["image"] for c in pod["containers"]} == {f"registry.example.com/team/colocation-webhook:0.2.0@{digest}"}
        assert {c["imagePullPolicy"] for c in pod["containers"]} == {"Always"}
    webhook = pods["colocation-webhook"]
    assert "priorityClassName" not in webhook and webhook["nodeSelector"] == {"pool": "system"}
    assert pods["colocation-webhook-certs"]["nodeSelector"] == {"pool": "system"}
    args = webhook["containers"][0]["args"]
    assert {"--port=9443", "--metrics-port=9090", "--log-level=debug", "--max-cache-age=300"} <= set(args)
    serve = webhook_cli.parser().parse_args(args)
    assert (serve.port, serve.metrics_port, serve.log_level) == (9443, 9090, "debug")
    deployment = objs["apps/v1 Deployment colocation-system/colocation-webhook"]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9090"
    service = objs["v1 Service colocation-system/colocation-webhook"]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"https": 443, "metrics": 9090}
    for kind in ("Mutating", "Validating"):
        (hook,) = objs[f"admissionregistration.k8s.io/v1 {kind}WebhookConfiguration /colocation-webhook"]["webhooks"]
        assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Fail", 5)
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "colocation-system"]
    agent_args = pods["colocation-agent"]["containers"][0]["args"]
    assert parse_disabled(a.removeprefix("--disable=") for a in agent_args if a.startswith("--disable=")) == {
        Capability.CPU_SUPPRESS, Capability.BATCH_RESOURCES}
    assert "--log-format=json" in agent_args
    for account in ("colocation-webhook", "colocation-agent", "colocation-webhook-certs", "colocation-audit"):
        sa = objs[f"v1 ServiceAccount colocation-system/{account}"]
        assert sa["metadata"]["annotations"] == {"example.com/role": "r"}
    cronjob = objs["batch/v1 CronJob colocation-system/colocation-audit"]
    assert cronjob["spec"]["schedule"] == "0 * * * *"


def test_the_namespace_can_be_left_to_someone_else() -> None:
    keys = set(chart.by_key(chart.render({"installation": {"createNamespace": False}})))
    assert keys == set(chart.by_key(chart.render())) - {"v1 Namespace /colocation-system"}


def test_notes_say_how_to_check_the_install() -> None:
    text = chart.notes()
    assert "readyz" in text and "--dry-run=server" in text
    assert (ROOT / "examples" / "pod-koord-batch.yaml").is_file() and "examples/pod-koord-batch.yaml" in text


def test_an_upgrade_renders_the_same_objects() -> None:
    """Nothing in the chart depends on install or upgrade: the Secret and the caBundle are not the chart's
    (the bootstrap Job's), so an upgrade has nothing to overwrite them with."""
    assert chart.render(upgrade=True) == chart.render()
    for obj in chart.render():
        assert obj["kind"] != "Secret"
        for hook in obj.get("webhooks", []):
            assert "caBundle" not in hook["clientConfig"]
