"""The agent's node policies on a real kube-apiserver (harness/real_apiserver.py; skipped without one).

manifests/components/agent-node-policy is applied server-side with manifests/base/agent-rbac.yaml, and the
apiserver itself authenticates the tokens, fills ``request.userInfo.extra`` and runs the policies:

- a token bound to the agent's pod on node A (``kubectl create token --bound-object-kind Pod``, as the kubelet
  mounts it) may write node A's batch resources in its status and evict a pod with its UID, and may not write node
  B's status nor anything but the batch resources of its own;
- a token of the agent's account without the node claims (no bound object, bound to a Secret) gets the policies'
  own message, never a CEL evaluation error;
- with manifests/components/agent-eviction-node-policy applied too (opt-in), the agent may not evict node B's pods
  and may still evict node A's; without it, nothing checks the evicted pod's node;
- nobody else's eviction is refused by these policies, also in a namespace with no pod (no 422 from the pod-param
  binding).

The tests share one apiserver and one set-up; each states which policies it needs (``opt_in`` present or absent)
and the fixture waits until the apiserver acts on a change (its informers lag a moment behind a write).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from harness import real_apiserver

pytestmark = pytest.mark.xdist_group("real-apiserver")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_COMPONENT = ROOT / "manifests" / "components" / "agent-node-policy"
OPT_IN_COMPONENT = ROOT / "manifests" / "components" / "agent-eviction-node-policy"
AGENT_NS, AGENT_SA = "colocation-system", "colocation-agent"
DENIED = "denied request: "


def _token_message() -> str:
    """The policies' message for a token without the pod and node claims, as the manifest states it."""
    docs = yaml.safe_load_all((DEFAULT_COMPONENT / "eviction-policy.yaml").read_text())
    (policy,) = [d for d in docs if d and d["kind"] == "ValidatingAdmissionPolicy"]
    return " ".join(policy["spec"]["validations"][0]["message"].split())


TOKEN_MESSAGE = _token_message()


@dataclass
class Scene:
    """What the tests share: the apiserver, two Nodes, the agent's pod on node A and its tokens, a workload
    namespace with pods on A and B, an empty namespace, another service account allowed to evict."""

    cluster: real_apiserver.Cluster
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    tokens: dict[str, str] = field(default_factory=dict)
    clients: dict[str, Any] = field(default_factory=dict)
    opt_in: bool = False

    @property
    def node_a(self) -> str:
        return f"colo-agent-{self.id}-a"

    @property
    def node_b(self) -> str:
        return f"colo-agent-{self.id}-b"

    @property
    def ns(self) -> str:
        return f"colo-agent-{self.id}"

    @property
    def empty_ns(self) -> str:
        return f"colo-agent-{self.id}-empty"

    def apply(self, docs: list[dict[str, Any]]) -> None:
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=colocation-test",
                             "-f", "-", input=yaml.safe_dump_all(docs))

    def pod(self, name: str, node: str, namespace: str | None = None, account: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "app", "image": "busybox"}]}
        if account:
            spec["serviceAccountName"] = account
        self.apply([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace or self.ns},
                     "spec": spec}])
        out = self.cluster.kubectl("get", "pod", "-n", namespace or self.ns, name, "-o", "json").stdout
        return dict(json.loads(out))

    def client(self, who: str) -> Any:
        """A CoreV1Api as ``who``: a token made by ``create_token``, ``admin`` (the cluster's own user), or
        ``impersonated`` (the admin impersonating the agent's service account)."""
        if who not in self.clients:
            cfg = client.Configuration()
            config.load_kube_config(  # type: ignore[no-untyped-call]  # the client is untyped
                config_file=str(self.cluster.kubeconfig), client_configuration=cfg)
            if who not in ("admin", "impersonated"):
                as_token = client.Configuration(host=cfg.host)
                as_token.ssl_ca_cert, as_token.verify_ssl = cfg.ssl_ca_cert, cfg.verify_ssl
                as_token.api_key = {"authorization": f"Bearer {self.tokens[who]}"}
                cfg = as_token
            api = client.ApiClient(cfg)
            if who == "impersonated":   # the agent's name with no extras at all, as a client certificate has
                api.set_default_header(  # type: ignore[no-untyped-call]  # the client is untyped
                    "Impersonate-User", f"system:serviceaccount:{AGENT_NS}:{AGENT_SA}")
            self.clients[who] = client.CoreV1Api(api)
        return self.clients[who]

    def create_token(self, name: str, account: str, namespace: str, *bound: str) -> None:
        """``kubectl create token`` (with ``--bound-object-kind ...``: bound to that object)."""
        self.tokens[name] = self.cluster.kubectl("create", "token", account, "-n", namespace, *bound).stdout.strip()

    @staticmethod
    def _answer(call: Callable[[], Any]) -> tuple[bool, str]:
        """(admitted, the apiserver's message when not)."""
        try:
            call()
        except ApiException as exc:
            try:
                message = str(json.loads(exc.body or "{}").get("message", exc.body))
            except ValueError:
                message = str(exc.body)
            return False, f"HTTP {exc.status}: {message}"
        return True, ""

    def evict(self, who: str, pod: dict[str, Any], uid: bool = True, dry_run: bool = True) -> tuple[bool, str]:
        """A policy/v1 Eviction of ``pod`` (with its UID as the agent sends it), by default a dry run."""
        meta = pod["metadata"]
        ns = meta["namespace"]
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": meta["name"], "namespace": ns}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": meta["uid"]}}
        flags = {"dry_run": "All"} if dry_run else {}
        return self._answer(lambda: self.client(who).create_namespaced_pod_eviction(meta["name"], ns, body, **flags))

    def patch_status(self, who: str, node: str, patch: dict[str, Any]) -> tuple[bool, str]:
        """A strategic-merge patch of the Node's status, as the agent sends it."""
        return self._answer(lambda: self.client(who).patch_node_status(node, patch))


