"""manifests/components/agent-node-policy: the ValidatingAdmissionPolicies that keep the agent to its own node.

No apiserver runs here, so the policies' CEL is compiled and evaluated with cel-python (a CEL implementation
without Kubernetes' type checker and extension libraries, which these expressions do not use) the way the
apiserver evaluates a policy: matchConditions, then the variables in order, then each validation, with
``request``, ``object`` and ``oldObject`` shaped as the apiserver gives them. The writes checked are the ones
the agent really makes: a real agent cycle against the replay API server, its node-status patches applied to
the recorded Node as a strategic merge, and its Eviction body.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apiserver import ReplayAPIServer, load_exchange
from tests.test_agent_end_to_end import NODE, NS, _acting_agent, _evict_path, _routes_for_acting
from webhook.agent.agent import PRESSURE_CONDITION
from webhook.core.resources import BATCH_RESOURCES

celpy = pytest.importorskip("celpy", reason="cel-python is a test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[1]
COMPONENT = ROOT / "manifests" / "components" / "agent-node-policy"
KUBECTL = shutil.which("kubectl")
NODE_CLAIM = "authentication.kubernetes.io/node-name"
GI = 2**30

pytestmark = pytest.mark.usefixtures("restore_logging")


def _objects() -> list[dict[str, Any]]:
    return [d for f in sorted(COMPONENT.glob("*-policy.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def _policy(name: str) -> dict[str, Any]:
    (policy,) = [o for o in _objects() if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == name]
    return policy


class Policy:
    """A ValidatingAdmissionPolicy's CEL, compiled once, evaluated as the apiserver does."""

    def __init__(self, policy: dict[str, Any]) -> None:
        self.env = celpy.Environment()
        spec = policy["spec"]
        self.match = [self._compile(c["expression"]) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec.get("variables", [])]
        self.validations = [(self._compile(v["expression"]), v.get("message"),
                             self._compile(v["messageExpression"]) if "messageExpression" in v else None)
                            for v in spec["validations"]]

    def _compile(self, expr: str) -> Any:
        return self.env.program(self.env.compile(expr))

    def evaluate(self, request: dict[str, Any], obj: Any, old: Any = None) -> str | None:
        """None when admitted (or not matched), else the first failed validation's message."""
        activation: dict[str, Any] = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(obj),
                                      "oldObject": celpy.json_to_cel(old)}
        if not all(bool(m.evaluate(activation)) for m in self.match):
            return None
        variables: dict[str, Any] = {}
        for name, program in self.variables:
            activation["variables"] = celpy.celtypes.MapType(variables)
            variables[celpy.celtypes.StringType(name)] = program.evaluate(activation)
        activation["variables"] = celpy.celtypes.MapType(variables)
        for check, message, message_expr in self.validations:
            if not bool(check.evaluate(activation)):
                return str(message_expr.evaluate(activation)) if message_expr is not None else " ".join(
                    str(message).split())
        return None


def _user(node: str | None, name: str = "system:serviceaccount:colocation-system:colocation-agent") -> dict[str, Any]:
    """request.userInfo as the apiserver authenticates a pod's projected token (1.30+: the node claims too)."""
    extra = {"authentication.kubernetes.io/pod-name": ["colocation-agent-x7k2p"],
             "authentication.kubernetes.io/pod-uid": ["9b2e6c1c-0f4e-4c7e-9d52-8f1c7d0c9a11"]}
    if node is not None:
        extra |= {NODE_CLAIM: [node], "authentication.kubernetes.io/node-uid": ["5f0c-node-uid"]}
    return {"username": name, "uid": "3d6c1b2e", "groups": ["system:serviceaccounts",
            "system:serviceaccounts:colocation-system", "system:authenticated"], "extra": extra}


def _status_request(node_name: str, user: dict[str, Any]) -> dict[str, Any]:
    return {"uid": "a1", "kind": {"group": "", "version": "v1", "kind": "Node"},
            "resource": {"group": "", "version": "v1", "resource": "nodes"}, "subResource": "status",
            "name": node_name, "operation": "UPDATE", "userInfo": user}


