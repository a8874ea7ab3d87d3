"""manifests/components/network-policy: only the control plane reaches the admission port, only the monitoring
namespace the metrics ports; an unedited apply fails rather than blocking the apiserver; the overlay example in
docs/security.md renders into a working policy."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import pytest

from tests.deploy.test_manifests import MANIFESTS, ROOT, _fresh_copy, _kustomize, needs_kubectl
from webhook.core.selectors import matches

COMPONENT = MANIFESTS / "components" / "network-policy"
PLACEHOLDER = "CONTROL-PLANE-CIDR"
Obj = dict[str, Any]

pytestmark = needs_kubectl


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    return _kustomize(_fresh_copy(tmp_path_factory))


@pytest.fixture(scope="module")
def policies() -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in _kustomize(COMPONENT) if o["kind"] == "NetworkPolicy"}


def _workload(install: list[Obj], name: str) -> Obj:
    (w,) = [o for o in install if o["kind"] in ("Deployment", "DaemonSet") and o["metadata"]["name"] == name]
    return w


def _selected(install: list[Obj], policy: Obj) -> set[str]:
    """The workloads (and the Job) whose pods the policy selects, in its namespace."""
    ns = policy["metadata"]["namespace"]
    return {o["metadata"]["name"] for o in install
            if o["kind"] in ("Deployment", "DaemonSet", "Job") and o["metadata"]["namespace"] == ns
            and matches(policy["spec"]["podSelector"], o["spec"]["template"]["metadata"]["labels"])}


def _ports(workload: Obj) -> dict[str, int]:
    (c,) = workload["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in c["ports"]}


def test_each_policy_selects_one_program_and_admits_only_its_peers(install: list[Obj],
                                                                   policies: dict[str, Obj]) -> None:
    assert set(policies) == {"colocation-webhook", "colocation-agent"}
    for name, policy in policies.items():
        assert _selected(install, policy) == {name}                     # never the bootstrap Job
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        ports = _ports(_workload(install, name))
        for rule in policy["spec"]["ingress"]:
            assert rule["from"], f"{name}: a rule without peers admits everyone"
            for port in rule["ports"]:
                assert port["port"] in ports and port["protocol"] == "TCP", f"{name}: {port}"
    # The webhook: the admission port (what the Service sends the apiserver's calls to) from the control plane
    # only, the metrics port from the monitoring namespace only; the agent: its metrics port only.
    webhook = policies["colocation-webhook"]["spec"]["ingress"]
    (svc,) = [o for o in install if o["kind"] == "Service"]
    called = {w["clientConfig"]["service"].get("port", 443) for o in install
              if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration") for w in o["webhooks"]}
    (admission_port,) = {p["targetPort"] for p in svc["spec"]["ports"] if p["port"] in called}
    assert [[p["port"] for p in r["ports"]] for r in webhook] == [[admission_port], ["metrics"]]
    assert webhook[0]["from"] == [{"ipBlock": {"cidr": PLACEHOLDER}}]
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert webhook[1]["from"] == monitoring
    assert policies["colocation-agent"]["spec"]["ingress"] == [{"from": monitoring,
                                                                "ports": [{"port": "metrics", "protocol": "TCP"}]}]


def test_an_unedited_apply_fails_instead_of_blocking_the_apiserver(policies: dict[str, Obj]) -> None:
    """The apiserver validates ipBlock.cidr as a CIDR; the component's placeholder is none, so it refuses the
    object."""
    cidr = policies["colocation-webhook"]["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"]
    with pytest.raises(ValueError):
        ipaddress.ip_network(cidr)


def _docs_overlay() -> str:
    section = (ROOT / "docs" / "security.md").read_text().split("## NetworkPolicy (optional)", 1)[1].split("\n## ", 1)[0]
    blocks: list[str] = re.findall(r"```yaml\n(.*?)```", section, re.S)
    (block,) = blocks
    return block


def test_the_documented_overlay_renders_a_working_policy(tmp_path_factory: pytest.TempPathFactory,
                                                          install: list[Obj]) -> None:
    manifests = _fresh_copy(tmp_path_factory)
    overlay = manifests.parent / "my-cluster"          # beside manifests/, as the docs say
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(_docs_overlay())
    objs = _kustomize(overlay)
    (policy,) = [o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "colocation-webhook"]
    cidr = policy["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"]
    assert ipaddress.ip_network(cidr)                   # a real CIDR now
    # Everything else is the install, plus the two policies.
    ref = {(o["kind"], o["metadata"]["name"]) for o in install}
    assert {(o["kind"], o["metadata"]["name"]) for o in objs} == ref | {("NetworkPolicy", "colocation-webhook"),
                                                                        ("NetworkPolicy", "colocation-agent")}

