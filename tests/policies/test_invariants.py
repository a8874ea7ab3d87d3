"""manifests/components/admission-policies: the stateless validating rules as a ValidatingAdmissionPolicy, proven
equal to the webhook's validating chain.

The policy is generated (``webhook.policies.invariants``); the committed manifest must be what the generator renders.
Each review goes through the real chain (``chain.validate``, an empty cluster state: the quota rules, which need
one, are not in the policy) and through the policy as the apiserver evaluates it (``tests/admission_policy.py``,
cel-python with the Kubernetes quantity, lists and strings functions): the verdicts must agree, and the messages
too, except where docs/policies.md says the policy leaves a check to the webhook (an LSR/LSE pod's cpus as a whole
number). Both sides are given the pod as the apiserver hands it to admission: map keys sorted (its JSON encoder
sorts them); nothing the apiserver's decoding or validation refuses (a review the webhook answers 400 is skipped).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.admission import chain
from webhook.admission.response import Decision
from webhook.admission.review import request_from_dict
from webhook.cli import webhook as webhook_cli
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.core.fielderrors import aggregate
from webhook.policies import invariants as policies

pytest.importorskip("celpy", reason="cel-python is a test extra: pip install -e '.[test]'")
from tests.admission_policy import Outcome, Policy, policy_and_binding  # after the skip: it needs celpy

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "manifests" / "components" / "admission-policies"
MANIFEST = COMPONENT / "pod-invariants.yaml"
FIXTURES = ROOT / "tests" / "fixtures"
KUBECTL = shutil.which("kubectl")
QOS, PRIO_LABEL, SUB = "koordinator.sh/qosClass", "koordinator.sh/priority-class", "koordinator.sh/priority"
BATCH_CPU, BATCH_MEMORY = "kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"
RECLAIMED_CPU, RECLAIMED_MEMORY = "alibabacloud.com/reclaimed-cpu", "alibabacloud.com/reclaimed-memory"
# What the policy leaves to the webhook (docs/policies.md): whether an LSR/LSE pod's total cpu is whole.
LEFT_TO_WEBHOOK = re.compile(r'pod\.spec\.containers\[\*\]\.resources\.requests: Invalid value: "[^"]*": '
                             r"the requested CPUs of LSR Pod must be integer")


@pytest.fixture(scope="module")
def policy() -> Policy:
    return policy_and_binding(list(yaml.safe_load_all(MANIFEST.read_text())))


# -- one source ----------------------------------------------------------------------------------------------------
def test_the_committed_manifest_is_what_the_generator_renders() -> None:
    assert MANIFEST.read_text() == policies.render(), "run: python -m webhook.policies.invariants > " + str(
        MANIFEST.relative_to(ROOT))


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_the_policies_command_prints_the_component(output: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The invariants, then the band policy: what the component's two files hold."""
    argv = ["policies"] + (["-o", output] if output == "json" else [])
    assert webhook_cli.main(argv) == 0
    out = capsys.readouterr().out
    component = [d for f in ("pod-invariants.yaml", "band-conversion.yaml")
                 for d in yaml.safe_load_all((COMPONENT / f).read_text()) if d]
    if output == "yaml":
        assert out.startswith(MANIFEST.read_text())
        assert [d for d in yaml.safe_load_all(out) if d] == component
    else:
        listed = json.loads(out)
        assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
        assert listed["items"] == component


def test_the_binding_covers_what_the_validating_webhook_covers() -> None:
    """Same operations, resources and namespaces as the ValidatingWebhookConfiguration: the policy stands in for
    the webhook exactly where the webhook would have judged."""
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "base" / "webhook-configurations.yaml").read_text()))
    (hook,) = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"]
    policy, binding = policies.policy(), policies.binding()
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    (hook_rule,) = hook["rules"]
    assert rule == hook_rule
    assert binding["spec"]["matchResources"]["namespaceSelector"] == hook["namespaceSelector"]
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_one_validation_per_stateless_rule_in_chain_order() -> None:
    stateless = [r.NAME for r in chain.VALIDATING if not r.NAME.startswith("quota-")]
    assert stateless == ["batch-mixing", "batch-units", "koordinator-rules"]
    assert len(policies.validations()) == len(stateless)


