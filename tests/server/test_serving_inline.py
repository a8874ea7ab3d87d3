"""The serving edge's inline path (``GuardedProtocol`` answering a small review from the parser's callbacks),
over real TLS on loopback: the same answers and metrics as the ASGI path, HTTP/1.1 as a client expects it
(pipelining, ``Connection: close``, ``Expect: 100-continue``, chunked bodies, the keep-alive timeout), the
in-flight bound, clients that go away, a shutdown mid-body, and a middleware that must see reviews."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from uvicorn.server import ServerState

from tests.conftest import load_fixture
from tests.serving import Server, recording, run_server, tls
from webhook.cluster.state import ClusterState
from webhook.server.app import create_server
from webhook.server.asgi import EdgePolicy, ReviewDispatcher
from webhook.server.serving import GuardedProtocol, ServeOptions

REVIEW = "admission/v1-mutate-create-koord-batch-init-containers.json"
RECORDED_HTTP = "admission/v1-mutate-create-deployment-pod.http.json"  # the headers a kube-apiserver sent


def request(path: str, body: bytes, *extra: str, method: str = "POST") -> bytes:
    headers = "".join(f"{h}\r\n" for h in extra)
    length = "" if "Transfer-Encoding: chunked" in extra else f"Content-Length: {len(body)}\r\n"
    return (f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{length}{headers}"
            f"\r\n").encode() + body


class Responses:
    """HTTP/1.1 responses read one after another from a connection (pipelined ones arrive in one read)."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def next(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            assert self._fill(), f"the connection closed after {self.buffer!r}"
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            assert self._fill(), "the connection closed inside a body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split(" ", 2)[1]), headers, body

    def closed(self) -> bool:
        """Whether the server closed the connection (after what was read)."""
        try:
            return not self.buffer and not self._fill()
        except (ConnectionResetError, ssl.SSLError):
            return True


def review(uid: str, name: str = REVIEW) -> bytes:
    data = load_fixture(name)
    data["request"]["uid"] = uid
    return json.dumps(data).encode()


def metric(srv: Server, name: str, labels: str) -> float:
    match = re.search(rf"^{name}\{{{re.escape(labels)}\}} (\S+)$", srv.metrics(), re.M)
    return float(match.group(1)) if match else 0.0


@pytest.fixture()
def two_at_a_time(example_state: ClusterState, cert_dir: Path) -> Iterator[Server]:
    with run_server(example_state, cert_dir, policy=EdgePolicy(max_in_flight=2)) as srv:
        yield srv


# -- the same answers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_a_small_review_gets_the_answer_the_asgi_path_gives(server: Server, endpoint: str) -> None:
    """Content-Length (the inline path) and a chunked body (the ASGI path): the same status, body and headers."""
    http = load_fixture(RECORDED_HTTP)
    sent = [f"{k}: {v}" for k, v in http["headers"].items() if k.lower() not in ("host", "content-length")]
    body = review("same-answer")
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    with tls(server) as sock:
        sock.sendall(request(f"{endpoint}?timeout=5s", body, *sent)
                     + request(f"{endpoint}?timeout=5s", chunked, *sent, "Transfer-Encoding: chunked"))
        answers = Responses(sock)
        inline, asgi = answers.next(), answers.next()
    assert inline[0] == asgi[0] == 200
    assert inline[2] == asgi[2]
    assert json.loads(inline[2])["response"]["uid"] == "same-answer"
    assert inline[1].keys() == asgi[1].keys() == {"date", "content-type", "content-length"}
    assert inline[1]["content-type"] == "application/json"


