"""manifests/components/agent-node-policy: the ValidatingAdmissionPolicies that keep the agent to its own node.

No apiserver runs here, so the policies' CEL is compiled and evaluated with cel-python (a CEL implementation
without Kubernetes' type checker and extension libraries, which these expressions do not use) the way the
apiserver evaluates a policy: matchConditions, then the variables in order, then each validation, with
``request``, ``object`` and ``oldObject`` shaped as the apiserver gives them. The writes checked are the ones
the agent really makes: a real agent cycle against the replay API server, its node-status patches applied to
the recorded Node as a strategic merge, and its Eviction body. A policy with a paramKind is evaluated as its
binding's paramRef has the apiserver do it (``dispatch``): each selected param in turn, any failure refuses.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.agent_trees import tick_cpu
from harness.apiserver import ReplayAPIServer, load_exchange
from tests.agent.test_cycle import NODE, NS, _acting_agent, _evict_path, _routes_for_acting
from tests.cel_check import require_clean
from webhook.agent.capabilities.node_condition import PRESSURE_CONDITION
from webhook.agent.domain.batch_allocatable import PUBLISHED
from webhook.core.resources import MID_CPU

celpy = pytest.importorskip("celpy", reason="cel-python is a test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "manifests" / "components" / "agent-node-policy"
# The pod-param policy, off by default: its own component (docs/security.md, "The agent's own node").
OPT_IN = ROOT / "manifests" / "components" / "agent-eviction-node-policy"
KUBECTL = shutil.which("kubectl")
NODE_CLAIM = "authentication.kubernetes.io/node-name"
GI = 2**30

pytestmark = pytest.mark.usefixtures("restore_logging")


def _objects() -> list[dict[str, Any]]:
    return [d for c in (COMPONENT, OPT_IN) for f in sorted(c.glob("*-policy.yaml"))
            for d in yaml.safe_load_all(f.read_text()) if d]


def _policy(name: str) -> dict[str, Any]:
    (policy,) = [o for o in _objects() if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == name]
    return policy


class Policy:
    """A ValidatingAdmissionPolicy's CEL, compiled once, evaluated as the apiserver does."""

    def __init__(self, policy: dict[str, Any]) -> None:
        require_clean(policy)  # type-checked as the apiserver does first: cel-python does not (tests/cel_check.py)
        self.env = celpy.Environment()
        spec = policy["spec"]
        self.param_kind = spec.get("paramKind")
        self.match = [self._compile(c["expression"]) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], self._compile(v["expression"])) for v in spec.get("variables", [])]
        self.validations = [(self._compile(v["expression"]), v.get("message"),
                             self._compile(v["messageExpression"]) if "messageExpression" in v else None)
                            for v in spec["validations"]]

    def _compile(self, expr: str) -> tuple[str, Any]:
        return expr, self.env.program(self.env.compile(expr))

    @staticmethod
    def _run(compiled: tuple[str, Any], activation: dict[str, Any]) -> Any:
        """The value, or the apiserver's answer to an evaluation error (with failurePolicy: Fail, a denial whose
        message is the error, not the policy's message) as an ``EvalFailure``."""
        expr, program = compiled
        try:
            value = program.evaluate(activation)
        except celpy.CELEvalError as exc:
            return EvalFailure(f"expression '{expr}' resulted in error: {exc.args[0]}")
        return EvalFailure(f"expression '{expr}' resulted in error: {value.args[0]}") if isinstance(
            value, celpy.CELEvalError) else value

    def evaluate(self, request: dict[str, Any], obj: Any, old: Any = None, params: Any = None) -> str | None:
        """None when admitted (or not matched), else the first failed validation's message."""
        activation: dict[str, Any] = {"request": celpy.json_to_cel(request), "object": celpy.json_to_cel(obj),
                                      "oldObject": celpy.json_to_cel(old), "params": celpy.json_to_cel(params)}
        for condition in self.match:
            matched = self._run(condition, activation)
            if isinstance(matched, EvalFailure):
                return matched
            if not bool(matched):
                return None
        variables: dict[str, Any] = {}
        for name, compiled in self.variables:
            activation["variables"] = celpy.celtypes.MapType(variables)
            value = self._run(compiled, activation)
            if isinstance(value, EvalFailure):
                return value
            variables[celpy.celtypes.StringType(name)] = value
        activation["variables"] = celpy.celtypes.MapType(variables)
        for check, message, message_expr in self.validations:
            verdict = self._run(check, activation)
            if isinstance(verdict, EvalFailure):
                return verdict
            if not bool(verdict):
                return str(self._run(message_expr, activation)) if message_expr is not None else " ".join(
                    str(message).split())
        return None