# Functions a 1.30 apiserver's policy environment has: CEL's standard ones and the Kubernetes libraries used here.
KNOWN_FUNCTIONS = {"has", "size", "string", "int", "dyn", "quantity", "isQuantity", "sign", "isInteger", "isGreaterThan",
                   "isLessThan", "compareTo", "filter", "map", "exists", "all", "join", "split", "indexOf"}


def test_every_expression_compiles_and_calls_only_known_functions(policy: Policy) -> None:
    spec = policies.policy()["spec"]
    exprs = [v["expression"] for v in spec["variables"]] + [
        e for v in spec["validations"] for e in (v["expression"], v.get("messageExpression", "")) if e]
    for expr in exprs:
        code = re.sub(r"'(?:[^'\\]|\\.)*'", "''", expr)  # literals out: their words are no calls
        called = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(", code)) - {"in"}  # `in (`: an operator
        assert called <= KNOWN_FUNCTIONS, called - KNOWN_FUNCTIONS
        assert "\n" not in expr  # a YAML block would keep it; the apiserver needs none
    for v in spec["validations"]:  # upstream: a message holds no line break
        assert "\n" not in v["message"] and v["message"].strip() == v["message"]
        assert v["reason"] in ("Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge")
        # the apiserver compiles a messageExpression only when its type is exactly string: dyn is refused
        assert v["messageExpression"].startswith("string(") and v["messageExpression"].endswith(")")
    assert set(policies.FALLBACK) == {r.NAME for r in chain.VALIDATING if not r.NAME.startswith("quota-")}
    names = [v["name"] for v in spec["variables"]]
    assert len(names) == len(set(names))
    for i, v in enumerate(spec["variables"]):  # a variable reads only those before it (upstream compiles in order)
        assert set(re.findall(r"variables\.(\w+)", v["expression"])) <= set(names[:i]), v["name"]


def _leaf(node: Any) -> Any:
    """The one node an expression reduces to through single-child nodes (a literal, a call), or the first branching
    node."""
    while hasattr(node, "children") and len(node.children) == 1 and hasattr(node.children[0], "data"):
        node = node.children[0]
    return node


def test_every_map_literal_is_homogeneous() -> None:
    """From 1.29 the apiserver refuses a list or map literal whose entries differ in type
    (ValidateHomogeneousAggregateLiterals): every map literal's values are all dyn(...) or all string literals."""
    import celpy

    env = celpy.Environment()
    spec = policies.policy()["spec"]
    maps = 0
    for expr in [v["expression"] for v in spec["variables"]]:
        for node in env.compile(expr).iter_subtrees():
            if node.data != "mapinits":
                continue
            maps += 1
            values = [_leaf(v) for v in node.children[1::2]]
            kinds = {("dyn" if v.data == "ident_arg" and str(v.children[0]) == "dyn" else
                      "string" if v.data == "literal" and str(v.children[0]).startswith("'") else v.data)
                     for v in values}
            assert kinds in ({"dyn"}, {"string"}), (kinds, expr[:200])
    assert maps >= 5


def _pod_schema_has(version: str, path: list[str]) -> bool:
    """Whether the Pod's OpenAPI schema of ``version`` (kubernetes-validate's copy) has the field ``path``; a list
    step goes into its items."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    folder = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{version}-local-strict"
    defs = json.loads((folder / "_definitions.json").read_text())["$defs"]
    node: dict[str, Any] = json.loads((folder / "pod-v1.json").read_text())
    for step in path:
        while "$ref" in node or "allOf" in node:
            node = defs[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node["allOf"][0]
        if node.get("type") == "array" or "items" in node:
            node = node["items"]
            while "$ref" in node:
                node = defs[node["$ref"].rsplit("/", 1)[1]]
        if step not in node.get("properties", {}):
            return False
        node = node["properties"][step]
    return True


def _fields_read() -> set[tuple[str, ...]]:
    """Every Pod field path the expressions read: off ``object``/``oldObject``, and off a container (``c``, ``x``)."""
    spec = policies.policy()["spec"]
    found: set[tuple[str, ...]] = set()
    for v in spec["variables"]:
        code = re.sub(r"'(?:[^'\\]|\\.)*'", "''", v["expression"])
        for m in re.finditer(r"\b(object|oldObject|c|x)\.([A-Za-z]+(?:\.[A-Za-z]+)*)", code):
            root, steps = m.group(1), tuple(m.group(2).split("."))
            if code[m.end():m.end() + 1] == "(":  # a method call (.map, .exists), not a field
                steps = steps[:-1]
            found.add(steps if root in ("object", "oldObject") else ("spec", "containers", *steps))
    return found


def test_every_field_the_policy_reads_is_in_the_pod_schema() -> None:
    """The apiserver's type check reads the Pod's OpenAPI schema: every field the expressions name is in the newest
    one, and in 1.30's but the pod-level resources (spec.resources, 1.32+), which the expressions read behind has()."""
    fields = _fields_read()
    assert ("spec", "containers", "resources", "requests") in fields and ("metadata", "labels") in fields
    latest = kubernetes_validate_version()
    assert [f for f in fields if not _pod_schema_has(latest, list(f))] == []
    assert {f for f in fields if not _pod_schema_has("1.30.0", list(f))} == {
        ("spec", "resources"), ("spec", "resources", "requests"), ("spec", "resources", "limits")}


def kubernetes_validate_version() -> str:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    return str(kubernetes_validate.utils.latest_version())


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_the_component_renders_and_is_valid_kubernetes() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    assert KUBECTL is not None, "kubectl is not installed"
    out = subprocess.run([KUBECTL, "kustomize", str(COMPONENT)], capture_output=True, text=True, check=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("ValidatingAdmissionPolicy", "colocation-band-conversion"),
        ("ValidatingAdmissionPolicy", "colocation-pod-invariants"),
        ("ValidatingAdmissionPolicyBinding", "colocation-band-conversion"),
        ("ValidatingAdmissionPolicyBinding", "colocation-pod-invariants")]
    for d in docs:
        kubernetes_validate.validate(d, kubernetes_validate.utils.latest_version(), strict=True)


# -- proven equal --------------------------------------------------------------------------------------------------
def _sorted_maps(value: Any) -> Any:
    """The object as the apiserver's JSON encoder sends it: every map's keys sorted."""
    if isinstance(value, dict):
        return {k: _sorted_maps(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_maps(v) for v in value]
    return value


def _state() -> ClusterState:
    s = ClusterState(WEBHOOK_KINDS)
    s.replace_all({})
    return s


def _expected(decision: Decision) -> tuple[bool, str]:
    """The webhook's verdict without what the policy leaves to it (docs/policies.md)."""
    if len(decision.message.encode()) > policies.MAX_MESSAGE_BYTES:  # the apiserver takes the static message
        return decision.allowed, policies.FALLBACK[decision.rule]
    if decision.allowed or decision.rule != "koordinator-rules":
        return decision.allowed, decision.message
    message = decision.message
    errors = [message] if not message.startswith("[") else None
    if errors is None:  # the aggregate of koordinator-rules' texts: none holds ", " followed by a field path
        errors = re.split(r", (?=labels\.|spec\.priority|Pod: |pod\.spec)", message[1:-1])
    kept = [e for e in errors if not LEFT_TO_WEBHOOK.fullmatch(e)]
    return (not kept), aggregate(kept)


def check_agree(policy: Policy, request: dict[str, Any]) -> tuple[Decision, Outcome]:
    request = _sorted_maps(copy.deepcopy(request))
    decision = chain.validate(request_from_dict(copy.deepcopy(request)), _state(), chain.Settings())
    if decision.code == 400:  # the apiserver refuses such an object before any admission step
        return decision, Outcome(matched=False, allowed=True)
    outcome = policy.evaluate(request)
    assert not outcome.error, outcome.message
    allowed, message = _expected(decision)
    assert (outcome.allowed, outcome.message if not outcome.allowed else "") == (
        allowed, message if not allowed else ""), request.get("object")
    return decision, outcome


def _request(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
             namespace: str = "colo-demo") -> dict[str, Any]:
    return {"uid": "0000-test", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "",
            "name": "p", "namespace": namespace, "operation": operation, "object": obj, "oldObject": old,
            "userInfo": {"username": "alice"}}


def _container(name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
               **extra: Any) -> dict[str, Any]:
    res = {k: v for k, v in (("requests", requests), ("limits", limits)) if v is not None}
    return {"name": name, "image": "busybox", "resources": res, **extra}


def _pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
         labels: dict[str, str] | None = None, priority: int | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": containers, **spec}
    if init:
        body["initContainers"] = init
    if priority is not None:
        body["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "colo-demo",
                                                            "labels": labels or {}}, "spec": body}


BE = {QOS: "BE"}
B = {BATCH_CPU: "500", BATCH_MEMORY: "1Gi"}
POD_LEVEL_ADVICE = ("remove cpu and memory from spec.resources and write them in the containers as "
                    "kubernetes.io/batch-cpu and batch-memory (the apiserver takes no batch resource at pod level)")
MIX = ("a pod uses either batch resources (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) or native cpu and "
       "memory, not both")
PROTO = ("a pod names its batch resources in one protocol: kubernetes.io/batch-cpu and batch-memory (Koordinator) "
         "or the legacy alibabacloud.com/reclaimed-cpu and reclaimed-memory, not both")
CPU_WHOLE = "kubernetes.io/batch-cpu counts milli-cores and must be a whole number: write 500 for half a core, 1k or " \
            "1000 for one core"
IMMUTABLE_QOS = 'labels.koordinator.sh/qosClass: Invalid value: "LS": field is immutable'
NEEDS_BE = "labels.koordinator.sh/qosClass: Required value: must specify koordinator QoS BE with koordinator " \
           "colocation resources"

# (name, request, the policy's expected message or None for admitted): the table pins the verdicts, check_agree
# holds the webhook to the same.
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("plain pod", _request(_pod([_container("app", {"cpu": "1"})])), None),
    ("batch pod", _request(_pod([_container("app", B, B)], labels=BE, priority=5000)), None),
    ("mix in one container", _request(_pod([_container("app", {**B, "cpu": "1"})], labels=BE, priority=5000)),
     f'container "app" asks for both kubernetes.io/batch-cpu and cpu: {MIX}'),
    ("mix across init and container", _request(_pod([_container("app", {"memory": "1Gi"})],
                                                     init=[_container("setup", B)], labels=BE, priority=5000)),
     f'init container "setup" asks for kubernetes.io/batch-cpu and container "app" asks for memory: {MIX}'),
    ("mix with a sidecar", _request(_pod([_container("app", B)], init=[_container(
        "proxy", {"cpu": "100m"}, restartPolicy="Always")], labels=BE, priority=5000)),
     f'container "app" asks for kubernetes.io/batch-cpu and init container "proxy" asks for cpu: {MIX}'),
    ("the RuntimeClass's overhead is no mix", _request(_pod([_container("app", B)], labels=BE, priority=5000,
                                                             overhead={"cpu": "250m"})), None),
    ("mix with the pod level", _request(_pod([_container("app", B)], labels=BE, priority=5000,
                                             resources={"limits": {"cpu": "1"}})),
     f'container "app" asks for kubernetes.io/batch-cpu and the pod (spec.resources) asks for cpu: {MIX}; '
     f"{POD_LEVEL_ADVICE}"),
    ("LSR cpu at the pod level", _request(_pod([_container("app")], labels={QOS: "LSR"}, priority=9500,
                                               resources={"requests": {"cpu": "2"}})), None),
    ("LSR cpu in the overhead only", _request(_pod([_container("app")], labels={QOS: "LSR"}, priority=9500,
                                                   overhead={"cpu": "1"})), None),
    ("zero native is no ask", _request(_pod([_container("app", {**B, "cpu": "0"})], labels=BE, priority=5000)), None),
    ("protocol mix", _request(_pod([_container("app", {BATCH_CPU: "500", RECLAIMED_MEMORY: "1Gi"})], labels=BE,
                                   priority=5000)),
     f'container "app" asks for both alibabacloud.com/reclaimed-memory and kubernetes.io/batch-cpu: {PROTO}'),
    ("fractional batch-cpu", _request(_pod([_container("app", {BATCH_CPU: "0.5"})], labels=BE, priority=5000)),
     f'spec.containers[0].resources.requests[kubernetes.io/batch-cpu]: Invalid value: "0.5": {CPU_WHOLE}'),
    ("1k is whole", _request(_pod([_container("app", {BATCH_CPU: "1k"})], labels=BE, priority=5000)), None),
    ("request above limit", _request(_pod([_container("a"), _container("app", {BATCH_CPU: "2k"}, {BATCH_CPU: "1k"})],
                                          labels=BE, priority=5000)),
     'spec.containers[1].resources.requests: Invalid value: "2k": must be less than or equal to '
     'kubernetes.io/batch-cpu limit of 1k'),
    ("batch without BE", _request(_pod([_container("app", B)], priority=5000)), NEEDS_BE),
    ("BE as koord-prod", _request(_pod([_container("app", B)], labels=BE, priority=9500)),
     "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination"),
    ("LSR without cpu, non-prod", _request(_pod([_container("app")], labels={QOS: "LSR"}, priority=7500)),
     "[Pod: Forbidden: koordinator.sh/qosClass=LSR and priorityClass=koord-mid cannot be used in combination, "
     "pod.spec.containers[*].resources.requests: Required value: LSR Pod must declare the requested CPUs]"),
    ("LSE with 2 cpus", _request(_pod([_container("app", {"cpu": "2"})], labels={QOS: "LSE"}, priority=9500)), None),
    ("QoS changed on UPDATE", _request(_pod([_container("app", B)], labels={QOS: "LS"}, priority=5000), "UPDATE",
                                       _pod([_container("app", B)], labels=BE, priority=5000)),
     f"[{IMMUTABLE_QOS}, {NEEDS_BE}]"),
    ("a carried fraction is ratcheted", _request(
        _pod([_container("app", {BATCH_CPU: "0.5"})], labels={**BE, "team": "a"}, priority=5000), "UPDATE",
        _pod([_container("app", {BATCH_CPU: "0.5"})], labels=BE, priority=5000)), None),
    ("a carried mix is ratcheted", _request(
        _pod([_container("app", {**B, "cpu": "1"})], labels={**BE, "team": "a"}, priority=5000), "UPDATE",
        _pod([_container("app", {**B, "cpu": "1"})], labels=BE, priority=5000)), None),
    ("sub-priority changed", _request(_pod([_container("app", B)], labels={**BE, SUB: "2"}, priority=5000), "UPDATE",
                                      _pod([_container("app", B)], labels={**BE, SUB: "1"}, priority=5000)),
     'labels.koordinator.sh/priority: Invalid value: "2": field is immutable'),
    ("excluded namespace", _request(_pod([_container("app", {**B, "cpu": "1"})]), namespace="kube-system"), None),
]


