"""The rule contract and the review path: typed contexts, no rule leaning on another, no patch from a validating
chain, one review service behind every entry, and the one place ASGI middleware must go to see reviews."""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import load_fixture
from tests.serving import recording
from webhook.admission import chain
from webhook.admission.context import MutatingContext, MutatingFacts, Settings, ValidatingContext
from webhook.admission.domain.patch import PatchBuilder
from webhook.admission.response import Denial
from webhook.admission.review import AdmissionRequest, review_from_dict
from webhook.cluster.state import ClusterState
from webhook.server.app import create_server
from webhook.server.asgi import ASGIApp
from webhook.server.service import ReviewService

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "webhook" / "admission" / "rules"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


@pytest.mark.parametrize("rule", sorted(str(p.relative_to(RULES)) for p in RULES.glob("*/*.py") if p.name != "__init__.py"))
def test_no_rule_imports_another_rule(rule: str) -> None:
    leaning = {n for n in _imports(RULES / rule) if n.startswith("webhook.admission.rules")}
    assert leaning == set(), f"{rule} imports {leaning}: rules talk through ctx.facts, not through each other"


def _module(rule: object) -> str:
    """The name of a rule's module: a chain's rules are modules."""
    assert isinstance(rule, ModuleType), rule
    return rule.__name__


def test_every_rule_of_a_chain_is_in_the_chain_module_and_nowhere_else() -> None:
    declared = {r.NAME for r in chain.MUTATING} | {r.NAME for r in chain.VALIDATING}
    modules = {p.stem for p in RULES.glob("*/*.py") if p.name != "__init__.py"}
    assert {_module(r).rsplit(".", 1)[-1] for r in (*chain.MUTATING, *chain.VALIDATING)} == modules
    assert len(declared) == len(modules) == 9


@pytest.mark.parametrize("rule", sorted(str(p.relative_to(RULES).with_suffix("")) for p in RULES.glob("*/*.py")
                                         if p.name != "__init__.py"))
def test_every_rule_has_its_test_file_named_after_it(rule: str) -> None:
    """A rule's tests are found by its module's path: webhook/admission/rules/<kind>/<module>.py ->
    tests/admission/rules/<kind>/test_<module>.py."""
    kind, name = rule.split("/")
    tests = ROOT / "tests" / "admission" / "rules" / kind / f"test_{name}.py"
    assert tests.is_file(), f"no {tests.relative_to(ROOT)} for webhook/admission/rules/{rule}.py"


# A rule whose logic both programs need keeps it in the shared kernel under the rule's name (priority: the agent
# resolves PriorityClasses too).
SHARED_DOMAIN = ROOT / "webhook" / "core"


@pytest.mark.parametrize("rule", sorted(str(p.relative_to(RULES).with_suffix("")) for p in RULES.glob("*/*.py")
                                         if p.name != "__init__.py"))
def test_one_name_from_the_rule_to_its_domain_module_and_its_test(rule: str) -> None:
    """webhook/admission/rules/<kind>/<name>.py keeps its logic in webhook/admission/domain/<name>.py (or
    webhook/core/<name>.py) and imports it, its NAME is <name> in kebab-case, and its chain is its folder."""
    kind, name = rule.split("/")
    domain = [d / f"{name}.py" for d in (ROOT / "webhook" / "admission" / "domain", SHARED_DOMAIN)
              if (d / f"{name}.py").is_file()]
    assert len(domain) == 1, f"webhook/admission/rules/{rule}.py has no domain module of its name: {domain}"
    module = ".".join(domain[0].relative_to(ROOT).with_suffix("").parts)
    assert any(n == module or n.startswith(module + ".") for n in _imports(RULES / f"{rule}.py")), (
        f"webhook/admission/rules/{rule}.py does not import its domain module {module}")
    chains: dict[str, tuple[chain.MutatingRule | chain.ValidatingRule, ...]] = {
        "mutating": chain.MUTATING, "validating": chain.VALIDATING}
    (declared,) = [r for r in chains[kind] if _module(r).rsplit(".", 1)[-1] == name]
    assert name.replace("_", "-") == declared.NAME
    assert _module(declared) == f"webhook.admission.rules.{kind}.{name}"