def test_reviews_and_other_requests_pipelined_on_one_connection_are_answered_in_order(server: Server) -> None:
    with tls(server) as sock:
        sock.sendall(request("/mutate", review("first")) + request("/validate", review("second"))
                     + request("/healthz", b"", method="GET") + request("/mutate", review("fourth"))
                     + request("/readyz", b"", method="GET") + request("/validate", review("sixth")))
        answers = Responses(sock)
        got = [answers.next() for _ in range(6)]
    assert [status for status, _, _ in got] == [200] * 6
    uids = [json.loads(body)["response"]["uid"] if i not in (2, 4) else body.decode()
            for i, (_, _, body) in enumerate(got)]
    assert uids[:2] == ["first", "second"] and uids[3] == "fourth" and uids[5] == "sixth"
    assert uids[2] == "ok"


def test_connection_close_is_answered_then_closed(server: Server) -> None:
    with tls(server) as sock:
        sock.sendall(request("/mutate", review("closing"), "Connection: close"))
        answers = Responses(sock)
        status, headers, body = answers.next()
        assert status == 200 and json.loads(body)["response"]["uid"] == "closing"
        assert headers["connection"] == "close"
        assert answers.closed()


def test_http_1_0_gets_its_answer_and_the_connection_closes(server: Server) -> None:
    with tls(server) as sock:
        sock.sendall(request("/validate", review("old-client")).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
        answers = Responses(sock)
        status, headers, _ = answers.next()
        assert status == 200 and headers["connection"] == "close"
        assert answers.closed()


def test_expect_100_continue_gets_continue_then_the_answer(server: Server) -> None:
    body = review("continued")
    with tls(server) as sock:
        sock.sendall(request("/mutate", b"", "Expect: 100-continue").replace(b"Content-Length: 0",
                                                                              f"Content-Length: {len(body)}".encode()))
        answers = Responses(sock)
        assert answers.next()[0] == 100
        sock.sendall(body)
        status, _, answer = answers.next()
    assert status == 200 and json.loads(answer)["response"]["uid"] == "continued"


def test_a_kept_alive_connection_closes_after_the_keep_alive_timeout(example_state: ClusterState,
                                                                    cert_dir: Path) -> None:
    """uvicorn's keep-alive timeout holds after an inline answer too (kept as a deadline the tick checks)."""
    with run_server(example_state, cert_dir, keep_alive=0.5) as srv, tls(srv) as sock:
        answers = Responses(sock)
        for uid in ("one", "two", "three"):  # a connection in use stays
            time.sleep(0.3)
            sock.sendall(request("/mutate", review(uid)))
            assert answers.next()[0] == 200
        answered = time.monotonic()
        assert answers.closed()
        assert 0.4 < time.monotonic() - answered < 2


# -- the counts and the bound ------------------------------------------------------------------------
def test_inline_answers_are_counted_as_the_asgi_path_counts_them(server: Server) -> None:
    before = metric(server, "controller_runtime_webhook_requests_total", 'code="200",webhook="/mutate"')
    reviews = metric(server, "colocation_webhook_requests_total",
                     'endpoint="mutate",operation="CREATE",outcome="patched"')
    with tls(server) as sock:
        sock.sendall(b"".join(request("/mutate", review(f"n{i}")) for i in range(3)))
        answers = Responses(sock)
        assert [answers.next()[0] for _ in range(3)] == [200] * 3
    assert metric(server, "controller_runtime_webhook_requests_total",
                  'code="200",webhook="/mutate"') == before + 3
    assert metric(server, "colocation_webhook_requests_total",
                  'endpoint="mutate",operation="CREATE",outcome="patched"') == reviews + 3
    assert metric(server, "controller_runtime_webhook_requests_in_flight", 'webhook="/mutate"') == 0.0


def test_a_refused_review_is_answered_at_once_and_its_connection_stays_usable(two_at_a_time: Server) -> None:
    body = review("held")
    held = [tls(two_at_a_time), tls(two_at_a_time)]
    for sock in held:  # two reviews whose bodies are still coming: in flight
        sock.sendall(request("/mutate", body)[:-100])
    time.sleep(0.3)
    assert metric(two_at_a_time, "controller_runtime_webhook_requests_in_flight", 'webhook="/mutate"') == 2.0
    with tls(two_at_a_time) as sock:
        answers = Responses(sock)
        sock.sendall(request("/mutate", review("third"))[:-100])
        status, headers, text = answers.next()  # before its body is complete
        assert status == 429 and headers["retry-after"] == "1" and b"--max-in-flight" in text
        sock.sendall(review("third")[-100:])
        for h in held:
            h.sendall(body[-100:])
            assert Responses(h).next()[0] == 200
            h.close()
        sock.sendall(request("/validate", review("after")))  # the same connection, its dropped body behind it
        status, _, text = answers.next()
        assert status == 200 and json.loads(text)["response"]["uid"] == "after"
    assert metric(two_at_a_time, "controller_runtime_webhook_requests_total", 'code="429",webhook="/mutate"') == 1.0


def test_a_client_that_goes_away_mid_body_frees_its_place(two_at_a_time: Server) -> None:
    for _ in range(2):
        for sock in (tls(two_at_a_time), tls(two_at_a_time)):
            sock.sendall(request("/mutate", review("gone"))[:-100])
            time.sleep(0.1)
            sock.close()
    time.sleep(0.3)
    assert metric(two_at_a_time, "controller_runtime_webhook_requests_in_flight", 'webhook="/mutate"') == 0.0
    with two_at_a_time.client() as c:
        assert c.post("/mutate", content=review("next")).status_code == 200


def test_a_review_whose_body_is_coming_at_shutdown_is_answered_then_closed(example_state: ClusterState,
                                                                          cert_dir: Path) -> None:
    with run_server(example_state, cert_dir) as srv, tls(srv) as sock:
        body = request("/mutate", review("late"))
        sock.sendall(body[:-100])
        time.sleep(0.2)
        srv.server.should_exit = True  # uvicorn's graceful shutdown: listeners closed, connections asked to end
        time.sleep(0.5)
        sock.sendall(body[-100:])
        answers = Responses(sock)
        status, headers, text = answers.next()
        assert status == 200 and json.loads(text)["response"]["uid"] == "late"
        assert headers["connection"] == "close"
        assert answers.closed()


# -- what takes the ASGI path ------------------------------------------------------------------------
def test_a_middleware_around_the_dispatcher_sees_reviews_over_the_wire(example_state: ClusterState,
                                                                      cert_dir: Path) -> None:
    seen: list[str] = []
    with run_server(example_state, cert_dir, middleware=[recording(seen)]) as srv, srv.client() as c:
        assert c.post("/mutate", content=review("seen")).json()["response"]["uid"] == "seen"
        assert c.get("/healthz").text == "ok"
    assert seen == ["POST /mutate", "GET /healthz"]


def test_the_metrics_port_answers_no_reviews(server: Server) -> None:
    r = httpx.post(server.metrics_url.replace("/metrics", "/mutate"), content=review("wrong-port"), timeout=10)
    assert r.status_code == 404


# -- write back-pressure (a transport that reports its buffer full, as uvloop's does) -------------------
class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.reading = True

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8443), "peername": ("127.0.0.1", 40000)}.get(name, default)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def test_a_client_that_reads_no_answers_is_read_no_further_until_it_does(example_state: ClusterState) -> None:
    async def run() -> None:
        server = create_server(example_state)
        assert isinstance(server.asgi, ReviewDispatcher)
        protocol_class = GuardedProtocol.limits(ServeOptions(), server.service.metrics, server.lifecycle,
                                                server.asgi.entry)
        config = uvicorn.Config(server.asgi, http=protocol_class, log_config=None, lifespan="off")
        config.load()
        protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
        transport = _Transport()
        protocol.connection_made(transport)
        protocol.data_received(request("/validate", review("a")))
        assert len(transport.written) == 1 and transport.reading
        protocol.pause_writing()  # the transport's buffer is past its high-water mark
        protocol.data_received(request("/validate", review("b")))
        assert len(transport.written) == 2 and not transport.reading
        protocol.resume_writing()
        assert transport.reading
        protocol.connection_lost(None)

    asyncio.run(run())
