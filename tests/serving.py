"""A real webhook server for tests: what ``serve`` runs (``AdmissionServer``: uvicorn with the read limits, TLS by
the serving policy, the metrics port), on loopback, certificates from webhook.tls."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from webhook.admission import chain
from webhook.cluster.state import ClusterState
from webhook.server.app import create_server
from webhook.server.asgi import ASGIApp, EdgePolicy, Middleware, Receive, Scope, Send
from webhook.server.serving import AdmissionServer, ServeOptions
from webhook.tls.certs import CertPaths, ensure_localhost

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    url: str
    certs: CertPaths
    state: ClusterState
    server: AdmissionServer
    metrics_url: str

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def client(self, **kw: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=ssl.create_default_context(cafile=str(self.certs.ca_cert)),
                            timeout=10, **kw)

    def metrics(self) -> str:
        return httpx.get(self.metrics_url, timeout=10).text


def recording(seen: list[str]) -> Middleware:
    """An ASGI middleware that notes each request it sees ("METHOD /path") in ``seen``."""
    def wrap(app: ASGIApp) -> ASGIApp:
        async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
            seen.append(f"{scope.get('method', '')} {scope['path']}")
            await app(scope, receive, send)
        return wrapped
    return wrap


def tls(srv: Server, timeout: float = 10) -> ssl.SSLSocket:
    """A raw TLS connection to ``srv``, for requests no HTTP client would send."""
    ctx = ssl.create_default_context(cafile=str(srv.certs.ca_cert))
    sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", srv.port), timeout=timeout),
                           server_hostname="localhost")
    sock.settimeout(timeout)
    return sock


@contextlib.contextmanager
def run_server(state: ClusterState, cert_dir: Path, settings: chain.Settings | None = None,
               policy: EdgePolicy | None = None, options: ServeOptions | None = None,
               client_ca: Path | None = None, openapi: bool = False, middleware: Sequence[Middleware] = (),
               keep_alive: float | None = None) -> Iterator[Server]:
    certs, _ = ensure_localhost(cert_dir)
    options = dataclasses.replace(options or ServeOptions(), host="127.0.0.1", port=free_port(),
                                  metrics_port=free_port())
    server = AdmissionServer(create_server(state, settings, policy=policy, openapi=openapi, middleware=middleware),
                             options, certs.cert, certs.key, client_ca, watch_certs=False)
    if keep_alive is not None:  # uvicorn's --timeout-keep-alive (5 s), which each connection reads as it opens
        server.config.timeout_keep_alive = keep_alive  # type: ignore[assignment]  # uvicorn's hint is int; it waits a float as well
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not (server.started and server.metrics_listener is not None):
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield Server(f"https://localhost:{options.port}", certs, state, server,
                     f"http://127.0.0.1:{options.metrics_port}/metrics")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
