"""A local HTTP server that replays recorded kube-apiserver exchanges (tests/fixtures/api).

Tests point the official kubernetes client at it, so the live source and the agent's API calls
are exercised against real recorded responses, not mocks of our own code.

Routes are matched by method, path and (optionally) a subset of the query; a route added with
``times=N`` is used N times and then falls through to the next match, which lets a test script a
sequence (a watch that answers 410, then a relist, then a watch that stays open). A route with
``respond`` answers from a function of the request, for tests that need the apiserver's reaction to
what the client sent (a create, then a get of the same object); its answers use recorded shapes.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

API_FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "api"


def load_exchange(name: str) -> dict[str, Any]:
    path = API_FIXTURES / (name if name.endswith(".json") else name + ".json")
    exchange: dict[str, Any] = json.loads(path.read_text())
    return exchange


@dataclass
class Route:
    method: str
    path: str
    status: int
    body: Any = None                      # a JSON body, or None with body_lines for a watch
    body_lines: list[Any] | None = None
    line_delays: list[float] = field(default_factory=list)
    close_after: float = 0.0
    hold_open: bool = False               # a watch that stays open until its timeoutSeconds (or the server stops)
    query: dict[str, str] | None = None   # subset that must match; None = any
    times: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    watch: bool | None = None             # answer watch requests (True) or not; None = watch iff body_lines
    respond: Callable[[Received], tuple[int, Any]] | None = None  # (status, JSON body) from the request
    reset: bool = False                   # a watch whose connection is reset after its lines (no end of stream),
                                          # ``close_after`` seconds after the start (a middlebox's idle timeout)

    def matches(self, method: str, path: str, query: dict[str, str]) -> bool:
        if method != self.method or path != self.path:
            return False
        if self.times is not None and self.times <= 0:
            return False
        is_watch = query.get("watch", "").lower() in ("true", "1")
        if is_watch != (self.body_lines is not None if self.watch is None else self.watch):
            return False
        if self.query:
            return all(query.get(k) == v for k, v in self.query.items())
        return True


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    at: float = 0.0                       # time.monotonic() when the request line was read


class ReplayAPIServer:
    def __init__(self, speed: float = 1.0, port: int = 0, tls: tuple[Path, Path] | None = None) -> None:
        self.port = port  # 0 = any free port; a fixed one lets a test start the API after its client
        self.tls = tls    # (certificate, key): serve HTTPS, as an apiserver does
        self.routes: list[Route] = []
        self.received: list[Received] = []
        self.speed = speed  # >1 replays recorded delays faster
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    # -- routes ---------------------------------------------------------------------------
    def add(self, route: Route) -> Route:
        with self._lock:
            self.routes.append(route)
        return route

    def add_exchange(self, name: str, *, query: dict[str, str] | None = None, times: int | None = None,
                     hold_open: bool = False, path: str | None = None) -> Route:
        """Serve a recorded exchange at its recorded method and path."""
        ex = load_exchange(name)
        req, resp = ex["request"], ex["response"]
        route = Route(
            method=req["method"], path=path or req["path"], status=resp["status"],
            body=resp.get("body"), body_lines=resp.get("body_lines"),
            line_delays=list(resp.get("line_arrival_seconds") or []),
            close_after=float(resp.get("stream_closed_after_seconds") or 0.0),
            hold_open=hold_open, query=query, times=times,
        )
        return self.add(route)

    def add_json(self, method: str, path: str, body: Any, status: int = 200, **kw: Any) -> Route:
        return self.add(Route(method=method, path=path, status=status, body=body, **kw))

    def add_handler(self, method: str, path: str, respond: Callable[[Received], tuple[int, Any]],
                    **kw: Any) -> Route:
        return self.add(Route(method=method, path=path, status=0, respond=respond, **kw))

    def add_watch(self, path: str, events: list[Any], hold_open: bool = True, **kw: Any) -> Route:
        return self.add(Route(method="GET", path=path, status=200, body_lines=events,
                              line_delays=[0.0] * len(events), hold_open=hold_open, **kw))

    def requests_to(self, method: str, path: str) -> list[Received]:
        return [r for r in self.received if r.method == method and r.path == path]

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)  # an AF_INET server: its host is text
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    def start(self) -> ReplayAPIServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle on, the body waits for the client's delayed
            # ACK (40 ms per response on Linux), which no real API server makes its clients wait.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                at = time.monotonic()
                parts = urlsplit(self.path)
                query = dict(parse_qsl(parts.query))
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                with outer._lock:
                    received = Received(self.command, parts.path, query, dict(self.headers), body, at)
                    outer.received.append(received)
                    route = next((r for r in outer.routes if r.matches(self.command, parts.path, query)), None)
                    if route is not None and route.times is not None:
                        route.times -= 1
                if route is None:
                    self._json(404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                     "message": f"no recorded response for {self.command} {self.path}",
                                     "reason": "NotFound", "code": 404})
                elif route.respond is not None:
                    status, answer = route.respond(received)
                    self._json(status, answer, route.headers)
                elif route.body_lines is None:
                    self._json(route.status, route.body, route.headers)
                else:
                    self._stream(route, query)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

            def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self, route: Route, query: dict[str, str]) -> None:
                self.send_response(route.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")   # it closes the connection after the stream
                self.end_headers()
                start = time.monotonic()
                try:
                    for i, line in enumerate(route.body_lines or []):
                        due = (route.line_delays[i] if i < len(route.line_delays) else 0.0) / outer.speed
                        wait = start + due - time.monotonic()
                        if wait > 0 and outer._stop.wait(wait):
                            break
                        self._chunk(json.dumps(line).encode() + b"\n")
                    if route.reset:  # an apiserver that dies mid-watch: RST, no final chunk
                        wait = start + route.close_after / outer.speed - time.monotonic()
                        if wait > 0:
                            outer._stop.wait(wait)
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        self.close_connection = True
                        return
                    if route.hold_open:
                        # kube-apiserver ends a watch at its timeoutSeconds with the last chunk, having sent
                        # nothing on a kind where nothing changed (bench/live_staleness.py measures it).
                        outer._stop.wait(float(query["timeoutSeconds"]) if "timeoutSeconds" in query else None)
                    else:
                        wait = start + route.close_after / outer.speed - time.monotonic()
                        if wait > 0:
                            outer._stop.wait(wait)
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        if self.tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.tls)
            # The handshake in each connection's thread, not in the accepting one.
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True,
                                                     do_handshake_on_connect=False)
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> ReplayAPIServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class Blackhole:
    """Accepts TCP connections and never answers: each request waits for its read timeout."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for c in self.accepted:
            c.close()