def _denied(answer: str, policy: str | tuple[str, ...]) -> str:
    """The policy's message in a refusal by ``policy`` (one of them, with the status it gives: 403 Forbidden), or
    an AssertionError naming what came."""
    names = (policy,) if isinstance(policy, str) else policy
    for name in names:
        marker = f"ValidatingAdmissionPolicy '{name}' with binding '{name}' {DENIED}"
        if answer.startswith("HTTP 403: ") and marker in answer:
            return answer.split(marker, 1)[1].strip()
    raise AssertionError(f"not refused by {' or '.join(names)}: {answer}")


_wait = real_apiserver.wait_until


BATCH = {"kubernetes.io/batch-cpu": "11500", "kubernetes.io/batch-memory": "24Gi"}  # canonical quantities


def _set_up(s: Scene) -> None:
    c = s.cluster
    s.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
             for n in (AGENT_NS, "koordinator-system", s.ns, s.empty_ns)])
    c.kubectl("apply", "--server-side", "-f", str(ROOT / "manifests" / "base" / "agent-rbac.yaml"))
    c.kubectl("apply", "--server-side", "-k", str(DEFAULT_COMPONENT))
    for node in (s.node_a, s.node_b):
        s.apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}])
        c.kubectl("patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                        "allocatable": {"cpu": "15", "memory": "62Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                        "lastHeartbeatTime": "2026-11-28T10:00:00Z",
                                        "lastTransitionTime": "2026-11-28T10:00:00Z"}]}}))
    # The agent's pod on node A (spec.nodeName set, its Node existing: the token then names the node).
    agent = s.pod(f"colocation-agent-{s.id}", s.node_a, AGENT_NS, AGENT_SA)
    s.create_token("agent", AGENT_SA, AGENT_NS, "--bound-object-kind", "Pod", "--bound-object-name",
                   agent["metadata"]["name"])
    s.create_token("plain", AGENT_SA, AGENT_NS)
    c.kubectl("create", "secret", "generic", f"colocation-agent-{s.id}", "-n", AGENT_NS, "--from-literal=k=v")
    s.create_token("secret-bound", AGENT_SA, AGENT_NS, "--bound-object-kind", "Secret", "--bound-object-name",
                   f"colocation-agent-{s.id}")
    # Another service account allowed to evict anywhere, as a drain's or the descheduler's.
    s.apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "evictor", "namespace": s.ns}},
             {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
              "metadata": {"name": f"colo-agent-{s.id}-evictor"},
              "rules": [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]},
             {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": {"name": f"colo-agent-{s.id}-evictor"},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                          "name": f"colo-agent-{s.id}-evictor"},
              "subjects": [{"kind": "ServiceAccount", "name": "evictor", "namespace": s.ns}]}])
    s.create_token("evictor", "evictor", s.ns)
    on_a = s.pod("probe-on-a", s.node_a)
    # In effect once a token without the claims is refused by each of the two policies.
    _wait("the agent-node-policy component", lambda: TOKEN_MESSAGE in s.patch_status("plain", s.node_a, {
        "status": {"allocatable": BATCH}})[1] and TOKEN_MESSAGE in s.evict("plain", on_a)[1])


