"""The webhook bounded under hostile load, over real TLS on loopback: the concurrency limits (429 with
Retry-After), slow clients dropped (TLS handshake, headers, body), oversized headers, the work caps (a 400
denial naming the limit), and large reviews answered in the worker thread exactly as small ones, with no process
forked."""

from __future__ import annotations

import base64
import contextlib
import gc
import json
import os
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_fixture
from tests.serving import Server, run_server, tls
from webhook.admission import chain
from webhook.admission.context import Settings
from webhook.admission.response import Decision
from webhook.admission.review import Endpoint, review_from_dict
from webhook.admission.rules.mutating import batch_resources
from webhook.cluster.state import ClusterState
from webhook.server.asgi import EdgePolicy
from webhook.server.service import ReviewService
from webhook.server.serving import ServeOptions

REVIEW = "admission/v1-mutate-create-koord-batch-init-containers.json"


def head(path: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def read_response(sock: ssl.SSLSocket) -> tuple[int, bytes]:
    """Status and everything the server sent until it closed or the body was complete."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    if not data:
        return 0, b""
    header, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in header.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(header.split(b" ", 2)[1]), body


def closed_within(sock: ssl.SSLSocket, seconds: float) -> float:
    """Seconds until the server closed ``sock`` (reading whatever it sent first); fails past ``seconds``."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for more than {seconds} s")
    return time.monotonic() - start


def big_review(extra_bytes: int) -> dict[str, Any]:
    review: dict[str, Any] = load_fixture(REVIEW)
    review["request"]["object"]["metadata"].setdefault("annotations", {})["padding"] = "x" * extra_bytes
    return review


@pytest.fixture()
def one_at_a_time(example_state: ClusterState, cert_dir: Path) -> Iterator[Server]:
    with run_server(example_state, cert_dir, policy=EdgePolicy(max_in_flight=2, max_large_in_flight=1)) as srv:
        yield srv


# -- the concurrency limits ----------------------------------------------------------------------------
def test_past_the_in_flight_limit_a_review_gets_429_with_retry_after(one_at_a_time: Server) -> None:
    body = json.dumps(load_fixture(REVIEW)).encode()
    held = [tls(one_at_a_time), tls(one_at_a_time)]
    for sock in held:  # two reviews whose bodies are still coming
        sock.sendall(head("/mutate", len(body)) + body[:100])
    time.sleep(0.3)
    with one_at_a_time.client() as c:
        r = c.post("/mutate", content=body)
        assert r.status_code == 429
        assert r.headers["retry-after"] == "1"
        assert "--max-in-flight" in r.json()["error"]
        assert c.get("/healthz").text == "ok"  # the limit is on reviews only
        for sock in held:
            sock.sendall(body[100:])
            assert read_response(sock)[0] == 200
            sock.close()
        assert c.post("/mutate", content=body).status_code == 200  # free again
    metrics = one_at_a_time.metrics()
    assert 'controller_runtime_webhook_requests_total{code="429",webhook="/mutate"} 1.0' in metrics
    assert 'controller_runtime_webhook_requests_in_flight{webhook="/mutate"} 0.0' in metrics


def test_past_the_large_limit_a_large_review_gets_429_and_a_small_one_is_answered(one_at_a_time: Server) -> None:
    large = json.dumps(big_review(100_000)).encode()
    small = json.dumps(load_fixture(REVIEW)).encode()
    held = tls(one_at_a_time)
    held.sendall(head("/validate", len(large)) + large[:1000])
    time.sleep(0.3)
    with one_at_a_time.client() as c:
        r = c.post("/validate", content=large)
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert "--max-large-in-flight" in r.json()["error"]
        assert c.post("/validate", content=small).status_code == 200
    held.sendall(large[1000:])
    assert read_response(held)[0] == 200
    held.close()


# -- slow clients ---------------------------------------------------------------------------------------
@pytest.fixture()
def impatient(example_state: ClusterState, cert_dir: Path) -> Iterator[Server]:
    with run_server(example_state, cert_dir, options=ServeOptions(read_header_timeout=0.5, read_timeout=1.0)) as srv:
        yield srv


