"""One way into the edge for a review (``ReviewEntry``, webhook/server/asgi.py): every review the server answers,
whichever way its bytes come, is let in and counted through it, over real TLS on loopback; the FastAPI app has no
route that could answer one; and in the source, only the entry calls the gate and only the gate counts."""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from tests.server.test_serving_inline import Responses, metric, request, review
from tests.server.test_serving_limits import big_review
from tests.serving import Server, tls
from webhook.admission.review import REVIEW_PATHS
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.server.app import create_app

WEBHOOK = Path(__file__).resolve().parents[2] / "webhook"
ANSWERED = "controller_runtime_webhook_requests_total"


def _uid(answer: tuple[int, dict[str, str], bytes]) -> str:
    status, _, body = answer
    assert status == 200, (status, body[:300])
    uid = json.loads(body)["response"]["uid"]
    assert isinstance(uid, str)
    return uid


def test_every_review_the_server_answers_is_counted_by_the_one_entry(server: Server) -> None:
    """Inline, large (the offload), chunked, ``Expect: 100-continue`` and pipelined behind a request still being
    answered: five ways for the bytes, one count. A way that answered a review past the entry (the gate, which
    alone counts) would answer it uncounted, or not at all."""
    before = metric(server, ANSWERED, 'code="200",webhook="/mutate"')
    big = big_review(100_000)
    big["request"]["uid"] = "large"
    large = json.dumps(big).encode()
    assert len(large) > 64 * 1024  # over the gate's large_body_bytes: through the offload
    chunked_body = review("chunked")
    chunked = f"{len(chunked_body):x}\r\n".encode() + chunked_body + b"\r\n0\r\n\r\n"
    continued = review("continued")
    with tls(server) as sock:
        answers = Responses(sock)
        sock.sendall(request("/mutate", review("inline")))
        got = [_uid(answers.next())]
        sock.sendall(request("/mutate", large))
        got.append(_uid(answers.next()))
        sock.sendall(request("/mutate", chunked, "Transfer-Encoding: chunked"))
        got.append(_uid(answers.next()))
        sock.sendall(request("/mutate", b"", "Expect: 100-continue").replace(
            b"Content-Length: 0", f"Content-Length: {len(continued)}".encode()))
        assert answers.next()[0] == 100
        sock.sendall(continued)
        got.append(_uid(answers.next()))
        # behind a GET the FastAPI app answers from a task: the review comes while it is still being answered
        sock.sendall(request("/healthz", b"", method="GET") + request("/mutate", review("pipelined")))
        assert answers.next()[2] == b"ok"
        got.append(_uid(answers.next()))
    assert got == ["inline", "large", "chunked", "continued", "pipelined"]
    assert metric(server, ANSWERED, 'code="200",webhook="/mutate"') == before + 5
    assert metric(server, "controller_runtime_webhook_requests_in_flight", 'webhook="/mutate"') == 0.0


def test_another_method_on_a_review_path_is_the_entrys_405(server: Server) -> None:
    """The FastAPI app alone answers 404 there (below), so a 405 naming POST is the entry's; it is no review, and
    not counted as one."""
    before = metric(server, ANSWERED, 'code="405",webhook="/validate"')
    with server.client() as c:
        for method in ("GET", "PUT", "DELETE"):
            r = c.request(method, "/validate", content=b"{}")
            assert (r.status_code, r.headers["allow"], r.json()) == (
                405, "POST", {"error": "Method Not Allowed", "code": 405}), method
        head = c.head("/mutate")
        assert (head.status_code, head.headers["allow"], head.content) == (405, "POST", b"")
        assert c.post("/validate", content=review("after")).json()["response"]["uid"] == "after"
    assert metric(server, ANSWERED, 'code="405",webhook="/validate"') == before == 0.0


def test_the_fastapi_app_has_no_route_that_answers_a_review() -> None:
    """Its schema describes the reviews (from the Structs that decode them), its routes hold none: served alone, or
    mounted under a prefix, it answers 404 on the review paths."""
    app = create_app(ClusterState(WEBHOOK_KINDS), openapi=True)
    assert [getattr(r, "path", "") for r in app.routes if getattr(r, "path", "") in REVIEW_PATHS] == []
    outer = FastAPI()
    outer.mount("/hooks", app)
    body = review("nobody")

    async def served() -> dict[str, Any]:
        async with (httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="https://localhost") as alone,
                    httpx.AsyncClient(transport=httpx.ASGITransport(app=outer), base_url="https://localhost") as mounted):
            for path in REVIEW_PATHS:
                assert (await alone.post(path, content=body)).status_code == 404
                assert (await alone.get(path)).status_code == 404
                assert (await mounted.post(f"/hooks{path}", content=body)).status_code == 404
            assert (await alone.get("/healthz")).text == "ok"
            assert (await mounted.get("/hooks/healthz")).text == "ok"
            schema: dict[str, Any] = (await alone.get("/openapi.json")).json()
            return schema

    schema = asyncio.run(served())
    for path in REVIEW_PATHS:
        operation = schema["paths"][path]["post"]
        assert operation["requestBody"] == {
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AdmissionReview"}}},
            "required": True}
        assert {"200", "400", "413"} <= operation["responses"].keys()
    assert {"AdmissionReview", "AdmissionRequest"} <= schema["components"]["schemas"].keys()


def _calls(test: Callable[[ast.Call], bool]) -> set[tuple[str, str]]:
    """(module, innermost class) of every call in webhook/ that ``test(call)`` picks."""
    found = set()
    for path in sorted(WEBHOOK.rglob("*.py")):
        tree = ast.parse(path.read_text())
        owner = {child: node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                 for child in ast.walk(node)}  # innermost class last, so it wins
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and test(node):
                found.add((path.relative_to(WEBHOOK).as_posix(), owner.get(node, "<no class>")))
    return found


def test_only_the_entry_calls_the_gate_and_only_the_gate_counts() -> None:
    """One way in, in the source: the gate's methods are called from ``ReviewEntry`` alone, and the HTTP edge's
    metrics (in flight, answered, latency) are updated by ``ReviewGate`` alone, so no path admits, answers or
    counts a review its own way."""
    gate_api = {"admit", "answer_received", "inline_size"}

    def on_the_gate(call: ast.Call) -> bool:
        func = call.func
        if not isinstance(func, ast.Attribute):
            return False
        receiver = func.value
        name = (receiver.id if isinstance(receiver, ast.Name)
                else receiver.attr if isinstance(receiver, ast.Attribute) else "")
        return name == "gate" or func.attr in gate_api

    def counting(call: ast.Call) -> bool:
        return isinstance(call.func, ast.Attribute) and call.func.attr in ("entered", "left", "http_answered")

    assert _calls(on_the_gate) == {("server/asgi.py", "ReviewEntry")}
    assert _calls(counting) == {("server/asgi.py", "ReviewGate")}