def _pod_request(pod: dict[str, Any]) -> AdmissionRequest:
    review = load_fixture("admission/v1-validate-create-plain.json")
    review["request"]["object"] = pod
    return review_from_dict(review).request


class _RogueValidatingRule:
    """A validating rule that tries to write to the pod: the context it gets has no way to."""

    NAME = "rogue"

    @staticmethod
    def handles(request: AdmissionRequest) -> bool:
        return True

    @staticmethod
    def validate(ctx: ValidatingContext) -> Denial | None:
        ctx.patch.set(("metadata", "labels", "x"), "y")  # type: ignore[attr-defined]  # what the test shows fails
        return None


def test_a_validating_chain_cannot_produce_a_patch(example_state: ClusterState) -> None:
    pod = load_fixture("admission/v1-validate-create-plain.json")["request"]["object"]
    decision = chain.validate(_pod_request(pod), example_state, Settings(), rules=(_RogueValidatingRule(),))
    assert decision.patch == []
    assert decision.rule_failed and decision.rule == "rogue"
    request, patch = _pod_request(pod), PatchBuilder(pod)
    assert not hasattr(ValidatingContext(request, example_state, Settings(), pod, None), "patch")
    assert MutatingContext(request, example_state, Settings(), patch.doc, None, patch=patch).patch is patch


def test_the_type_checker_refuses_a_validating_rule_that_patches(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is not installed (it is in the test extras)")
    rule = tmp_path / "rogue_rule.py"
    rule.write_text(textwrap.dedent("""\
        from webhook.admission.context import ValidatingContext
        from webhook.admission.response import Denial

        def validate(ctx: ValidatingContext) -> Denial | None:
            ctx.patch.set(("metadata", "labels", "x"), "y")
            return None
        """))
    out, _, status = api.run(["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(rule)])
    assert status == 1
    assert '"ValidatingContext" has no attribute "patch"' in out


def test_mutating_facts_are_typed_fields() -> None:
    facts = MutatingFacts()
    assert (facts.priority, facts.matched_profiles, facts.skip_update_resources) == (None, [], False)
    assert (facts.profile_label_keys, facts.converted) == (frozenset(), set())


# -- one service, one place for middleware ------------------------------------------------------------
def _scope(path: str, body: bytes, method: str = "POST") -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": "https", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": [(b"content-type", b"application/json"),
                                         (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8443)}


def _call(app: ASGIApp, path: str, body: bytes = b"", method: str = "POST") -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    async def call() -> None:
        await app(_scope(path, body, method), receive, send)

    asyncio.run(call())
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_middleware_given_to_create_server_sees_review_requests(example_state: ClusterState) -> None:
    seen: list[str] = []
    server = create_server(example_state, middleware=[recording(seen)])
    body = json.dumps(load_fixture("admission/v1-mutate-create-plain.json")).encode()
    assert _call(server.asgi, "/mutate", body)[0] == 200
    assert _call(server.asgi, "/healthz", method="GET") == (200, b"ok")
    assert seen == ["POST /mutate", "GET /healthz"]


def test_every_entry_answers_through_the_one_review_service(example_state: ClusterState) -> None:
    """The dispatcher and a direct call give the same bytes for the same review; the FastAPI app has no review
    route (tests/server/test_asgi_entry.py)."""
    review = load_fixture("admission/v1-mutate-create-plain.json")
    review["request"]["object"]["spec"].pop("priority", None)
    body = json.dumps(review).encode()
    service = ReviewService(example_state)
    direct = service.answer("mutate", body)
    via_dispatcher = _call(create_server(example_state).asgi, "/mutate", body)
    assert direct.status == 200 and (direct.status, direct.body) == via_dispatcher
    ops = json.loads(base64.b64decode(json.loads(direct.body)["response"]["patch"]))
    assert {"op": "add", "path": "/spec/priority", "value": 0} in ops