def test_a_client_that_never_starts_tls_is_dropped(impatient: Server) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=5) as raw:
        start = time.monotonic()
        with contextlib.suppress(ConnectionResetError):
            assert raw.recv(1024) == b""
        assert time.monotonic() - start < 3


def test_a_connection_that_sends_nothing_is_dropped(impatient: Server) -> None:
    with tls(impatient) as sock:
        assert closed_within(sock, 3) >= 0.4


def test_slow_headers_get_408_and_the_connection_closes(impatient: Server) -> None:
    with tls(impatient) as sock:
        start = time.monotonic()
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")
        for _ in range(3):
            time.sleep(0.3)
            try:
                sock.sendall(b"X: y\r\n")  # a byte now and then keeps nothing alive
            except OSError:
                break
        status, _ = read_response(sock)
        assert status == 408
        assert time.monotonic() - start < 3
    assert 'colocation_webhook_read_timeouts_total{phase="headers"} 1.0' in impatient.metrics()


def test_a_slow_body_gets_408_and_the_connection_closes(impatient: Server) -> None:
    body = json.dumps(load_fixture(REVIEW)).encode()
    with tls(impatient) as sock:
        sock.sendall(head("/mutate", len(body)) + body[:50])
        start = time.monotonic()
        status, text = read_response(sock)
        assert status == 408 and b"did not arrive" in text
        assert 0.5 < time.monotonic() - start < 3
    metrics = impatient.metrics()
    assert 'colocation_webhook_read_timeouts_total{phase="body"} 1.0' in metrics
    assert 'controller_runtime_webhook_requests_in_flight{webhook="/mutate"} 0.0' in metrics


def test_a_kept_alive_connection_serves_reviews_in_time(impatient: Server) -> None:
    """The deadlines are per request: a connection that keeps sending whole requests stays."""
    with impatient.client() as c:
        for _ in range(4):
            assert c.post("/mutate", content=json.dumps(load_fixture(REVIEW))).status_code == 200
            time.sleep(0.3)


