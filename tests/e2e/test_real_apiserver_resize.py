"""In-place resize on a real kube-apiserver (harness/real_apiserver.py; skipped without one; 1.35 or newer, where
``pods/resize`` is GA): the webhook, serving on loopback and registered as manifests/base/webhook-configurations.yaml
registers it, judges a resize as an UPDATE (ratcheting: only what the resize brings is refused), and the generated
ValidatingAdmissionPolicy, which matches ``pods/resize`` too, evaluates one without refusing what the pod already
carried (docs/admission-rules-validating.md, "In-place resize").

The pods are never scheduled (no node): the apiserver takes a resize of a pod with no running container, which is
all its validation and admission need. Before issue 41 the configuration registered bare ``pods``: the resize that
makes an LSR pod's cpu fractional was admitted, as the last test shows with that registration.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import real_apiserver
from tests.serving import run_server
from webhook.admission import chain
from webhook.admission.review import request_from_dict
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.policies import invariants

pytestmark = pytest.mark.xdist_group("real-apiserver")

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
RESIZE_MINOR = 35
DENIED = "denied the request: "
LSR = {"koordinator.sh/qosClass": "LSR"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[real_apiserver.Cluster]:
    with real_apiserver.for_tests() as c:
        if c.minor < RESIZE_MINOR:
            pytest.skip(f"the apiserver is {c.version}: pods/resize is GA from 1.{RESIZE_MINOR}")
        c.kubectl("apply", "--server-side", "-f", str(MANIFESTS / "koordinator" / "priorityclasses.yaml"))
        yield c


def _apply(c: real_apiserver.Cluster, docs: list[dict[str, Any]]) -> None:
    c.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=colocation-test", "-f", "-",
              input=yaml.safe_dump_all(docs))


def _pod(ns: str, name: str, cpu: str, labels: dict[str, str] | None = None,
         extra: dict[str, str] | None = None) -> dict[str, Any]:
    res = {"cpu": cpu, "memory": "64Mi", **(extra or {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or LSR},
            "spec": {"priorityClassName": "koord-prod",
                     "containers": [{"name": "app", "image": "busybox", "resources": {"requests": res, "limits": res}}]}}


def _resize(c: real_apiserver.Cluster, ns: str, name: str, **requests: str) -> tuple[bool, str]:
    """``kubectl patch --subresource resize``: (admitted, the refusal's message or the warnings)."""
    res = {"requests": requests, "limits": requests}
    patch = {"spec": {"containers": [{"name": "app", "resources": res}]}}
    done = c.kubectl("patch", "pod", "-n", ns, name, "--subresource", "resize", "--type", "strategic",
                     "-p", json.dumps(patch), check=False)
    if done.returncode == 0:
        return True, done.stderr.strip()
    err = done.stderr.strip()
    return False, err.split(DENIED, 1)[1] if DENIED in err else err


def _chain(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What the validating chain says of the resize (the empty string: admitted)."""
    request = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "resize",
               "name": new["metadata"]["name"], "namespace": new["metadata"]["namespace"], "operation": "UPDATE",
               "object": new, "oldObject": old, "userInfo": {"username": "alice"}}
    state = ClusterState(WEBHOOK_KINDS)
    state.replace_all({})
    decision = chain.validate(request_from_dict(request), state, chain.Settings())
    return "" if decision.allowed else decision.message


def _configuration(name: str, url: str, ca: bytes, ns: str, resources: list[str]) -> dict[str, Any]:
    """The shipped ValidatingWebhookConfiguration, pointed at ``url`` and at namespace ``ns`` only, failing closed."""
    docs = [d for d in yaml.safe_load_all((MANIFESTS / "base" / "webhook-configurations.yaml").read_text()) if d]
    configs: list[dict[str, Any]] = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    (config,) = configs
    config["metadata"] = {"name": name}
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": f"{url}/validate", "caBundle": base64.b64encode(ca).decode()}
        hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": ns}}
        hook["failurePolicy"] = "Fail"
        for rule in hook["rules"]:
            rule["resources"] = resources
    return config


def test_a_resize_is_judged_by_the_webhook_as_an_update(cluster: real_apiserver.Cluster, tmp_path: Path) -> None:
    ns = f"colo-resize-{uuid.uuid4().hex[:6]}"
    _apply(cluster, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    # Made before the webhook answers for the namespace: "fraction" carries what the rules refuse today.
    _apply(cluster, [_pod(ns, "whole", "2"), _pod(ns, "fraction", "1500m"), _pod(ns, "probe", "1")])
    state = ClusterState(WEBHOOK_KINDS)
    state.replace_all({})
    name = f"colocation-resize-{uuid.uuid4().hex[:6]}"
    with run_server(state, tmp_path / "certs") as srv:
        url = srv.url.replace("localhost", "127.0.0.1")
        ca = srv.certs.ca_cert.read_bytes()
        _apply(cluster, [_configuration(name, url, ca, ns, ["pods", "pods/resize"])])
        try:
            real_apiserver.wait_until("the webhook configuration",
                                      lambda: not _resize(cluster, ns, "probe", cpu="1100m")[0])
            old = json.loads(cluster.kubectl("get", "pod", "-n", ns, "whole", "-o", "json").stdout)
            admitted, message = _resize(cluster, ns, "whole", cpu="1500m")
            new = json.loads(json.dumps(old))
            for kind in ("requests", "limits"):
                new["spec"]["containers"][0]["resources"][kind]["cpu"] = "1500m"
            assert not admitted
            assert message == _chain(old, new)
            assert message == ('pod.spec.containers[*].resources.requests: Invalid value: "1500m": the requested '
                               'CPUs of LSR Pod must be integer')
            assert _resize(cluster, ns, "whole", cpu="3")[0]                  # whole cpus stay whole: admitted

            # Ratcheting: what the pod already carried does not stop a resize of its memory, or one to whole cpus.
            admitted, warnings = _resize(cluster, ns, "fraction", memory="128Mi")
            assert admitted and "koordinator-rules: already so before this update, allowed" in warnings
            admitted, message = _resize(cluster, ns, "fraction", cpu="1700m")
            assert not admitted and '"1700m": the requested CPUs of LSR Pod must be integer' in message
            assert _resize(cluster, ns, "fraction", cpu="2")[0]

            # The registration before issue 41 (bare pods): the same fractional resize goes through unjudged.
            _apply(cluster, [_configuration(name, url, ca, ns, ["pods"])])
            real_apiserver.wait_until("the old registration", lambda: _resize(cluster, ns, "probe", cpu="1300m")[0])
            assert _resize(cluster, ns, "whole", cpu="2500m")[0]
        finally:
            cluster.kubectl("delete", "validatingwebhookconfiguration", name, "--ignore-not-found", check=False)
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_the_policy_evaluates_a_resize_and_refuses_nothing_the_pod_carried(cluster: real_apiserver.Cluster) -> None:
    """The generated policy matches pods/resize (failurePolicy Fail: a CEL error would refuse); a pod that mixed
    batch-cpu and memory (admitted before the policy) can still be resized in memory."""
    ns = f"colo-resize-{uuid.uuid4().hex[:6]}"
    _apply(cluster, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    mixed = _pod(ns, "mixed", "0", labels={"koordinator.sh/qosClass": "BE"},
                 extra={"kubernetes.io/batch-cpu": "500"})
    mixed["spec"]["priorityClassName"] = "koord-batch"
    mixed["spec"]["containers"][0]["resources"] = {
        "requests": {"kubernetes.io/batch-cpu": "500", "memory": "64Mi"},
        "limits": {"kubernetes.io/batch-cpu": "500", "memory": "64Mi"}}
    _apply(cluster, [mixed])
    policy, binding = invariants.policy(), invariants.binding()
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["pods", "pods/resize"]
    policy["metadata"]["name"] = binding["spec"]["policyName"] = f"resize-{uuid.uuid4().hex[:6]}"
    binding["metadata"]["name"] = policy["metadata"]["name"]
    binding["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
    probe = _pod(ns, "probe-mix", "1", labels={"koordinator.sh/qosClass": "BE"})
    probe["spec"]["containers"][0]["resources"]["requests"]["kubernetes.io/batch-cpu"] = "500"
    _apply(cluster, [policy, binding])
    try:
        real_apiserver.wait_until("the policy", lambda: cluster.kubectl(
            "create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False).returncode != 0)
        done = cluster.kubectl("patch", "pod", "-n", ns, "mixed", "--subresource", "resize", "--type", "strategic",
                               "-p", json.dumps({"spec": {"containers": [{"name": "app", "resources": {
                                   "requests": {"memory": "128Mi"}, "limits": {"memory": "128Mi"}}}]}}),
                               check=False)
        assert done.returncode == 0, done.stderr
        got = json.loads(cluster.kubectl("get", "pod", "-n", ns, "mixed", "-o", "json").stdout)
        assert got["spec"]["containers"][0]["resources"]["requests"]["memory"] == "128Mi"
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding", binding["metadata"]["name"], check=False)
        cluster.kubectl("delete", "validatingadmissionpolicy", policy["metadata"]["name"], check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
