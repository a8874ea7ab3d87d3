"""Every admission policy the project generates or ships type-checks as a 1.30 kube-apiserver checks a new policy
(``tests/cel_check.py``: the Kubernetes CEL environment declared as the apiserver declares it), and the checker
refuses what the apiserver refuses: a member call of a global (``quantity(x).sign()``, which a real apiserver refused
while every evaluation test passed), an unknown function, a type error, a misspelled variable, a message expression
that is not a string."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("cel_expr_python", reason="cel-expr-python is a test extra: pip install -e '.[test]'")

from tests import cel_check  # after the skip: it needs cel-expr-python
from tests import mutating as m
from webhook.policies import invariants as policies
from webhook.policies import profiles as profile_policies

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")
QOS = "koordinator.sh/qosClass"
SKIP = {"config.koordinator.sh/skip-update-resources": "true"}
ENABLED = {"koordinator.sh/enable-colocation": "true"}


# -- what the project generates and ships -----------------------------------------------------------------------------
def test_the_pod_invariants_policy_type_checks() -> None:
    assert cel_check.check_policy(policies.policy()) == []


# The profiles of tests/policies/test_profiles.py: a batch band, a mid band, skip-update-resources, a namespace
# selector, an object selector, no priority class, and profiles that combine.
EXAMPLE = m.profile("colocation-profile-example", namespaceSelector={"matchLabels": ENABLED},
                    selector={"matchLabels": ENABLED}, qosClass="BE", priorityClassName="koord-batch",
                    koordinatorPriority=1000, schedulerName="koord-scheduler", labels={"koordinator.sh/mutated": "true"})
SINGLE = [
    EXAMPLE,
    m.profile("ns-only", namespaceSelector={"matchLabels": {"team": "prod"}}, qosClass="BE",
              priorityClassName="koord-batch"),
    m.profile("by-label", selector={"matchExpressions": [{"key": "tier", "operator": "In", "values": ["batch"]}]},
              qosClass="BE", priorityClassName="koord-batch"),
    m.profile("keeps-cpu", meta_annotations=SKIP, selector={"matchLabels": {"app": "spark"}}, qosClass="BE",
              priorityClassName="koord-batch"),
    m.profile("qos-only", selector={"matchLabels": {"app": "cache"}}, qosClass="LS"),
    m.profile("mid", selector={"matchLabels": {"app": "etl"}}, priorityClassName="koord-mid"),
    m.profile("patched", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClassName="koord-batch",
              patch={"metadata": {"labels": {QOS: "LS"}}}),
    m.profile("expressions", namespaceSelector={"matchExpressions": [
        {"key": "team", "operator": "NotIn", "values": ["a", "b"]}, {"key": "env", "operator": "Exists"}]},
              selector={"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, qosClass="BE",
              priorityClassName="koord-batch"),
]
PROFILE_SETS: list[tuple[str, list[dict[str, Any]]]] = [
    *((p["metadata"]["name"], [p]) for p in SINGLE),
    ("all of them", SINGLE),
    ("a batch and a mid profile on the same pods",
     [m.profile("a-batch", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClassName="koord-batch"),
      m.profile("b-mid", selector={"matchLabels": {"app": "x"}}, qosClass="LS", priorityClassName="koord-mid")]),
    ("a later profile's labels write the QoS class",
     [m.profile("a", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClassName="koord-batch"),
      m.profile("b", selector={"matchLabels": {"app": "x"}}, labels={QOS: "LS"})]),
    ("another profile skips the conversion",
     [m.profile("a", selector={"matchLabels": {"app": "x"}}, qosClass="BE", priorityClassName="koord-batch"),
      m.profile("b", meta_annotations=SKIP, selector={"matchLabels": {"app": "x"}}, qosClass="BE")]),
]


def _rendered_policies(rendered: Any) -> list[dict[str, Any]]:
    """Every policy object a render holds, whatever field it is in (the profiles' own, the band policy)."""
    return [o for f in dataclasses.fields(rendered) for o in getattr(rendered, f.name) or []
            if isinstance(o, dict) and o.get("kind") in KINDS]


@pytest.mark.parametrize(("name", "profiles"), PROFILE_SETS, ids=[s[0] for s in PROFILE_SETS])
def test_the_profile_policies_type_check(name: str, profiles: list[dict[str, Any]]) -> None:
    state = m.make_state(*profiles)
    rendered = _rendered_policies(profile_policies.render(state.colocation_profiles(), state.priority_class))
    assert rendered, "no policy rendered: the case tests nothing"
    assert cel_check.check_policies(rendered) == []


def _manifest_files() -> list[Path]:
    return [f for f in sorted((ROOT / "manifests" / "components").glob("*/*.yaml"))
            if any(d and d.get("kind") in KINDS for d in yaml.safe_load_all(f.read_text()))]


def test_the_manifests_have_policies_to_check() -> None:
    names = {f.parent.name for f in _manifest_files()}
    assert {"admission-policies", "agent-node-policy"} <= names


@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_policy_type_checks(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert cel_check.check_policies(docs) == []


# -- what the checker refuses ----------------------------------------------------------------------------------------
def _policy(validations: list[dict[str, str]] | None = None, variables: list[dict[str, str]] | None = None,
            match: list[str] | None = None, param_kind: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                "resources": ["pods"]}]},
        "validations": validations or [{"expression": "true"}],
    }
    if variables:
        spec["variables"] = variables
    if match:
        spec["matchConditions"] = [{"name": f"m{i}", "expression": e} for i, e in enumerate(match)]
    if param_kind:
        spec["paramKind"] = {"apiVersion": "v1", "kind": "ConfigMap"}
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "probe"}, "spec": spec}


