"""The chart on a real kube-apiserver (docs/helm.md; the tier: harness/real_apiserver.py).

The chart is rendered with Helm's engine (harness/chart.py), every switch the apiserver can take without other
projects' CRDs on, and applied server-side in Helm's order (namespaces and CRDs, then the rest, then the
post-install hook), with the field manager Helm 4 applies with. The tier has no kubelet and no Job controller, so
the bootstrap Job's command runs here, in-process, with the Job's own arguments and a token of the Job's own
ServiceAccount (its RBAC is what is proven). Then an upgrade render (``is_upgrade``, with changed values) is applied
over it, the hook is re-created as ``before-hook-creation`` does and run again: the serving Secret and the caBundle
the Job wrote are kept, and the changed values take.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import chart, real_apiserver
from webhook.cli import webhook as webhook_cli

pytestmark = pytest.mark.xdist_group("real-apiserver")

Obj = dict[str, Any]
FIELD_MANAGER = "helm"            # Helm 4's server-side apply field manager
FIRST = ("Namespace", "CustomResourceDefinition")
MUTATING_MINOR = 36
SECRET = ("secret", "colocation-webhook-tls", "-n", "colocation-system")


def _values(minor: int, **more: Any) -> Obj:
    values: Obj = {
        "crds": {"managed": True},
        "koordinator": {"createNamespace": True, "priorityClasses": {"managed": True},
                        "sloControllerConfig": {"managed": True}},
        "agent": {"besideKoordlet": True, "nodePolicy": {"enabled": True}, "evictionNodePolicy": {"enabled": True}},
        "admissionPolicies": {"enabled": True}, "mutatingPolicies": {"enabled": minor >= MUTATING_MINOR},
        "networkPolicy": {"enabled": True, "controlPlaneCIDR": "10.0.0.0/24"}, "audit": {"enabled": True},
    }
    for key, value in more.items():
        values[key] = {**values.get(key, {}), **value}
    return values


@pytest.fixture(scope="module")
def cluster() -> Iterator[real_apiserver.Cluster]:
    with real_apiserver.for_tests() as c:
        yield c


def _apply(c: real_apiserver.Cluster, objs: list[Obj]) -> str:
    return c.kubectl("apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-",
                     input=yaml.safe_dump_all(objs, sort_keys=False)).stdout


def _is_hook(obj: Obj) -> bool:
    return "helm.sh/hook" in obj["metadata"].get("annotations", {})


def _install(c: real_apiserver.Cluster, objs: list[Obj]) -> list[Obj]:
    """Apply as Helm does: namespaces and CRDs first, the rest, and the hooks after; returns the hooks."""
    first = [o for o in objs if o["kind"] in FIRST]
    rest = [o for o in objs if o["kind"] not in FIRST and not _is_hook(o)]
    _apply(c, first)
    for crd in (o for o in first if o["kind"] == "CustomResourceDefinition"):
        c.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}")
    out = _apply(c, rest)
    assert out.count("serverside-applied") == len(rest), out
    return [o for o in objs if _is_hook(o)]


def _run_hook(c: real_apiserver.Cluster, job: Obj, tmp: Path) -> None:
    """What the Job's pod does, here: its container's arguments, as its ServiceAccount."""
    c.kubectl("delete", "job", job["metadata"]["name"], "-n", job["metadata"]["namespace"], "--ignore-not-found")
    _apply(c, [job])                                       # before-hook-creation: deleted, created again
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] == ["colocation-webhook"]
    token = c.kubectl("create", "token", spec["serviceAccountName"], "-n", job["metadata"]["namespace"]).stdout.strip()
    config = yaml.safe_load(c.kubeconfig.read_text())
    config["users"] = [{"name": config["contexts"][0]["context"]["user"], "user": {"token": token}}]
    kubeconfig = tmp / "job-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    assert webhook_cli.main([*container["args"], f"--kubeconfig={kubeconfig}"]) == 0


def _ca_bundles(c: real_apiserver.Cluster) -> list[str]:
    bundles = []
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        got = json.loads(c.kubectl("get", kind, "colocation-webhook", "-o", "json").stdout)
        bundles += [w["clientConfig"].get("caBundle", "") for w in got["webhooks"]]
    return bundles


def _secret(c: real_apiserver.Cluster) -> Obj:
    found: Obj = json.loads(c.kubectl("get", *SECRET, "-o", "json").stdout)
    return found


@contextlib.contextmanager
def _uninstalled(c: real_apiserver.Cluster, objs: list[Obj]) -> Iterator[None]:
    """At the end, what `helm uninstall` deletes (Koordinator's objects are kept, as the chart says)."""
    try:
        yield
    finally:
        ours = [o for o in objs if "helm.sh/resource-policy" not in o["metadata"].get("annotations", {})]
        c.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=yaml.safe_dump_all(ours),
                  check=False)


def test_install_then_upgrade_keeps_the_secret_and_the_ca_bundle(cluster: real_apiserver.Cluster,
                                                                tmp_path: Path) -> None:
    installed = chart.render(_values(cluster.minor))
    with _uninstalled(cluster, installed):
        (job,) = _install(cluster, installed)
        assert _ca_bundles(cluster) == ["", ""]              # nothing in the chart sets it
        _run_hook(cluster, job, tmp_path)
        secret = _secret(cluster)
        assert secret["type"] == "kubernetes.io/tls"
        ca = secret["data"]["ca.crt"]
        assert base64.b64decode(ca).startswith(b"-----BEGIN CERTIFICATE-----")
        assert _ca_bundles(cluster) == [ca, ca]

        upgraded = chart.render(_values(cluster.minor, image={"tag": "0.1.1"},
                                        webhookConfiguration={"timeoutSeconds": 5}, webhook={"replicas": 3}),
                                upgrade=True)
        (job,) = _install(cluster, upgraded)
        # The upgrade's apply alone keeps both: neither is in the chart, and the Job's manager owns the caBundle.
        assert _ca_bundles(cluster) == [ca, ca]
        assert _secret(cluster)["data"] == secret["data"]
        _run_hook(cluster, job, tmp_path)                    # the post-upgrade hook: a valid pair is kept
        after = _secret(cluster)
        assert after["data"] == secret["data"]
        assert after["metadata"]["resourceVersion"] == secret["metadata"]["resourceVersion"]
        assert _ca_bundles(cluster) == [ca, ca]
        # ...and the upgrade took.
        got = json.loads(cluster.kubectl("get", "validatingwebhookconfiguration", "colocation-webhook",
                                         "-o", "json").stdout)
        assert got["webhooks"][0]["timeoutSeconds"] == 5
        deployment = json.loads(cluster.kubectl("get", "deployment", "colocation-webhook", "-n",
                                                "colocation-system", "-o", "json").stdout)
        assert deployment["spec"]["replicas"] == 3
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "colocation-webhook:0.1.1"
        # Every rendered object is in the cluster, owned by the field manager the apply used.
        for obj in upgraded:
            meta = obj["metadata"]
            where = [f"-n={meta['namespace']}"] if meta.get("namespace") else []
            live = json.loads(cluster.kubectl("get", f"{obj['kind']}.{obj['apiVersion'].split('/')[0]}"
                                              if "/" in obj["apiVersion"] else obj["kind"], meta["name"], *where,
                                              "--show-managed-fields", "-o", "json").stdout)
            assert FIELD_MANAGER in {m["manager"] for m in live["metadata"].get("managedFields", [])}, chart.key(obj)
