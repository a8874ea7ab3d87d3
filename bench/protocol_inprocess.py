#!/usr/bin/env python3
"""In-process cost of one review through each server's HTTP protocol: uvicorn's httptools protocol with the bare
FastAPI echo, beside ``serve``'s protocol (webhook.server.serving) with our app.

Each request is the raw HTTP/1.1 bytes of a POST on a kept-alive connection, handed to the protocol as the event
loop would (``data_received``), and the loop runs until the answer is written. No TLS and no sockets: the
figures are the servers' own cost above the kernel and OpenSSL, which bench/webhook_load.py adds back.

Then the edge alone, the review service's answer stubbed to a constant: ``serve``'s protocol (uvicorn's callbacks,
the deadlines, the review gate and its metrics, the one write) beside ``BareProtocol``, the floor a protocol written
on httptools' public callbacks could reach (docs/architecture.md, "Why the edge is uvicorn's protocol, pinned").

    PYTHONPATH=. python bench/protocol_inprocess.py [--review FILE] [--rounds 3000]
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httptools  # noqa: E402
import orjson  # noqa: E402
import uvicorn  # noqa: E402
import uvloop  # noqa: E402
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: E402
from uvicorn.server import ServerState  # noqa: E402

from bench.asgi_inprocess import best_per_call, review_and_state  # noqa: E402
from bench.echo_app import app as echo  # noqa: E402
from harness.transport import Transport  # noqa: E402
from webhook.admission.review import Endpoint  # noqa: E402
from webhook.server.app import create_server  # noqa: E402
from webhook.server.asgi import ReviewDispatcher  # noqa: E402
from webhook.server.service import Answer  # noqa: E402
from webhook.server.serving import GuardedProtocol, ServeOptions  # noqa: E402


def request(path: str, body: bytes) -> bytes:
    return (f"POST {path}?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, */*\r\nUser-Agent: kube-apiserver-admission\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class BareProtocol(asyncio.Protocol):
    """Parses a request with httptools and writes a fixed answer, and nothing else: no keep-alive or its timeout,
    no deadlines or limits, no flow control, no pipelining, no 100-continue, no error answers, no metrics, no
    ASGI. What a hand-written protocol could cost at the very least."""

    def __init__(self, answer: bytes) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.answer = answer
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.url, self.headers, self.chunks = b"", [], []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        b"".join(self.chunks)
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(self.answer), self.answer))


async def measure(protocol_class: type[HttpToolsProtocol] | Callable[[], asyncio.Protocol], app: Any, path: str,
                  body: bytes, rounds: int) -> tuple[float, bytes]:
    if isinstance(protocol_class, type) and issubclass(protocol_class, HttpToolsProtocol):
        config = uvicorn.Config(app, http=protocol_class, log_config=None, access_log=False, lifespan="off",
                                server_header=False)
        config.load()
        protocol: asyncio.Protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
    else:
        made = protocol_class()
        assert isinstance(made, asyncio.Protocol)
        protocol = made
    transport = Transport()
    protocol.connection_made(transport)
    data = request(path, body)

    async def one() -> None:
        if len(transport.written) > 1000:
            del transport.written[:-1]
        before = len(transport.written)
        protocol.data_received(data)
        while not transport.written[before:] or not transport.written[-1].endswith(b"}"):
            await asyncio.sleep(0)  # the ASGI path answers from a task: let it run

    us = await best_per_call(one, rounds)
    return us, transport.written[-1]


def main() -> int:
    args, body, state = review_and_state(__doc__)
    server = create_server(state)
    assert isinstance(server.asgi, ReviewDispatcher)
    ours = GuardedProtocol.limits(ServeOptions(), server.service.metrics, server.lifecycle, server.asgi.entry)
    print(f"review: {args.review.name} ({len(body)} bytes); µs of CPU per request through the HTTP protocol, "
          "best of 5 batches")
    for path in ("/mutate", "/validate"):
        for name, cls, app in (("echo", HttpToolsProtocol, echo), ("webhook", ours, server.asgi)):
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:  # the loop both servers run on
                us, last = runner.run(measure(cls, app, path, body, args.rounds))
            print(f"  {name:<8}{path:<10}{us:8.1f} µs   (last write {len(last)} bytes)")
    review = orjson.loads(body)  # the echo's answer
    stubbed = Answer(200, orjson.dumps({"apiVersion": review["apiVersion"], "kind": "AdmissionReview",
                                        "response": {"uid": review["request"]["uid"], "allowed": True}}))
    def stubbed_answer(endpoint: Endpoint, body: bytes, explain: list[str] | None = None) -> Answer:
        return stubbed

    server.service.answer = stubbed_answer  # type: ignore[method-assign]  # the edge alone
    print("the edge alone, the review service's answer stubbed to a constant:")
    for name, make in (("serve", ours), ("bare", lambda: BareProtocol(stubbed.body))):
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            us, last = runner.run(measure(make, server.asgi, "/mutate", body, args.rounds))
        print(f"  {name:<8}{'/mutate':<10}{us:8.1f} µs   (last write {len(last)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