def _one_problem(policy: dict[str, Any]) -> str:
    problems = cel_check.check_policy(policy)
    assert len(problems) == 1, problems
    return problems[0]


NEGATIVE = [
    ("sign as a member (the defect a real apiserver caught)",
     _policy(variables=[{"name": "positive", "expression": "quantity(object.spec.x).sign() > 0"}]),
     "ValidatingAdmissionPolicy probe: spec.variables[0].expression: compilation failed: ERROR: <input>:1:29: "
     "undeclared reference to 'sign'"),
    ("an unknown function", _policy([{"expression": "frobnicate(object) == 1"}]),
     "ValidatingAdmissionPolicy probe: spec.validations[0].expression: compilation failed: ERROR: <input>:1:11: "
     "undeclared reference to 'frobnicate'"),
    ("a type error", _policy([{"expression": "'a' + 1 == 'a1'"}]),
     "spec.validations[0].expression: compilation failed: ERROR: <input>:1:5: found no matching overload for '_+_' "
     "applied to '(string, int)'"),
    ("a misspelled variable",
     _policy([{"expression": "variables.nope"}], variables=[{"name": "ok", "expression": "true"}]),
     "spec.validations[0].expression: compilation failed: ERROR: <input>:1:10: undeclared reference to "
     "'variables.nope'"),
    ("a message expression that is not a string",
     _policy([{"expression": "true", "messageExpression": "size(object.metadata.name)"}]),
     "spec.validations[0].messageExpression: must evaluate to string but got int"),
    ("a validation of type dyn (compile.go wants exactly bool)", _policy([{"expression": "object.spec.enabled"}]),
     "spec.validations[0].expression: must evaluate to bool but got dyn"),
    ("a quantity method called as a global", _policy([{"expression": "isInteger(quantity('1'))"}]),
     "undeclared reference to 'isInteger'"),
    ("a field AdmissionRequest does not have", _policy([{"expression": "request.user == 'x'"}]),
     "undefined field 'user' not found in struct 'kubernetes.AdmissionRequest'"),
    ("a namespaceObject field of the wrong type", _policy([{"expression": "namespaceObject.metadata.labels == 1"}]),
     "found no matching overload for '_==_' applied to '(map(string, string), int)'"),
    ("params without a paramKind", _policy([{"expression": "params.x == 1"}]), "undeclared reference to 'params.x'"),
    ("variables in a matchCondition (the stateless compiler has none)",
     _policy(variables=[{"name": "ok", "expression": "true"}], match=["variables.ok"]),
     "spec.matchConditions[0].expression: compilation failed: ERROR: <input>:1:10: undeclared reference to "
     "'variables.ok'"),
    ("the authorizer in a messageExpression",
     _policy([{"expression": "true", "messageExpression": "authorizer.path('/').check('get').reason()"}]),
     "spec.validations[0].messageExpression: compilation failed: ERROR: <input>:1:1: undeclared reference to "
     "'authorizer'"),
    ("a later variable sees an earlier one's type",
     _policy(variables=[{"name": "n", "expression": "size(object.spec.containers)"},
                        {"name": "s", "expression": "variables.n + 'x'"}]),
     "spec.variables[1].expression: compilation failed: ERROR: <input>:1:13: found no matching overload for '_+_' "
     "applied to '(int, string)'"),
    ("a library a 1.30 apiserver does not have for new expressions (ip: 1.31)",
     _policy([{"expression": "ip('10.0.0.1').family() == 4"}]), "undeclared reference to 'ip'"),
    ("a mixed list literal (ValidateHomogeneousAggregateLiterals)", _policy([{"expression": "size([1, 'a']) == 2"}]),
     "ERROR: <input>:1:10: expected type 'int' but found 'string'"),
    ("an invalid duration literal", _policy([{"expression": "duration('1x') > duration('0s')"}]),
     "invalid duration argument: '1x'"),
]