class EvalFailure(str):
    """A denial caused by an evaluation error (the apiserver answers 422 Invalid with the error text)."""


# CollectParams' error when a binding's paramRef selects nothing and its parameterNotFoundAction is Deny; with
# failurePolicy: Fail the apiserver refuses the request with it (generic/policy_dispatcher.go, validating/dispatcher.go).
NO_PARAMS = "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"


def dispatch(name: str, request: dict[str, Any], obj: Any, old: Any = None,
             cache: tuple[dict[str, Any], ...] = ()) -> str | None:
    """The policy ``name`` through its binding, as the apiserver's dispatcher runs it. With a paramKind and a
    paramRef, the params are the objects of ``cache`` (the apiserver's informer of the param kind) that the
    paramRef selects; they are collected before matchConditions run, each is evaluated, and the first denial
    is the answer. Only the paramRef shape the component uses is implemented: selector {} and no namespace
    (the request's namespace)."""
    policy = _compiled(name)
    (binding,) = [o for o in _objects() if o["kind"] == "ValidatingAdmissionPolicyBinding"
                  and o["spec"]["policyName"] == name]
    ref = binding["spec"].get("paramRef")
    if policy.param_kind is None or ref is None:
        return policy.evaluate(request, obj, old)
    if ref.get("selector") != {} or "name" in ref or "namespace" in ref:
        raise NotImplementedError(f"this harness selects params only as selector: {{}} does: {ref}")
    kind = (policy.param_kind["apiVersion"], policy.param_kind["kind"])
    params = [p for p in cache if (p["apiVersion"], p["kind"]) == kind
              and p["metadata"].get("namespace") == request["namespace"]]
    if not params:
        return NO_PARAMS if ref["parameterNotFoundAction"] == "Deny" else None
    for param in params:
        denied = policy.evaluate(request, obj, old, params=param)
        if denied is not None:
            return denied
    return None


_COMPILED: dict[str, Policy] = {}


def _compiled(name: str) -> Policy:
    if name not in _COMPILED:
        _COMPILED[name] = Policy(_policy(name))
    return _COMPILED[name]


AGENT = "system:serviceaccount:colocation-system:colocation-agent"


def _user(node: str | None, name: str = AGENT, token: str = "pod") -> dict[str, Any]:
    """request.userInfo as the apiserver authenticates a service-account token: ``pod``, a pod's projected token
    (1.30+: with the node claims too, unless ``node`` is None); ``node``, one minted with ``kubectl create token
    --bound-object-kind Node`` (node claims, no pod claims); ``none``, a caller without extras at all (a client
    certificate or an impersonation naming the agent's account)."""
    groups = ["system:serviceaccounts", "system:serviceaccounts:colocation-system", "system:authenticated"]
    if token == "none":
        return {"username": name, "uid": "3d6c1b2e", "groups": groups}
    extra = {"authentication.kubernetes.io/credential-id": ["JTI=4c1f2d0e-7a3b-4f59-9e1c-2b8d6a5f0c31"]}
    if token == "pod":
        extra |= {"authentication.kubernetes.io/pod-name": ["colocation-agent-x7k2p"],
                  "authentication.kubernetes.io/pod-uid": ["9b2e6c1c-0f4e-4c7e-9d52-8f1c7d0c9a11"]}
    if node is not None:
        extra |= {NODE_CLAIM: [node], "authentication.kubernetes.io/node-uid": ["5f0c-node-uid"]}
    return {"username": name, "uid": "3d6c1b2e", "groups": groups, "extra": extra}


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
        agent = _acting_agent(tmp, srv, usage)
        agent.cycle(now=100.0)
        tick_cpu(tmp / "proc")                  # a CPU rate from the second cycle on: the batch values published
        agent.cycle(now=101.0)
        patches = [r.body for r in srv.requests_to("PATCH", f"/api/v1/nodes/{NODE}/status")]
        (eviction,) = [r.body for r in srv.requests_to("POST", _evict_path("be-evict-ok"))]
    assert any("allocatable" in p["status"] for p in patches)
    assert any("conditions" in p["status"] for p in patches)
    return patches, eviction