def _tear_down(s: Scene, had: set[str]) -> None:
    """Delete what the tests made; the components only if the cluster did not have them (it is re-applied if the
    tests deleted one it had)."""
    c = s.cluster
    gone = ("delete", "--ignore-not-found", "--wait=false")
    if "colocation-agent-node-status" not in had:
        c.kubectl(*gone, "-k", str(DEFAULT_COMPONENT), check=False)
    if "colocation-agent-eviction-node" in had and not s.opt_in:
        c.kubectl("apply", "--server-side", "-k", str(OPT_IN_COMPONENT), check=False)
    elif "colocation-agent-eviction-node" not in had:
        c.kubectl(*gone, "-k", str(OPT_IN_COMPONENT), check=False)
    c.kubectl(*gone, "node", s.node_a, s.node_b, check=False)
    c.kubectl(*gone, "clusterrole,clusterrolebinding", f"colo-agent-{s.id}-evictor", check=False)
    c.kubectl(*gone, "-n", AGENT_NS, "pod,secret", f"colocation-agent-{s.id}", check=False)
    c.kubectl(*gone, "namespace", s.ns, s.empty_ns, check=False)


@pytest.fixture(scope="module")
def scene() -> Iterator[Scene]:
    with real_apiserver.for_tests() as c:
        had = {n.rsplit("/", 1)[1] for n in c.kubectl("get", "validatingadmissionpolicies", "-o", "name").stdout.split()}
        s = Scene(c, opt_in="colocation-agent-eviction-node" in had)
        try:
            _set_up(s)
            yield s
        finally:
            _tear_down(s, had)


def _node_checked(s: Scene) -> bool:
    """Whether the apiserver now refuses the agent's eviction of a pod on node B (the opt-in policy in effect)."""
    on_b = s.pod("probe-on-b", s.node_b)
    return not s.evict("agent", on_b)[0]


def _set_opt_in(s: Scene, wanted: bool) -> None:
    if s.opt_in == wanted:
        return
    verb = ("apply", "--server-side") if wanted else ("delete", "--ignore-not-found")
    s.cluster.kubectl(*verb, "-k", str(OPT_IN_COMPONENT))
    _wait("the agent-eviction-node-policy component" + (" deleted" if not wanted else ""),
          lambda: _node_checked(s) == wanted)
    s.opt_in = wanted


@pytest.fixture
def default_only(scene: Scene) -> Scene:
    """The default component alone (agent-node-policy)."""
    _set_opt_in(scene, False)
    return scene


@pytest.fixture
def opt_in(scene: Scene) -> Scene:
    """The default component and the opt-in agent-eviction-node-policy."""
    _set_opt_in(scene, True)
    return scene


# -- node status -----------------------------------------------------------------------------------------------
def test_the_agent_writes_its_own_nodes_batch_resources(default_only: Scene) -> None:
    s = default_only
    ok, err = s.patch_status("agent", s.node_a, {"status": {"capacity": BATCH, "allocatable": BATCH}})
    assert ok, err
    node = json.loads(s.cluster.kubectl("get", "node", s.node_a, "-o", "json").stdout)
    assert {k: node["status"]["allocatable"].get(k) for k in BATCH} == BATCH
    ok, err = s.patch_status("agent", s.node_a, {"status": {"conditions": [
        {"type": "BEMemoryPressure", "status": "False", "reason": "BelowWatermark",
         "lastTransitionTime": "2026-11-28T10:00:00Z"}]}})
    assert ok, err


def test_the_agent_may_not_write_another_nodes_status(default_only: Scene) -> None:
    s = default_only
    ok, err = s.patch_status("agent", s.node_b, {"status": {"allocatable": BATCH}})
    assert not ok
    assert _denied(err, "colocation-agent-node-status") == (
        f"colocation-agent on node {s.node_a} may only write the status of its own Node, not {s.node_b}")