@pytest.mark.parametrize(("name", "policy", "expected"), NEGATIVE, ids=[n[0] for n in NEGATIVE])
def test_the_checker_refuses_what_the_apiserver_refuses(name: str, policy: dict[str, Any], expected: str) -> None:
    assert expected in _one_problem(policy)


@pytest.mark.parametrize("expression", [
    "sign(quantity(object.spec.x)) > 0",
    "quantity('1').isInteger() && quantity('1').add(2).isGreaterThan(quantity('2')) "
    "&& quantity('1').sub(quantity('1m')).compareTo(quantity('0')) > 0 && quantity('1').asInteger() == 1 "
    "&& quantity('1').asApproximateFloat() == 1.0 && quantity('1').isLessThan(quantity('2')) && isQuantity('1')",
    "[1, 2].indexOf(2) == 1 && [1, 2].lastIndexOf(2) == 1 && [1, 2].isSorted() && [1, 2].sum() == 3 "
    "&& [1, 2].max() == 2 && ['a'].min() == 'a'",
    "'a,b'.split(',').join('-') == 'a-b' && 'abc'.indexOf('b') == 1 && 'ABC'.lowerAscii() == 'abc' "
    "&& ' a '.trim() == 'a' && 'abc'.substring(1) == 'bc' && 'a'.replace('a', 'b') == 'b' "
    "&& '%s/%d'.format(['a', 1]) == 'a/1' && strings.quote('a') != ''",
    "'abc'.find('b') == 'b' && 'abc'.findAll('[a-c]').size() == 3",
    "url('https://x/y').getHost() == 'x' && isURL('https://x') && url('https://x/?a=b').getQuery()['a'][0] == 'b'",
    "sets.contains([1, 2], [1]) && sets.intersects(['a'], ['a']) && sets.equivalent([1], [1])",
    "authorizer.group('apps').resource('deployments').namespace('ns').check('get').allowed() "
    "&& authorizer.requestResource.check('create').allowed() && !authorizer.path('/healthz').check('get').errored()",
    "request.userInfo.username.startsWith('system:') && request.userInfo.groups.exists(g, g == 'x') "
    "&& has(request.userInfo.extra) && request.operation == 'CREATE' && !request.dryRun "
    "&& request.kind.kind == 'Pod' && request.resource.resource == 'pods'",
    "namespaceObject.metadata.labels['a'] == 'b' && namespaceObject.status.phase == 'Active' "
    "&& namespaceObject.metadata.creationTimestamp < timestamp('2030-01-01T00:00:00Z')",
    "1 < 2.0 && 2u > 1 && 1.5 >= 1",  # CrossTypeNumericComparisons (1.28)
    "object.?spec.?priority.orValue(0) >= 0 && optional.of(1).optFlatMap(x, optional.of(x)).hasValue()",
    "[dyn(1), dyn('a')].size() == 2 && {'a': dyn(1), 'b': dyn('c')}.size() == 2",
])
def test_the_checker_accepts_what_the_apiserver_accepts(expression: str) -> None:
    assert cel_check.check_policy(_policy([{"expression": expression}])) == []


