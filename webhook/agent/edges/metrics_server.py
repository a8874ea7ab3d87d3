"""The /metrics + /healthz server: the metrics as Prometheus text and the age of the last complete cycle, on one
port, in a thread (an edge: it listens on the network)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webhook.agent.metrics import AgentMetrics


class Health:
    """The age of the last complete cycle; unhealthy past ``3 × interval`` (or before a first cycle that late)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.started = clock()
        self.last_cycle: float | None = None

    def cycle_done(self) -> None:
        self.last_cycle = self.clock()

    def report(self) -> tuple[int, dict[str, Any]]:
        now = self.clock()
        limit = 3 * self.interval
        if self.last_cycle is None:
            waited = now - self.started
            ok = waited <= limit
            body: dict[str, Any] = {"status": "starting" if ok else "stuck",
                                    "lastCycleAgeSeconds": None, "limitSeconds": limit}
        else:
            age = now - self.last_cycle
            ok = age <= limit
            body = {"status": "ok" if ok else "stale", "lastCycleAgeSeconds": round(age, 3), "limitSeconds": limit}
        return (200 if ok else 503), body


def serve(port: int, metrics: AgentMetrics, health: Health, host: str = "") -> ThreadingHTTPServer:
    """``GET /metrics`` (Prometheus text) and ``GET /healthz`` (JSON, 503 when stale) on one port, in a thread."""
    registry = metrics.registry

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                status, body = health.report()
                self._send(status, json.dumps(body).encode() + b"\n", "application/json")
            else:
                self._send(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()
    return httpd