NODE_OBJECT = load_exchange("nodes-get")["response"]["body"]


TOKEN_MESSAGE = ("colocation-agent must call with its pod's service-account token, bound to the node it runs on "
                 "(claims authentication.kubernetes.io/pod-name and authentication.kubernetes.io/node-name; "
                 "Kubernetes 1.30+, ServiceAccountTokenPodNodeInfo)")
# The tokens that are not a pod's projected token with the node claims: each policy refuses them all with
# TOKEN_MESSAGE (a Node-bound token names a node, but no pod: anyone allowed to mint one picks the node).
NOT_A_POD_TOKEN = {"a pod token without the node claim": _user(None),
                   "a Node-bound token (kubectl create token --bound-object-kind Node)": _user(NODE, token="node"),
                   "a caller without extras (a client certificate)": _user(None, token="none")}


# -- the node-status policy ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def node_status() -> Policy:
    return _compiled("colocation-agent-node-status")


def test_the_agents_own_status_patches_are_admitted(node_status: Policy,
                                                    agent_writes: tuple[list[dict[str, Any]], Any]) -> None:
    old = NODE_OBJECT
    for patch in agent_writes[0]:
        new = _strategic_merge_status(old, patch)
        assert node_status.evaluate(_status_request(NODE, _user(NODE)), new, old) is None, patch
        old = new
    assert any(MID_CPU in p["status"].get("allocatable", {}) for p in agent_writes[0])   # mid is in them
    # Removing the batch and mid resources (batch off) is the agent's too.
    removed = _strategic_merge_status(old, {"status": {"capacity": {r: None for r in PUBLISHED},
                                                       "allocatable": {r: None for r in PUBLISHED}}})
    assert node_status.evaluate(_status_request(NODE, _user(NODE)), removed, old) is None


ONLY_PUBLISHED = ("colocation-agent may only change kubernetes.io/batch-cpu, kubernetes.io/batch-memory, "
                  "kubernetes.io/mid-cpu and kubernetes.io/mid-memory in a Node's capacity and allocatable")
BATCH_CPU_PATCH = {"status": {"allocatable": {"kubernetes.io/batch-cpu": "1"}}}


@pytest.mark.parametrize(("case", "user", "name", "patch", "message"), [
    ("another node", _user(NODE), "colo-node-2", BATCH_CPU_PATCH,
     "colocation-agent on node colo-node-1 may only write the status of its own Node, not colo-node-2"),
    *((case, user, NODE, BATCH_CPU_PATCH, TOKEN_MESSAGE) for case, user in NOT_A_POD_TOKEN.items()),
    ("its node's cpu capacity", _user(NODE), NODE, {"status": {"capacity": {"cpu": "64"}}},
     ONLY_PUBLISHED),
    ("a new resource", _user(NODE), NODE, {"status": {"allocatable": {"example.com/gpu": "8"}}},
     ONLY_PUBLISHED),
    ("removing memory", _user(NODE), NODE, {"status": {"allocatable": {"memory": None}}},
     ONLY_PUBLISHED),
    ("the Ready condition", _user(NODE), NODE, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
     "colocation-agent may only change the BEMemoryPressure condition of a Node"),
])
def test_anything_else_is_refused(node_status: Policy, case: str, user: dict[str, Any], name: str,
                                  patch: dict[str, Any], message: str) -> None:
    new = _strategic_merge_status(NODE_OBJECT, patch)
    assert node_status.evaluate(_status_request(name, user), new, NODE_OBJECT) == message, case


def test_other_users_are_not_matched(node_status: Policy) -> None:
    """The kubelet (and anyone else, with or without extra) is left to RBAC and NodeRestriction."""
    new = _strategic_merge_status(NODE_OBJECT, {"status": {"capacity": {"cpu": "64"}}})
    for token in ("pod", "none"):
        kubelet = _user(None, name=f"system:node:{NODE}", token=token)
        assert node_status.evaluate(_status_request(NODE, kubelet), new, NODE_OBJECT) is None