@pytest.mark.parametrize(("name", "request_", "message"), CASES, ids=[c[0] for c in CASES])
def test_policy_and_webhook_agree_on_the_table(policy: Policy, name: str, request_: dict[str, Any],
                                               message: str | None) -> None:
    if request_["namespace"] == "kube-system":  # the webhook is not called there: the policy must not be either
        assert not policy.matches(request_)
        return
    _, outcome = check_agree(policy, request_)
    assert (outcome.allowed, outcome.message or None) == (message is None, message)


def _recorded_reviews() -> list[tuple[str, dict[str, Any]]]:
    """Every AdmissionReview under tests/fixtures whose request carries an object."""
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(where: str, value: Any) -> None:
        if isinstance(value, dict):
            if value.get("kind") == "AdmissionReview" and isinstance(value.get("request"), dict):
                found.append((where, value["request"]))
            for v in value.values():
                walk(where, v)
        elif isinstance(value, list):
            for v in value:
                walk(where, v)

    for path in sorted(FIXTURES.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and isinstance(data.get("body"), str):
            try:
                data = json.loads(data["body"])
            except json.JSONDecodeError:
                continue
        walk(str(path.relative_to(FIXTURES)), data)
    return [(w, r) for w, r in found if isinstance(r.get("object"), dict)]


RECORDED = _recorded_reviews()


def test_a_message_beyond_the_apiservers_limit_is_the_rules_static_message(policy: Policy) -> None:
    containers = [_container(f"c{i}", {BATCH_CPU: "0.5"}) for i in range(32)]
    decision, outcome = check_agree(policy, _request(_pod(containers, labels=BE, priority=5000)))
    assert len(decision.message.encode()) > policies.MAX_MESSAGE_BYTES
    assert outcome.message == policies.FALLBACK["batch-units"]


def test_there_are_recorded_reviews() -> None:
    assert len(RECORDED) >= 20


@pytest.mark.parametrize(("where", "request_"), RECORDED, ids=[f"{w}:{i}" for i, (w, _) in enumerate(RECORDED)])
def test_policy_and_webhook_agree_on_every_recorded_review(policy: Policy, where: str,
                                                           request_: dict[str, Any]) -> None:
    if not policy.matches(request_):
        return
    check_agree(policy, request_)


# -- the property: generated pods ----------------------------------------------------------------------------------
NOTATIONS = ["0", "1", "100", "500", "1000", "2", "0.5", "1.5", "250m", "1500m", "1k", "2k", "1M", "1e3", "5E2",
             "1e-3", "128Mi", "1Gi", "1.5Gi", "1Ki", "0.1Ki", "512", "1000000", "3u", "7n", "1P"]
NEGATIVE = ["-1", "-500m"]


def _quantity(negative: bool) -> st.SearchStrategy[str]:
    return st.sampled_from(NOTATIONS + (NEGATIVE if negative else []))


def _values(names: list[str], negative: bool) -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(st.sampled_from(names), _quantity(negative), max_size=3)


RESOURCE_NAMES = [BATCH_CPU, BATCH_MEMORY, "cpu", "memory", RECLAIMED_CPU, RECLAIMED_MEMORY, "nvidia.com/gpu"]


@st.composite
def _resources(draw: st.DrawFn, negative: bool) -> dict[str, Any]:
    # Negative values only for batch names in containers: the apiserver refuses any negative request before
    # admission, and batch-units is what stands for that refusal in both chains.
    out: dict[str, Any] = {}
    for kind in ("requests", "limits"):
        if draw(st.booleans()):
            values = draw(_values(RESOURCE_NAMES, False))
            if negative and draw(st.booleans()):
                values[draw(st.sampled_from([BATCH_CPU, BATCH_MEMORY]))] = draw(st.sampled_from(NEGATIVE))
            out[kind] = values
    return out


@st.composite
def pods(draw: st.DrawFn, negative: bool = True) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "image": "busybox", "resources": draw(_resources(negative))}
                  for i in range(draw(st.integers(1, 3)))]
    init = []
    for i in range(draw(st.integers(0, 2))):
        c = {"name": f"i{i}", "image": "busybox", "resources": draw(_resources(negative))}
        if draw(st.booleans()):
            c["restartPolicy"] = "Always"  # a sidecar
        init.append(c)
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    qos = draw(st.sampled_from([None, "BE", "LS", "LSR", "LSE", "SYSTEM", "bogus"]))
    if qos is not None:
        if draw(st.integers(0, 4)) == 0:
            annotations["alibabacloud.com/qosClass"] = qos  # the legacy annotation
        else:
            labels[QOS] = qos
    klass = draw(st.sampled_from([None, None, "koord-prod", "koord-mid", "koord-batch", "koord-free", "other"]))
    if klass is not None:
        labels[PRIO_LABEL] = klass
    if draw(st.booleans()):
        labels[SUB] = draw(st.sampled_from(["1", "2", "100"]))
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = init
    priority = draw(st.sampled_from([None, 0, 3500, 5500, 7500, 9500, 2000000000]))
    if priority is not None:
        spec["priority"] = priority
    if draw(st.integers(0, 3)) == 0:
        spec["overhead"] = draw(_values(["cpu", "memory", BATCH_CPU], False))
    if draw(st.integers(0, 3)) == 0:  # pod-level resources (1.34+)
        spec["resources"] = draw(_resources(False))
    meta: dict[str, Any] = {"name": "p", "namespace": "colo-demo", "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@st.composite
def updates(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """(old, new): a stored pod and an update of its labels (a pod's resources do not change on UPDATE)."""
    old = draw(pods(negative=False))
    new = copy.deepcopy(old)
    labels = new["metadata"]["labels"]
    for key, values in ((QOS, ["BE", "LS", "LSR", None]), (PRIO_LABEL, ["koord-batch", "koord-prod", None]),
                        (SUB, ["1", "7", None]), ("team", ["a"])):
        if draw(st.integers(0, 2)) == 0:
            value = draw(st.sampled_from(values))
            if value is None:
                labels.pop(key, None)
            else:
                labels[key] = value
    return old, new


# cel-python interprets the policy slowly, an update whose old object has findings to compare more so
# (docs/benchmarks.md, "Figures behind the code's comments"): modest counts keep the file short.
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UPDATES = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(pod=pods())
def test_policy_and_webhook_agree_on_generated_pods(policy: Policy, pod: dict[str, Any]) -> None:
    check_agree(policy, _request(pod))


@UPDATES
@given(pair=updates())
def test_policy_and_webhook_agree_on_generated_updates(policy: Policy, pair: tuple[dict[str, Any], dict[str, Any]],
                                                        ) -> None:
    old, new = pair
    check_agree(policy, _request(new, "UPDATE", old))