def test_variables_are_typed_in_order_and_a_failed_one_is_dyn() -> None:
    policy = _policy([{"expression": "variables.names.exists(n, n == 'x') && variables.bad == 1",
                       "messageExpression": "variables.names.join(', ')"}],
                     variables=[{"name": "names", "expression": "object.spec.containers.map(c, string(c.name))"},
                                {"name": "bad", "expression": "nope()"}])
    assert [p.split(": compilation failed")[0] for p in cel_check.check_policy(policy)] == [
        "ValidatingAdmissionPolicy probe: spec.variables[1].expression"]  # one problem: no cascade from `bad`


def test_params_are_declared_with_a_param_kind() -> None:
    assert cel_check.check_policy(_policy([{"expression": "params.data.x == 'y'",
                                            "messageExpression": "'p: ' + string(params.data.x)"}],
                                          match=["has(params.data)"], param_kind=True)) == []


def test_what_the_checker_does_and_does_not_enforce_beyond_the_type_checker() -> None:
    """The module docstring's list: homogeneous literals and duration/timestamp literals are enforced by this module's
    own pass over the checked AST; regex literals are not (the apiserver refuses an invalid one at write time)."""
    def problems(expression: str) -> list[str]:
        return cel_check.check_policy(_policy([{"expression": expression}]))

    assert problems("[object.a, 'b'].size() > 0")  # a dyn element beside a string
    assert problems("{'a': 1, 'b': 'c'}.size() > 0")
    assert problems("[[1], ['a']].size() > 0")
    assert problems("timestamp('2020-13-01T00:00:00Z') > timestamp('2020-01-01T00:00:00Z')")
    assert problems("'%s'.format([[1, 'a']]) != ''") == []  # inside format: exempt, as upstream
    assert problems("[?optional.of(1), 2].size() == 2") == []
    # Not caught here, refused by the apiserver: an invalid RE2 literal.
    assert problems("'a'.matches('[')") == []
    # has() of a variable: cel-cpp mistypes it, so it is refused with a note (upstream accepts it).
    note = cel_check.check_policy(_policy([{"expression": "has(variables.a)"}],
                                          variables=[{"name": "a", "expression": "true"}]))
    assert len(note) == 1 and "has(variables.a) is not checked here" in note[0]


def test_the_evaluator_refuses_a_policy_that_does_not_type_check() -> None:
    """tests/admission_policy.py compiles what it evaluates through the checker first: no evaluation test can pass
    on a policy the apiserver would not store."""
    pytest.importorskip("celpy", reason="cel-python is a test extra")
    from tests.admission_policy import Policy

    bad = _policy(variables=[{"name": "positive", "expression": "quantity('1').sign() > 0"}])
    with pytest.raises(cel_check.PolicyTypeError, match=r"spec\.variables\[0\]\.expression: .*'sign'"):
        Policy(bad)
    Policy(_policy(variables=[{"name": "positive", "expression": "sign(quantity('1')) > 0"}]))