def test_the_policy_names_what_the_agent_publishes(node_status: Policy) -> None:
    values = {name: program.evaluate({}) for name, (_, program) in node_status.variables
              if name in ("published", "condition")}
    assert sorted(str(v) for v in values["published"]) == sorted(PUBLISHED)
    assert str(values["condition"]) == PRESSURE_CONDITION


# -- the eviction policy ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def evictions() -> Policy:
    return _compiled("colocation-agent-evictions")


def test_the_agents_eviction_is_admitted(evictions: Policy, agent_writes: tuple[Any, dict[str, Any]]) -> None:
    assert evictions.evaluate(_eviction_request("be-evict-ok", _user(NODE)), agent_writes[1]) is None


@pytest.mark.parametrize("case", NOT_A_POD_TOKEN)
def test_an_eviction_without_a_pod_token_is_refused(evictions: Policy, agent_writes: tuple[Any, dict[str, Any]],
                                                    case: str) -> None:
    request = _eviction_request("be-evict-ok", NOT_A_POD_TOKEN[case])
    assert evictions.evaluate(request, agent_writes[1]) == TOKEN_MESSAGE


def test_an_eviction_without_the_uid_is_refused(evictions: Policy, agent_writes: tuple[Any, dict[str, Any]]) -> None:
    bare = {k: v for k, v in agent_writes[1].items() if k != "deleteOptions"}
    assert evictions.evaluate(_eviction_request("be-evict-ok", _user(NODE)), bare) == (
        "colocation-agent must name the UID of the pod it evicts (deleteOptions.preconditions.uid); "
        "colo-demo/be-evict-ok had none")
    other = _user(NODE, name="system:serviceaccount:kube-system:disruption-controller")
    assert evictions.evaluate(_eviction_request("be-evict-ok", other), bare) is None


# -- the eviction-node policy (the pod as its param) -----------------------------------------------------------
EVICTION_NODE = "colocation-agent-eviction-node"


def _pod(name: str, node: str | None, uid: str, namespace: str = NS) -> dict[str, Any]:
    """A recorded pod of the agent's node, renamed, re-identified and put on ``node`` (None: not scheduled)."""
    pod = copy.deepcopy(RECORDED_PODS["be-batch-0"])
    pod["metadata"] |= {"name": name, "uid": uid, "namespace": namespace}
    pod["spec"].pop("nodeName", None)
    if node is not None:
        pod["spec"]["nodeName"] = node
    return pod


# The apiserver's Pod informer, with TypeMeta as the dispatcher gives params to CEL: the recorded pods of the
# agent's node, a pod on another node, a pod not yet scheduled.
RECORDED_PODS = {p["metadata"]["name"]: {"apiVersion": "v1", "kind": "Pod", **p}
                 for p in load_exchange("pods-list-field-selector-node")["response"]["body"]["items"]}
ELSEWHERE = _pod("be-elsewhere", "colo-node-2", "6e0c3f1a-2b7d-4a58-8c90-d41e5b7f2a63")
PENDING = _pod("be-pending", None, "0f9d8e7c-6b5a-4c3d-9e2f-1a0b9c8d7e6f")
CACHE = (*RECORDED_PODS.values(), ELSEWHERE, PENDING)


