"""A real webhook server for tests: uvicorn over TLS on loopback, certificates from webhook.tls."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from webhook.admission import chain
from webhook.admission.app import create_server
from webhook.cluster.state import ClusterState
from webhook.tls.certs import CertPaths, ensure_localhost

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    certs: CertPaths
    state: ClusterState
    server: uvicorn.Server

    def client(self, **kw) -> httpx.Client:  # type: ignore[no-untyped-def]
        return httpx.Client(base_url=self.url, verify=ssl.create_default_context(cafile=str(self.certs.ca_cert)),
                            timeout=10, **kw)


@contextlib.contextmanager
def run_server(state: ClusterState, cert_dir: Path, settings: chain.Settings | None = None) -> Iterator[Server]:
    certs, _ = ensure_localhost(cert_dir)
    port = free_port()
    config = uvicorn.Config(create_server(state, settings).asgi, host="127.0.0.1", port=port, ssl_certfile=str(certs.cert),
                            ssl_keyfile=str(certs.key), log_config=None, access_log=False, lifespan="off")
    config.load()
    config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.02)
    try:
        yield Server(f"https://localhost:{port}", certs, state, server)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