def _eviction_request(pod: str, user: dict[str, Any]) -> dict[str, Any]:
    return {"uid": "a2", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
            "name": pod, "namespace": NS, "operation": "CREATE", "userInfo": user}


def _strategic_merge_status(node: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A Node's status after a strategic-merge patch: resource maps merged (null deletes a key), conditions merged
    by their patch merge key ``type``."""
    out = copy.deepcopy(node)
    status = out.setdefault("status", {})
    for field, value in patch.get("status", {}).items():
        if field in ("capacity", "allocatable"):
            merged = {**status.get(field, {}), **value}
            status[field] = {k: v for k, v in merged.items() if v is not None}
        elif field == "conditions":
            conditions = status.setdefault("conditions", [])
            for cond in value:
                same = next((c for c in conditions if c["type"] == cond["type"]), None)
                if same is None:
                    conditions.append(dict(cond))
                else:
                    same.update(cond)
        else:
            status[field] = value
    return out


@pytest.fixture(scope="module")
def agent_writes(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The node-status patches and an Eviction body a real agent cycle sends (memory over the watermark)."""
    tmp = tmp_path_factory.mktemp("agent")
    with ReplayAPIServer() as srv:
        _routes_for_acting(srv, "eviction-pdb-blocked-429")
        usage = {"be-protected": 3 * GI, "be-evict-ok": 5 * GI // 2, "ls-web-0": 8 * GI}
        _acting_agent(tmp, srv, usage).cycle(now=100.0)
        patches = [r.body for r in srv.requests_to("PATCH", f"/api/v1/nodes/{NODE}/status")]
        (eviction,) = [r.body for r in srv.requests_to("POST", _evict_path("be-evict-ok"))]
    assert any("allocatable" in p["status"] for p in patches)
    assert any("conditions" in p["status"] for p in patches)
    return patches, eviction


NODE_OBJECT = load_exchange("nodes-get")["response"]["body"]


# -- the node-status policy ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def node_status() -> Policy:
    return Policy(_policy("colocation-agent-node-status"))


def test_the_agents_own_status_patches_are_admitted(node_status: Policy,
                                                    agent_writes: tuple[list[dict[str, Any]], Any]) -> None:
    old = NODE_OBJECT
    for patch in agent_writes[0]:
        new = _strategic_merge_status(old, patch)
        assert node_status.evaluate(_status_request(NODE, _user(NODE)), new, old) is None, patch
        old = new
    # Removing the batch resources (batch off) is the agent's too.
    removed = _strategic_merge_status(old, {"status": {"capacity": {r: None for r in BATCH_RESOURCES},
                                                       "allocatable": {r: None for r in BATCH_RESOURCES}}})
    assert node_status.evaluate(_status_request(NODE, _user(NODE)), removed, old) is None


@pytest.mark.parametrize(("case", "user", "name", "patch", "message"), [
    ("another node", NODE, "colo-node-2", {"status": {"allocatable": {"kubernetes.io/batch-cpu": "1"}}},
     "colocation-agent on node colo-node-1 may only write the status of its own Node, not colo-node-2"),
    ("a token without the node claim", None, NODE, {"status": {"allocatable": {"kubernetes.io/batch-cpu": "1"}}},
     "colocation-agent must call with its pod's service-account token, bound to the node it runs on (claim "
     "authentication.kubernetes.io/node-name; Kubernetes 1.30+, ServiceAccountTokenPodNodeInfo)"),
    ("its node's cpu capacity", NODE, NODE, {"status": {"capacity": {"cpu": "64"}}},
     "colocation-agent may only change kubernetes.io/batch-cpu and kubernetes.io/batch-memory in a Node's capacity "
     "and allocatable"),
    ("a new resource", NODE, NODE, {"status": {"allocatable": {"example.com/gpu": "8"}}},
     "colocation-agent may only change kubernetes.io/batch-cpu and kubernetes.io/batch-memory in a Node's capacity "
     "and allocatable"),
    ("removing memory", NODE, NODE, {"status": {"allocatable": {"memory": None}}},
     "colocation-agent may only change kubernetes.io/batch-cpu and kubernetes.io/batch-memory in a Node's capacity "
     "and allocatable"),
    ("the Ready condition", NODE, NODE, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
     "colocation-agent may only change the BEMemoryPressure condition of a Node"),
])
def test_anything_else_is_refused(node_status: Policy, case: str, user: str | None, name: str,
                                  patch: dict[str, Any], message: str) -> None:
    new = _strategic_merge_status(NODE_OBJECT, patch)
    assert node_status.evaluate(_status_request(name, _user(user)), new, NODE_OBJECT) == message, case


def test_other_users_are_not_matched(node_status: Policy) -> None:
    """The kubelet (and anyone else) is left to RBAC and NodeRestriction."""
    new = _strategic_merge_status(NODE_OBJECT, {"status": {"capacity": {"cpu": "64"}}})
    kubelet = _user(None, name=f"system:node:{NODE}")
    assert node_status.evaluate(_status_request(NODE, kubelet), new, NODE_OBJECT) is None


def test_the_policy_names_what_the_agent_publishes(node_status: Policy) -> None:
    values = {name: program.evaluate({}) for name, program in node_status.variables
              if name in ("published", "condition")}
    assert sorted(str(v) for v in values["published"]) == sorted(BATCH_RESOURCES)
    assert str(values["condition"]) == PRESSURE_CONDITION


# -- the eviction policy ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def evictions() -> Policy:
    return Policy(_policy("colocation-agent-evictions"))


def test_the_agents_eviction_is_admitted(evictions: Policy, agent_writes: tuple[Any, dict[str, Any]]) -> None:
    assert evictions.evaluate(_eviction_request("be-evict-ok", _user(NODE)), agent_writes[1]) is None


def test_an_eviction_without_the_claim_or_the_uid_is_refused(evictions: Policy,
                                                             agent_writes: tuple[Any, dict[str, Any]]) -> None:
    body = agent_writes[1]
    assert evictions.evaluate(_eviction_request("be-evict-ok", _user(None)), body) == (
        "colocation-agent must call with its pod's service-account token, bound to the node it runs on (claim "
        "authentication.kubernetes.io/node-name; Kubernetes 1.30+, ServiceAccountTokenPodNodeInfo)")
    bare = {k: v for k, v in body.items() if k != "deleteOptions"}
    assert evictions.evaluate(_eviction_request("be-evict-ok", _user(NODE)), bare) == (
        "colocation-agent must name the UID of the pod it evicts (deleteOptions.preconditions.uid); "
        "colo-demo/be-evict-ok had none")
    other = _user(NODE, name="system:serviceaccount:kube-system:disruption-controller")
    assert evictions.evaluate(_eviction_request("be-evict-ok", other), bare) is None


# -- the manifests --------------------------------------------------------------------------------------------
def test_each_policy_is_bound_to_deny_and_matches_only_the_agents_writes() -> None:
    objs = _objects()
    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {o["spec"]["policyName"]: o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == set(bindings) == {"colocation-agent-node-status", "colocation-agent-evictions"}
    for name, policy in policies.items():
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in bindings[name]["spec"]
        assert policy["spec"]["failurePolicy"] == "Fail"
    rules = {n: [(r["operations"], r["resources"]) for r in p["spec"]["matchConstraints"]["resourceRules"]]
             for n, p in policies.items()}
    assert rules == {"colocation-agent-node-status": [(["UPDATE"], ["nodes/status"])],
                     "colocation-agent-evictions": [(["CREATE"], ["pods/eviction"])]}


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (Debian package kubernetes-client)")
def test_the_policies_name_the_agents_service_account() -> None:
    out = subprocess.run([KUBECTL, "kustomize", str(ROOT / "manifests")], capture_output=True, text=True, timeout=60)  # type: ignore[list-item]
    assert out.returncode == 0, out.stderr
    (agent,) = [o for o in yaml.safe_load_all(out.stdout) if o and o["kind"] == "DaemonSet"]
    account = f"system:serviceaccount:{agent['metadata']['namespace']}:{agent['spec']['template']['spec']['serviceAccountName']}"
    for policy in (o for o in _objects() if o["kind"] == "ValidatingAdmissionPolicy"):
        (cond,) = policy["spec"]["matchConditions"]
        assert cond["expression"] == f"request.userInfo.username == '{account}'"