def _eviction_of(pod: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The agent's Eviction body, naming ``pod`` and its UID."""
    out = copy.deepcopy(body)
    out["metadata"] = {**out.get("metadata", {}), "name": pod["metadata"]["name"]}
    out["deleteOptions"]["preconditions"]["uid"] = pod["metadata"]["uid"]
    return out


def test_the_agents_eviction_of_a_pod_on_its_node_is_admitted(agent_writes: tuple[Any, dict[str, Any]]) -> None:
    body = agent_writes[1]
    assert body["deleteOptions"]["preconditions"]["uid"] == RECORDED_PODS["be-evict-ok"]["metadata"]["uid"]
    assert dispatch(EVICTION_NODE, _eviction_request("be-evict-ok", _user(NODE)), body, cache=CACHE) is None


@pytest.mark.parametrize(("case", "pod", "user", "uid", "message"), [
    ("a pod on another node", ELSEWHERE, _user(NODE), None,
     "colocation-agent on node colo-node-1 may only evict pods on that node; colo-demo/be-elsewhere runs on node "
     "colo-node-2"),
    ("a token of another node", RECORDED_PODS["be-evict-ok"], _user("colo-node-2"), None,
     "colocation-agent on node colo-node-2 may only evict pods on that node; colo-demo/be-evict-ok runs on node "
     "colo-node-1"),
    ("a pod not scheduled", PENDING, _user(NODE), None,
     "colocation-agent on node colo-node-1 may only evict pods on that node; colo-demo/be-pending runs on no node"),
    # The apiserver's cache holds the pod of the agent's node; the pod now under that name (another UID) is not it.
    ("another pod under the name", RECORDED_PODS["be-evict-ok"], _user(NODE),
     "2a7c9e4b-1d3f-4e6a-8b5c-7f0e9d2c4a18",
     "colocation-agent may only evict the pod it names: colo-demo/be-evict-ok is UID "
     "0106db4a-d5ba-46cf-adb1-f133c4e76d43, the eviction names UID 2a7c9e4b-1d3f-4e6a-8b5c-7f0e9d2c4a18"),
    *((case, RECORDED_PODS["be-evict-ok"], user, None, TOKEN_MESSAGE) for case, user in NOT_A_POD_TOKEN.items()),
])
def test_an_eviction_off_the_agents_node_is_refused(agent_writes: tuple[Any, dict[str, Any]], case: str,
                                                   pod: dict[str, Any], user: dict[str, Any], uid: str | None,
                                                   message: str) -> None:
    body = _eviction_of(pod, agent_writes[1])
    if uid is not None:
        body["deleteOptions"]["preconditions"]["uid"] = uid
    assert dispatch(EVICTION_NODE, _eviction_request(pod["metadata"]["name"], user), body, cache=CACHE) == message, case


def test_other_callers_are_not_checked_for_the_node(agent_writes: tuple[Any, dict[str, Any]]) -> None:
    """A drain or the descheduler evicts anywhere; only the agent's service account is confined (each pod of the
    namespace is still evaluated once, up to the matchConditions)."""
    body = _eviction_of(ELSEWHERE, agent_writes[1])
    for token in ("pod", "none"):
        other = _user(None, name="system:serviceaccount:kube-system:descheduler", token=token)
        assert dispatch(EVICTION_NODE, _eviction_request("be-elsewhere", other), body, cache=CACHE) is None


def test_a_uid_is_left_to_the_eviction_policy(agent_writes: tuple[Any, dict[str, Any]]) -> None:
    """Without a UID precondition only colocation-agent-evictions refuses, so the apiserver's message (that of the
    first refusing policy, in no fixed order) names the one cause."""
    bare = {k: v for k, v in agent_writes[1].items() if k != "deleteOptions"}
    assert dispatch(EVICTION_NODE, _eviction_request("be-evict-ok", _user(NODE)), bare, cache=CACHE) is None


# Pods the apiserver's cache holds, none of them in the agent's namespace.
OTHER_NAMESPACES = (RECORDED_PODS["ls-web-0"], _pod("be-elsewhere", "colo-node-2", ELSEWHERE["metadata"]["uid"],
                                                    "batch-jobs"))


@pytest.mark.parametrize(("case", "cache", "user", "verdict"), [
    # The params are collected before the matchConditions: with parameterNotFoundAction: Deny anyone's eviction
    # in a namespace of which the apiserver's cache holds no pod would be refused (422, NO_PARAMS); with Allow,
    # as shipped, nobody's is, and the agent's is not checked (as when other pods of the namespace are cached).
    ("no pod of the namespace cached, the agent", OTHER_NAMESPACES, _user(NODE), None),
    ("no pod of the namespace cached, anyone", OTHER_NAMESPACES,
     _user(None, name="system:serviceaccount:kube-system:descheduler"), None),
    # The limit: with other pods of the namespace cached, none of them is the one named, and nothing checks it.
    ("the pod not cached yet, others of its namespace are", (ELSEWHERE, PENDING), _user(NODE), None),
])
def test_a_pod_the_apiservers_cache_does_not_hold(agent_writes: tuple[Any, dict[str, Any]], case: str,
                                                  cache: tuple[dict[str, Any], ...], user: dict[str, Any],
                                                  verdict: str | None) -> None:
    request = _eviction_request("be-evict-ok", user)
    assert dispatch(EVICTION_NODE, request, agent_writes[1], cache=cache) == verdict, case


# -- the manifests --------------------------------------------------------------------------------------------
def test_each_policy_is_bound_to_deny_and_matches_only_the_agents_writes() -> None:
    objs = _objects()
    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {o["spec"]["policyName"]: o for o in objs if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == set(bindings) == {"colocation-agent-node-status", "colocation-agent-evictions",
                                              EVICTION_NODE}
    for name, policy in policies.items():
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in bindings[name]["spec"]
        assert policy["spec"]["failurePolicy"] == "Fail"
    rules = {n: [(r["operations"], r["resources"]) for r in p["spec"]["matchConstraints"]["resourceRules"]]
             for n, p in policies.items()}
    assert rules == {"colocation-agent-node-status": [(["UPDATE"], ["nodes/status"])],
                     "colocation-agent-evictions": [(["CREATE"], ["pods/eviction"])],
                     EVICTION_NODE: [(["CREATE"], ["pods/eviction"])]}


def test_the_pod_param_is_the_pod_of_the_request_namespace() -> None:
    """What the apiserver requires of a param (validation.go: paramKind apiVersion and kind; paramRef name or
    selector, not both; parameterNotFoundAction Allow or Deny) and what this policy needs: every Pod of the
    request's namespace (paramRef.namespace unset; the request is namespaced, so that is always defined)."""
    params = {o["metadata"]["name"]: o["spec"].get("paramKind") for o in _objects()
              if o["kind"] == "ValidatingAdmissionPolicy"}
    assert params == {"colocation-agent-node-status": None, "colocation-agent-evictions": None,
                      EVICTION_NODE: {"apiVersion": "v1", "kind": "Pod"}}
    refs = {o["metadata"]["name"]: o["spec"].get("paramRef") for o in _objects()
            if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert refs == {"colocation-agent-node-status": None, "colocation-agent-evictions": None,
                    EVICTION_NODE: {"selector": {}, "parameterNotFoundAction": "Allow"}}


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (Debian package kubernetes-client)")
def test_the_policies_name_the_agents_service_account() -> None:
    assert KUBECTL is not None, "kubectl is not installed"
    out = subprocess.run([KUBECTL, "kustomize", str(ROOT / "manifests")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    (agent,) = [o for o in yaml.safe_load_all(out.stdout) if o and o["kind"] == "DaemonSet"]
    account = f"system:serviceaccount:{agent['metadata']['namespace']}:{agent['spec']['template']['spec']['serviceAccountName']}"
    assert account == AGENT
    for policy in (o for o in _objects() if o["kind"] == "ValidatingAdmissionPolicy"):
        (cond,) = policy["spec"]["matchConditions"]
        assert cond["expression"] == f"request.userInfo.username == '{account}'"


def _render(path: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None, "kubectl is not installed"
    out = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{path}: {out.stderr}"
    return [o for o in yaml.safe_load_all(out.stdout) if o]


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (Debian package kubernetes-client)")
def test_the_pod_param_policy_is_only_in_its_opt_in_component() -> None:
    """The default component reads nothing but the request; the policy that reads the namespace's pods (and costs
    every eviction there, anyone's) comes only with manifests/components/agent-eviction-node-policy."""
    both = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
    default = _render(COMPONENT)
    assert {(o["kind"], o["metadata"]["name"]) for o in default} == {
        (k, n) for n in ("colocation-agent-node-status", "colocation-agent-evictions") for k in both}
    assert not any("paramKind" in o["spec"] or "paramRef" in o["spec"] for o in default)
    assert {(o["kind"], o["metadata"]["name"]) for o in _render(OPT_IN)} == {(k, EVICTION_NODE) for k in both}


# -- who could get a token of the agent for a node of their choosing ----------------------------------------
# (apiGroup, resource, verbs): what lets its holder act as colocation-agent with a pod's token naming any node
# (docs/security.md, "Tokens"): mint one, impersonate the account with the extras, run or change a pod that runs
# as the account (its kubelet mounts such a token), or reach into the agent's pod for its token.
TOKEN_PATHS = (
    ("", "serviceaccounts/token", {"create"}),
    ("", "serviceaccounts", {"impersonate"}),
    ("authentication.k8s.io", "userextras/authentication.kubernetes.io/pod-name", {"impersonate"}),
    ("authentication.k8s.io", "userextras/authentication.kubernetes.io/node-name", {"impersonate"}),
    ("", "pods", {"create"}),
    ("", "pods/exec", {"create", "get"}),
    ("", "pods/attach", {"create", "get"}),
    ("", "pods/ephemeralcontainers", {"update", "patch"}),
    ("", "replicationcontrollers", {"create", "update", "patch"}),
    *(("apps", r, {"create", "update", "patch"}) for r in ("deployments", "daemonsets", "statefulsets", "replicasets")),
    *(("batch", r, {"create", "update", "patch"}) for r in ("jobs", "cronjobs")),
)
# Every path that renders without a step before it: the install, the overlays, every component. The
# generated-certs overlay needs `certs generate` first; it is base/ (rendered in `manifests`) plus a Secret.
RENDERED = ("manifests", "manifests/overlays/cert-manager", "manifests/koordinator",
            *(f"manifests/components/{d.name}" for d in sorted((ROOT / "manifests" / "components").iterdir())
              if (d / "kustomization.yaml").is_file()))


def _covers(granted: list[str], wanted: str) -> bool:
    """RBAC matching: ``*``, the name itself, or ``resource/*`` for its subresources."""
    return any(g in ("*", wanted) or (g.endswith("/*") and wanted.startswith(g[:-1])) for g in granted)


def token_paths(role: dict[str, Any]) -> list[str]:
    """The ways to the agent's token that ``role`` (a Role or ClusterRole) grants, as ``group/resource verb``."""
    found = []
    for rule in role.get("rules", []):
        for group, resource, verbs in TOKEN_PATHS:
            if _covers(rule.get("apiGroups", []), group) and _covers(rule.get("resources", []), resource):
                found += [f"{group or 'core'}/{resource} {v}" for v in sorted(verbs)
                          if _covers(rule.get("verbs", []), v)]
    return found


def _role(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "ClusterRole", "metadata": {"name": "example"}, "rules": list(rules)}


@pytest.mark.parametrize(("case", "rule", "found"), [
    ("mint a token", {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
     ["core/serviceaccounts/token create"]),
    ("every subresource", {"apiGroups": [""], "resources": ["serviceaccounts/*"], "verbs": ["create"]},
     ["core/serviceaccounts/token create"]),
    ("impersonate the account", {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"]},
     ["core/serviceaccounts impersonate"]),
    ("impersonate the node claim", {"apiGroups": ["authentication.k8s.io"], "resources": ["userextras/*"],
                                    "verbs": ["impersonate"]},
     ["authentication.k8s.io/userextras/authentication.kubernetes.io/pod-name impersonate",
      "authentication.k8s.io/userextras/authentication.kubernetes.io/node-name impersonate"]),
    ("run a pod", {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}, ["core/pods create"]),
    ("exec into the agent", {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
     ["core/pods/exec create"]),
    ("change the DaemonSet", {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["patch"]},
     ["apps/daemonsets patch"]),
    ("a wildcard", {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, None),
    ("reading pods", {"apiGroups": [""], "resources": ["pods", "serviceaccounts"], "verbs": ["get", "list", "watch"]},
     []),
    ("evicting", {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}, []),
])
def test_the_check_finds_each_way_to_the_agents_token(case: str, rule: dict[str, Any], found: list[str] | None) -> None:
    """The check below can fail: each grant it looks for is found, in any spelling RBAC matches."""
    got = token_paths(_role(rule))
    if found is None:   # the wildcard grants all of them
        assert len(got) == sum(len(v) for _, _, v in TOKEN_PATHS), case
    else:
        assert got == found, case


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (Debian package kubernetes-client)")
def test_no_role_we_ship_grants_a_way_to_the_agents_token() -> None:
    """The node claim confines the agent only if nobody else can get a token of its account naming a node of
    their choosing; none of our Roles and ClusterRoles, in any install path or component, grants one."""
    roles = 0
    for path in RENDERED:
        for obj in (o for o in _render(ROOT / path) if o["kind"] in ("Role", "ClusterRole")):
            roles += 1
            assert token_paths(obj) == [], f"{path}: {obj['kind']} {obj['metadata']['name']}"
    assert roles >= 6   # the webhook's, the agent's, the bootstrap Job's, the audit CronJob's: really checked


# -- the expressions' field paths, against the Kubernetes schemas -------------------------------------------
kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is a test extra")
SCHEMAS = f"kubernetes-json-schema/v{kubernetes_validate.utils.latest_version()}-local-strict"
# What each variable is, per policy: the matched kind for object/oldObject (matchConstraints' resource as the
# apiserver converts it), the paramKind for params.
OBJECT_KINDS = {"colocation-agent-node-status": "node-v1", "colocation-agent-evictions": "eviction-policy-v1",
                EVICTION_NODE: "eviction-policy-v1"}
FIELD_PATH = re.compile(r"\b(params|object|oldObject)((?:\.[A-Za-z_]\w*)+)(\()?")


def _schema_at(schema: dict[str, Any], defs: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    """The schema of ``path`` under ``schema``, or None where the schema has no such field (a map's keys are
    any name)."""
    for name in path:
        while "$ref" in schema:
            schema = defs[schema["$ref"].rsplit("/", 1)[1]]
        if name in schema.get("properties", {}):
            schema = schema["properties"][name]
        elif isinstance(schema.get("additionalProperties"), dict):
            schema = schema["additionalProperties"]
        else:
            return None
    return schema


@pytest.mark.parametrize("name", sorted(OBJECT_KINDS))
def test_every_field_path_exists_in_the_kubernetes_schema(name: str) -> None:
    """A misspelt field (``spec.nodename``) would only fail at admission, as ``no such key``: each
    ``object.…``, ``oldObject.…`` and ``params.…`` path the policy reads is a field of the type it reads it on."""
    defs = kubernetes_validate.utils.schema_contents(f"{SCHEMAS}/_definitions.json", "")["$defs"]
    spec = _policy(name)["spec"]
    kinds = {"object": OBJECT_KINDS[name], "oldObject": OBJECT_KINDS[name]}
    if "paramKind" in spec:
        kinds["params"] = f"{spec['paramKind']['kind'].lower()}-{spec['paramKind']['apiVersion']}"
    expressions = [e["expression"] for e in spec.get("matchConditions", []) + spec.get("variables", [])]
    expressions += [v[k] for v in spec["validations"] for k in ("expression", "messageExpression") if k in v]
    paths = set()
    for expr in expressions:
        for root, dotted, call in FIELD_PATH.findall(expr):
            path = dotted.split(".")[1:]
            paths.add((root, tuple(path[:-1] if call else path)))
    assert paths, name
    for root, path in sorted(paths):
        assert root in kinds, f"{name}: {root} is not defined for this policy"
        schema = kubernetes_validate.utils.schema_contents(f"{SCHEMAS}/{kinds[root]}.json", "")
        assert _schema_at(schema, defs, list(path)) is not None, f"{name}: {root}.{'.'.join(path)}"


@pytest.mark.parametrize(("kind", "path", "exists"), [
    ("pod-v1", "spec.nodeName", True), ("pod-v1", "metadata.uid", True), ("pod-v1", "spec.nodename", False),
    ("eviction-policy-v1", "deleteOptions.preconditions.uid", True),
    ("eviction-policy-v1", "deleteOptions.precondition.uid", False),
    ("node-v1", "status.capacity", True), ("node-v1", "status.capacity.cpu", True), ("node-v1", "status.cpu", False),
])
def test_the_schema_walk_finds_a_misspelt_field(kind: str, path: str, exists: bool) -> None:
    defs = kubernetes_validate.utils.schema_contents(f"{SCHEMAS}/_definitions.json", "")["$defs"]
    schema = kubernetes_validate.utils.schema_contents(f"{SCHEMAS}/{kind}.json", "")
    assert (_schema_at(schema, defs, path.split(".")) is not None) == exists