def test_the_agent_may_not_change_its_nodes_cpu_nor_ready(default_only: Scene) -> None:
    s = default_only
    ok, err = s.patch_status("agent", s.node_a, {"status": {"allocatable": {"cpu": "64"}}})
    assert not ok
    assert _denied(err, "colocation-agent-node-status") == (
        "colocation-agent may only change kubernetes.io/batch-cpu, kubernetes.io/batch-memory, kubernetes.io/mid-cpu "
        "and kubernetes.io/mid-memory in a Node's capacity and allocatable")
    ok, err = s.patch_status("agent", s.node_a, {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "Stolen", "lastTransitionTime": "2026-11-28T10:00:00Z"}]}})
    assert not ok
    assert _denied(err, "colocation-agent-node-status") == (
        "colocation-agent may only change the BEMemoryPressure condition of a Node")


# -- tokens without the node claims -----------------------------------------------------------------------------
@pytest.mark.parametrize("token", ["plain", "secret-bound", "impersonated"])
def test_a_token_without_the_node_claims_gets_the_policys_message(opt_in: Scene, token: str) -> None:
    """``kubectl create token`` with no bound object, or bound to a Secret: the service account's name, no pod
    and node claims; an impersonation of the account: no extras at all. Every policy answers with its own
    message (a read of a missing extra key would have been ``no such key``, an evaluation error)."""
    s = opt_in
    ok, err = s.patch_status(token, s.node_a, {"status": {"allocatable": BATCH}})
    assert not ok
    assert _denied(err, "colocation-agent-node-status") == TOKEN_MESSAGE
    on_a = s.pod("probe-on-a", s.node_a)
    ok, err = s.evict(token, on_a)
    assert not ok
    assert _denied(err, ("colocation-agent-evictions", "colocation-agent-eviction-node")) == TOKEN_MESSAGE
    assert "error" not in err.split(DENIED, 1)[1], err


# -- evictions ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("with_opt_in", [False, True], ids=["default", "opt-in"])
def test_the_agent_evicts_its_nodes_pod_by_uid(scene: Scene, with_opt_in: bool) -> None:
    """A real eviction (not a dry run): the pod, bound to node A, is then being deleted."""
    s = scene
    _set_opt_in(s, with_opt_in)
    pod = s.pod(f"evicted-{uuid.uuid4().hex[:6]}", s.node_a)
    ok, err = s.evict("agent", pod, dry_run=False)
    assert ok, err
    after = json.loads(s.cluster.kubectl("get", "pod", "-n", s.ns, pod["metadata"]["name"], "-o", "json",
                                         "--ignore-not-found").stdout or "{}")
    assert not after or after["metadata"].get("deletionTimestamp"), after


def test_the_agent_must_name_the_uid(default_only: Scene) -> None:
    s = default_only
    on_a = s.pod("probe-on-a", s.node_a)
    ok, err = s.evict("agent", on_a, uid=False)
    assert not ok
    assert _denied(err, "colocation-agent-evictions") == (
        "colocation-agent must name the UID of the pod it evicts (deleteOptions.preconditions.uid); "
        f"{s.ns}/probe-on-a had none")


def test_without_the_opt_in_nothing_checks_the_evicted_pods_node(default_only: Scene) -> None:
    """The limit the default component leaves (docs/security.md, "The agent's own node")."""
    s = default_only
    ok, err = s.evict("agent", s.pod("probe-on-b", s.node_b))
    assert ok, err


def test_with_the_opt_in_the_agent_may_not_evict_another_nodes_pod(opt_in: Scene) -> None:
    s = opt_in
    ok, err = s.evict("agent", s.pod("probe-on-b", s.node_b))
    assert not ok
    assert _denied(err, "colocation-agent-eviction-node") == (
        f"colocation-agent on node {s.node_a} may only evict pods on that node; {s.ns}/probe-on-b runs on node "
        f"{s.node_b}")


@pytest.mark.parametrize("with_opt_in", [False, True], ids=["default", "opt-in"])
@pytest.mark.parametrize("who", ["admin", "evictor"])
def test_nobody_elses_eviction_is_refused(scene: Scene, with_opt_in: bool, who: str) -> None:
    """The admin and another service account evict a pod of node B (admitted), and, in a namespace with no pod,
    get the apiserver's 404 for the missing pod, not the pod-param binding's 422 ("no params found")."""
    s = scene
    _set_opt_in(s, with_opt_in)
    ok, err = s.evict(who, s.pod("probe-on-b", s.node_b), uid=False)
    assert ok, err
    ghost = {"metadata": {"name": "no-such-pod", "namespace": s.empty_ns, "uid": ""}}
    ok, err = s.evict(who, ghost, uid=False)
    assert not ok
    assert err == 'HTTP 404: pods "no-such-pod" not found', err