def test_headers_past_64_kib_get_431(server: Server) -> None:
    with tls(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
        for _ in range(6):
            sock.sendall(b"X-Filler: " + b"y" * 16_000 + b"\r\n")
        assert read_response(sock)[0] == 431


# -- the work caps --------------------------------------------------------------------------------------
def _with_containers(n: int) -> dict[str, Any]:
    review: dict[str, Any] = load_fixture(REVIEW)
    spec = review["request"]["object"]["spec"]
    spec["containers"] = [dict(spec["containers"][0], name=f"c{i}") for i in range(n - len(spec["initContainers"]))]
    return review


@pytest.mark.parametrize("run", [chain.mutate, chain.validate])
def test_more_containers_than_the_cap_is_a_400_denial(example_state: ClusterState,
                                                      run: Callable[..., Decision]) -> None:
    settings = Settings(max_containers=5)
    assert run(review_from_dict(_with_containers(5)).request, example_state, settings).allowed
    decision = run(review_from_dict(_with_containers(6)).request, example_state, settings)
    assert (decision.allowed, decision.code, decision.reason) == (False, 400, "BadRequest")
    assert decision.message == ("the pod has 6 containers (containers, initContainers and ephemeralContainers "
                                "together), more than the 5 this webhook reviews (its --max-containers)")


def test_a_patch_past_the_cap_is_a_400_denial(example_state: ClusterState) -> None:
    body = json.dumps(load_fixture(REVIEW)).encode()
    patched = json.loads(ReviewService(example_state).answer("mutate", body).body)["response"]
    assert patched["allowed"] and patched["patch"]
    answer = ReviewService(example_state, Settings(max_patch_bytes=100)).answer("mutate", body)
    response = json.loads(answer.body)["response"]
    assert answer.status == 200 and not response["allowed"] and "patch" not in response
    assert response["status"]["code"] == 400
    assert "more than the 100 this webhook sends (its --max-patch-bytes)" in response["status"]["message"]


def test_the_default_cap_refuses_the_issues_hostile_pod_over_https(server: Server) -> None:
    """26 000 containers in 3.1 MB: a clear 400 in the answer, quickly, instead of an 18 MB patch."""
    review = load_fixture(REVIEW)
    container = {"name": "c", "image": "b", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    review["request"]["object"]["spec"]["containers"] = [dict(container, name=f"c{i}") for i in range(26_000)]
    with server.client() as c:
        r = c.post("/mutate", content=json.dumps(review))
    response = r.json()["response"]
    assert r.status_code == 200 and not response["allowed"]
    assert response["status"]["code"] == 400 and "--max-containers" in response["status"]["message"]
    assert len(r.content) < 1000


# -- large reviews, answered in the worker thread -----------------------------------------------------------
@pytest.mark.parametrize("endpoint", ["mutate", "validate"])
def test_a_large_review_gets_the_same_answer_as_in_process(server: Server, example_state: ClusterState,
                                                           endpoint: Endpoint) -> None:
    body = json.dumps(big_review(200_000)).encode()
    expected = ReviewService(example_state).answer(endpoint, body)
    with server.client() as c:
        r = c.post(f"/{endpoint}", content=body)
    assert (r.status_code, r.content) == (expected.status, expected.body)
    metrics = server.metrics()
    outcome = "patched" if endpoint == "mutate" else "allowed"
    assert f'colocation_webhook_requests_total{{endpoint="{endpoint}",operation="CREATE",outcome="{outcome}"}} 1.0' \
        in metrics
    if endpoint == "mutate":
        ops = len(json.loads(base64.b64decode(r.json()["response"]["patch"])))
        assert ops and f'colocation_webhook_patch_operations_total{{rule="batch-resources"}} {float(ops)}' in metrics


def test_a_rule_that_raises_on_a_large_review_is_counted(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(ctx: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(batch_resources, "admit", explode)
    with server.client() as c:
        r = c.post("/mutate", content=json.dumps(big_review(100_000)))
    response = r.json()["response"]
    assert response["allowed"] and "patch" not in response
    assert any("rule batch-resources failed (ZeroDivisionError)" in w for w in response["warnings"])
    metrics = server.metrics()
    assert 'colocation_webhook_requests_total{endpoint="mutate",operation="CREATE",outcome="error"} 1.0' in metrics
    assert 'colocation_webhook_rule_errors_total{rule="batch-resources"} 1.0' in metrics


def test_a_large_review_forks_no_process(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server runs threads (the event loop's, the worker's, the state's watches): a process forked from it
    could inherit a lock another thread held, locked for good. Large reviews are answered without one."""
    forks: list[str] = []

    def no_fork() -> int:
        forks.append(threading.current_thread().name)
        raise OSError("os.fork called by the server")

    monkeypatch.setattr(os, "fork", no_fork)
    with server.client() as c:
        for endpoint in ("mutate", "validate"):
            assert c.post(f"/{endpoint}", content=json.dumps(big_review(200_000))).status_code == 200
    children = [c for t in Path(f"/proc/{os.getpid()}/task").iterdir() for c in (t / "children").read_text().split()]
    assert (forks, children) == ([], [])
    assert 'controller_runtime_webhook_requests_total{code="200",webhook="/validate"} 1.0' in server.metrics()


def test_a_large_review_leaves_the_process_settings_as_they_were(server: Server) -> None:
    """The collector is paused and the GIL switch interval shortened while a large review is evaluated: both are
    the whole process's, and are back once it is answered."""
    before = (gc.isenabled(), sys.getswitchinterval())
    with server.client() as c:
        assert c.post("/mutate", content=json.dumps(big_review(200_000))).status_code == 200
    assert (gc.isenabled(), sys.getswitchinterval()) == before
    assert before[0] and before[1] == pytest.approx(0.005)
