"""What ``serve`` runs: uvicorn, with the read limits it lacks, and the metrics port beside the admission port.

uvicorn bounds neither how long a client may take to send its request nor how large its headers may grow:
a client that connects and trickles bytes holds a connection (and the headers read so far) for as long as it
likes. ``GuardedProtocol`` is uvicorn's httptools protocol with Go's net/http limits added:

- ``read_header_timeout``: the request's headers are complete within this time of its first byte, or of the
  connection when nothing has come yet (the TLS handshake gets the same time, through the event loop);
- ``read_timeout``: the whole request, body included, within this time of its first byte;
- ``MAX_HEADER_BYTES`` of request line and headers (431 past it).

A request over time gets 408 and the connection is closed (an idle one is closed without a word, as after uvicorn's
keep-alive timeout); each counts in ``colocation_webhook_read_timeouts_total{phase}``. A connection keeps its
deadline as a time; the server's tick (every 0.1 s) checks them all, so a deadline holds within 0.1 s and a request
arms no loop timer (two a request, armed and cancelled, cost more than the header count does; docs/benchmarks.md,
"Compiled"). After the listeners close, uvicorn's graceful shutdown closes a connection still sending headers at
once, and gives one sending a body its ``graceful_shutdown_seconds``.

While the server drains (``Lifecycle.draining``, from the first SIGTERM), every answer closes its connection
(``Connection: close``): the apiserver's next review opens a new connection, which the updated Service routes
to a replica that stays, instead of reusing one to this replica until it is gone.

A small review (a Content-Length up to the gate's ``large_body_bytes``) does not go through ASGI at all: the
protocol hands it to the one entry (``ReviewEntry.begin``, which the ASGI dispatcher calls too) when its headers
are read, collects its body, and writes the entry's answer in one write when the body is complete (the inline path;
see ``_take_inline`` for what stays on uvicorn's path). uvicorn's keep-alive timeout after such an answer is one
more deadline of the tick.

The protocol also puts the ASGI TLS extension into each request's scope (``client_cert_chain``,
``client_cert_name``, ``tls_version``), from which the entry tells whether the client gave a certificate.

uvicorn is pinned to the minor series this was tested on (docs/architecture.md says why this protocol subclasses
uvicorn's rather than replacing it), and ``tests/server/test_serving_uvicorn.py`` names every uvicorn internal used
here and in ``webhook.tls.watch``: a uvicorn that moved one fails that test by the internal's name.

``AdmissionServer`` serves the admission port (TLS) and, on the same event loop, the metrics port: plain HTTP, as
controller-runtime's metrics endpoint is, so a Prometheus needs no admission CA to scrape it.

A SIGTERM does not stop it at once (kube-apiserver's own ``--shutdown-delay-duration`` is the model): the
apiserver keeps calling a terminating replica until the endpoints change reaches it, and with
``failurePolicy: Ignore`` every call that fails admits a pod unchecked. So on the first SIGTERM (what the kubelet
sends) ``/readyz`` turns 503 and the listeners stay open for ``drain_delay`` seconds, answering reviews on open and new
connections; then uvicorn's graceful shutdown stops listening and lets in-flight reviews finish. A second
signal ends the process at once, and so does Ctrl-C (SIGINT): a person at a terminal has no endpoints to wait for.
"""

from __future__ import annotations

import asyncio
import gc
import http
import logging
import signal
import socket
import ssl
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar

import httptools
import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from webhook.server.app import WebhookServer
from webhook.server.asgi import Lifecycle, ReviewDispatcher, ReviewEntry, Ticket, answer_headers, content_length
from webhook.server.metrics import Metrics
from webhook.server.service import Answer
from webhook.tls.policy import apply_policy
from webhook.tls.watch import CertWatcher, WatchingServer

log = logging.getLogger("webhook.server.serving")
MAX_HEADER_BYTES = 64 * 1024  # the apiserver sends a few hundred bytes; Go's default is 1 MiB
TLS_VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}  # the ASGI TLS extension's tls_version values
# Our own status lines (uvicorn's table is a module internal): every status http.HTTPStatus knows.
STATUS_LINES = {int(s): b"HTTP/1.1 %d %s\r\n" % (s, s.phrase.encode()) for s in http.HTTPStatus}


def url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets (``https://[::1]:8443``, RFC 3986)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """The listeners and their read limits (``serve``'s flags), as ``AdmissionServer`` applies them."""

    host: str = "0.0.0.0"
    port: int = 8443
    metrics_port: int = 8080               # 0: no metrics listener
    read_header_timeout: float = 5.0       # the TLS handshake, then a request's headers
    read_timeout: float = 10.0             # a whole request, body included, from its first byte
    drain_delay: float = 10.0              # after SIGTERM, reviews are still answered this long (unready)
    graceful_shutdown_seconds: int = 10    # then in-flight reviews get this long


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with read deadlines and a header size limit (see the module's text).
    ``limits`` subclasses set the class attributes."""

    read_header_timeout: ClassVar[float] = 5.0
    read_timeout: ClassVar[float] = 10.0
    metrics: ClassVar[Metrics | None] = None
    lifecycle: ClassVar[Lifecycle] = Lifecycle()
    entry: ClassVar[ReviewEntry | None] = None  # the admission port's: small reviews answered inline

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._due: float | None = None  # loop time by which the phase must end; None: nothing awaited
        self._phase = "idle"         # what the deadline waits for: idle (nothing sent yet), headers, body
        self._started = 0.0          # loop time of the current request's first byte
        self._header_bytes = 0
        self._tls: dict[object, object] | None = None
        # The request on the inline path: let in by the entry (its Ticket; its body so far in _chunks), or refused
        # (the Answer, written already; the rest of its body is dropped); None: on uvicorn's path, or no request.
        self._inline: Ticket | Answer | None = None
        self._chunks: list[bytes] = []
        self._last_answer = False    # the inline answer closes the connection (uvicorn's shutdown came first)
        self._reads_held = False     # reading paused until the client reads the answers written

    @classmethod
    def limits(cls, options: ServeOptions, metrics: Metrics | None, lifecycle: Lifecycle,
               entry: ReviewEntry | None = None) -> type[GuardedProtocol]:
        return type("GuardedProtocol", (cls,), {"read_header_timeout": options.read_header_timeout,
                                                "read_timeout": options.read_timeout, "metrics": metrics,
                                                "lifecycle": lifecycle, "entry": entry})

    # -- the deadlines ----------------------------------------------------------------------------
    def _arm(self, seconds: float, phase: str) -> None:
        self._phase = phase
        self._due = self.loop.time() + seconds

    def _disarm(self) -> None:
        self._due = None

    def check_deadline(self, now: float) -> None:
        """The server's tick: end the connection's current phase if its deadline has passed."""
        if self._due is not None and now >= self._due:
            self._due = None
            self._expired()

    def _expired(self) -> None:
        if self.transport.is_closing():
            return
        phase = self._phase
        if phase in ("idle", "kept"):  # sent nothing (since connecting, or since the last answer): closed without
            self.transport.close()     # a word, as after uvicorn's keep-alive timeout
            return
        if self.metrics is not None:
            self.metrics.read_timeout(phase)
        cycle, inline = self.cycle, self._inline
        answered = isinstance(inline, Answer) if inline is not None else cycle is not None and cycle.response_started
        if phase == "headers" or not answered:
            self._refuse(408, f"the request {phase} did not arrive within "
                              f"{self.read_header_timeout if phase == 'headers' else self.read_timeout:g} s")
        else:  # the app answered without reading the whole body: nothing more to say
            self.transport.close()

    def _refuse(self, status: int, text: str) -> None:
        """A plain answer written straight to the socket, then the connection closes."""
        body = text.encode()
        self.transport.write(b"%scontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (STATUS_LINES[status], len(body), body))
        self.transport.close()

    # -- uvicorn's callbacks ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn's
        super().connection_made(transport)
        self._tls = _tls_extension(transport)
        self._arm(self.read_header_timeout, "idle")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        inline, self._inline = self._inline, None
        if isinstance(inline, Ticket) and self.entry is not None:
            self.entry.leave(inline)  # its client went away before the body was complete
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._started = self.loop.time()
        self._header_bytes = 0
        if self._phase == "idle" and self._due is not None:
            self._phase = "headers"  # the first request: its headers are due read_header_timeout after connecting
        else:  # a kept-alive connection: from this request's first byte
            self._arm(self.read_header_timeout, "headers")
        if self._tls is not None:
            self.scope["extensions"] = {"tls": self._tls}

    # The parser calls these once per header: the count is written out in each and uvicorn's method called as a
    # function (no helper call, no super() object): the cheapest way per header (docs/benchmarks.md, "Figures
    # behind the code's comments").
    def on_url(self, url: bytes) -> None:
        self._header_bytes += len(url)
        if self._header_bytes > MAX_HEADER_BYTES:
            self._too_large()
        _UVICORN_ON_URL(self, url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value)
        if self._header_bytes > MAX_HEADER_BYTES:
            self._too_large()
        _UVICORN_ON_HEADER(self, name, value)

    def _too_large(self) -> None:
        self._disarm()
        self._refuse(431, f"the request line and headers exceed {MAX_HEADER_BYTES} bytes")
        raise _HeadersTooLarge  # stops the parser; uvicorn's 400 for it is skipped below

    def send_400_response(self, msg: str) -> None:
        if not self.transport.is_closing():  # after a 431, the connection is closing already
            super().send_400_response(msg)

    def on_headers_complete(self) -> None:
        self._phase, self._due = "body", self._started + self.read_timeout
        if self.entry is not None and self._take_inline(self.entry):
            return
        super().on_headers_complete()
        if self.lifecycle.draining and self.cycle is not None:
            self.cycle.keep_alive = False  # answered, then closed: the client's next call finds a staying replica

    def on_body(self, body: bytes) -> None:
        inline = self._inline
        if inline is None:
            super().on_body(body)
        elif isinstance(inline, Ticket):
            self._chunks.append(body)

    def on_message_complete(self) -> None:
        self._disarm()
        self._phase = "done"
        inline = self._inline
        if inline is None:
            super().on_message_complete()
            return
        self._inline = None
        if isinstance(inline, Ticket):
            entry = self.entry
            assert entry is not None  # only it lets a review in
            body = b"".join(self._chunks)
            self._chunks.clear()  # the body is not kept until the connection's next request
            self._respond(entry.answer(inline, body))
        if not self.transport.is_closing():
            self._arm(self.timeout_keep_alive, "kept")  # uvicorn's keep-alive timeout, as a deadline

    # -- the inline path ------------------------------------------------------------------------------
    # A small review (a known Content-Length up to the gate's large_body_bytes) is answered here, from the parser's
    # callbacks, through the one entry the dispatcher takes too: no ASGI task, coroutine or message, no second
    # write, which is much of a small review's cost (docs/benchmarks.md, "The inline path"). Everything else (other
    # paths and methods, large or chunked bodies, Expect: 100-continue, a request pipelined behind one still being
    # answered, a dispatcher wrapped in middleware) takes uvicorn's path to the ASGI app and the same entry.
    def _take_inline(self, entry: ReviewEntry) -> bool:
        cycle = self.cycle
        if ((cycle is not None and not cycle.response_complete) or self.expect_100_continue
                or self.parser.should_upgrade() or self.parser.get_method() != b"POST"):
            return False  # POST only: a HEAD's answer has no body, which uvicorn's path knows
        # The raw path as ASCII, as the ASGI path's would be without percent-escapes (with one, it goes that way).
        inline = entry.begin("POST", httptools.parse_url(self.url).path.decode("latin-1"), self._tls,
                             content_length(self.headers), inline=True)
        if inline is None:
            return False
        self._inline = inline
        if not isinstance(inline, Ticket):  # refused: answered now, as the ASGI path does; its body is dropped
            self._respond(inline)
        return True

    def _respond(self, answer: Answer) -> None:
        """The answer in one write, with uvicorn's default headers; closes the connection where the client, the
        drain or a shutdown asks for it."""
        keep_alive = (not self.lifecycle.draining and not self._last_answer and self.parser.should_keep_alive()
                      and self.parser.get_http_version() != "1.0")
        out = [STATUS_LINES[answer.status]]
        for name, value in (*self.server_state.default_headers, *answer_headers(answer)):
            out += (name, b": ", value, b"\r\n")
        if not keep_alive:
            out.append(b"connection: close\r\n")
        out += (b"\r\n", answer.body)
        self.transport.write(b"".join(out))
        self.server_state.total_requests += 1
        if not keep_alive:
            self.transport.close()
        elif self.flow.write_paused:  # the client is not reading its answers: read no more requests until it does
            self._reads_held = True
            self.flow.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._reads_held:
            self._reads_held = False
            self.flow.resume_reading()

    def shutdown(self) -> None:
        if isinstance(self._inline, Ticket):
            self._last_answer = True  # its body is coming: answered, then closed (graceful shutdown waits for it)
            return
        super().shutdown()


class _HeadersTooLarge(Exception):
    pass


_UVICORN_ON_URL = HttpToolsProtocol.on_url
_UVICORN_ON_HEADER = HttpToolsProtocol.on_header


def _tls_extension(transport: asyncio.Transport) -> dict[object, object] | None:
    """The ASGI TLS extension of a connection, or None on plain HTTP. The chain holds the client's own
    certificate only: that is all Python's ssl module hands over, and all the dispatcher needs. When the
    server asks for client certificates (``--client-ca-file``) and none was given, ``client_cert_error`` says
    so, and the dispatcher refuses reviews on that connection."""
    ssl_object = transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    der = ssl_object.getpeercert(binary_form=True)
    subject = (ssl_object.getpeercert() or {}).get("subject", ()) if der else ()
    name = ",".join(f"{k}={v}" for rdn in reversed(subject) for k, v in rdn) or None
    asked = ssl_object.context.verify_mode != ssl.CERT_NONE
    return {"server_cert": None, "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
            "client_cert_name": name,
            "client_cert_error": "no client certificate was presented" if asked and not der else None,
            "tls_version": TLS_VERSIONS.get(ssl_object.version() or ""), "cipher_suite": None}


class _LoopMixin:
    """An event loop whose TLS servers give up a handshake after ``handshake_timeout`` seconds (asyncio's
    default is 60, and uvicorn passes none)."""

    handshake_timeout = 5.0

    async def create_server(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", self.handshake_timeout)
        return await super().create_server(*args, **kwargs)  # type: ignore[misc]  # the loop class mixed in


def _loop_class() -> type[asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:  # uvicorn[standard] brings uvloop; plain asyncio otherwise
        return type("Loop", (_LoopMixin, asyncio.SelectorEventLoop), {})
    return type("Loop", (_LoopMixin, uvloop.Loop), {})


class AdmissionServer(WatchingServer):
    """The admission port (TLS by ``webhook.tls.policy``, the pair hot-reloaded when ``watch_certs``) and the
    metrics port, on one event loop. Raises ``ssl.SSLError``/``OSError`` for a pair that does not load and
    ``ClientCAError`` for a client CA that does not."""

    def __init__(self, webhook: WebhookServer, options: ServeOptions, cert: Path, key: Path,
                 client_ca: Path | None = None, watch_certs: bool = True,
                 metrics_socket: socket.socket | None = None) -> None:
        metrics = webhook.service.metrics
        self.lifecycle = webhook.lifecycle
        # Reviews take the inline path unless a middleware wraps the dispatcher (it must see them).
        entry = webhook.asgi.entry if isinstance(webhook.asgi, ReviewDispatcher) else None
        protocol = GuardedProtocol.limits(options, metrics, webhook.lifecycle, entry)
        config = uvicorn.Config(webhook.asgi, host=options.host, port=options.port, http=protocol,
                                ssl_certfile=str(cert), ssl_keyfile=str(key), log_config=None, access_log=False,
                                lifespan="off", server_header=False,
                                timeout_graceful_shutdown=options.graceful_shutdown_seconds)
        config.load()
        assert config.ssl is not None
        apply_policy(config.ssl, client_ca)
        watcher = CertWatcher(config.ssl, cert, key, registry=metrics.registry) if watch_certs else None
        super().__init__(config, watcher)
        self.options = options
        self.metrics_protocol = GuardedProtocol.limits(options, metrics, webhook.lifecycle)  # serves no reviews
        self._metrics = metrics
        self._drain_ends: float | None = None  # monotonic time the drain ends, from the first signal
        self._state = webhook.service.state
        self._state_frozen = False
        self._drain_announced = False
        self.metrics_config: uvicorn.Config | None = None
        self.metrics_listener: asyncio.Server | None = None
        self._metrics_state = ServerState()
        self.metrics_socket = metrics_socket  # bound by the caller (serve: before it says it serves), or None
        if options.metrics_port:
            self.metrics_config = uvicorn.Config(webhook.metrics, host=options.host, port=options.metrics_port,
                                                 http=self.metrics_protocol, log_config=None, access_log=False,
                                                 lifespan="off", server_header=False)
            self.metrics_config.load()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """The first SIGTERM starts the drain (see the module's text); SIGINT, a second signal, or any with no drain
        delay ends the serving now: with the drain already begun, without waiting for in-flight reviews.

        A signal handler may interrupt code that holds a lock (logging's, a metric's): this one only sets plain
        attributes; the log line and the gauge follow on the server's next tick."""
        if (sig == signal.SIGTERM and self._drain_ends is None and self.options.drain_delay > 0
                and not self.should_exit):
            self._drain_ends = time.monotonic() + self.options.drain_delay
            self.lifecycle.draining = True
            return
        if self._drain_ends is not None:
            self.force_exit = True
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        now = asyncio.get_running_loop().time()
        for connection in (*self.server_state.connections, *self._metrics_state.connections):
            if isinstance(connection, GuardedProtocol):
                try:
                    connection.check_deadline(now)
                except Exception:  # one connection's failure must not end the server's loop
                    log.exception("ending a connection past its read deadline failed")
        if not self._state_frozen and self._state.ready:
            # The synced cluster state lives until the process ends (its objects are replaced one by one, and
            # reference counting frees those): out of the cyclic collector's sight, a full collection no longer
            # walks 10 000 namespaces and their quotas in the middle of a review.
            self._state_frozen = True
            gc.freeze()
        if self._drain_ends is not None and not self._drain_announced:
            self._drain_announced = True
            self._metrics.draining.set(1)
            log.info("shutting down: /readyz answers 503; reviews are answered for %g s more (--drain-delay), "
                     "then in-flight reviews finish; a second signal stops at once", self.options.drain_delay)
        if self._drain_ends is not None and not self.should_exit and time.monotonic() >= self._drain_ends:
            log.info("drain delay over: closing the listeners; in-flight reviews finish")
            self.should_exit = True
        return await super().on_tick(counter)

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        loop_class = _loop_class()

        def new_loop() -> asyncio.AbstractEventLoop:
            loop = loop_class()
            loop.handshake_timeout = self.options.read_header_timeout  # type: ignore[attr-defined]  # _LoopMixin
            return loop

        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(self.serve(sockets=sockets))

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        # What start-up made (modules, classes, the app) lives as long as the process: out of the cyclic
        # collector's sight, its passes trace only what came since.
        gc.freeze()
        mconfig = self.metrics_config
        if not self.started or mconfig is None:
            return
        loop = asyncio.get_running_loop()
        state = self._metrics_state
        protocol = self.metrics_protocol
        where: dict[str, Any] = ({"sock": self.metrics_socket} if self.metrics_socket is not None
                                 else {"host": mconfig.host, "port": mconfig.port})
        try:
            self.metrics_listener = await loop.create_server(
                lambda: protocol(config=mconfig, server_state=state, app_state={}), **where)
        except OSError as exc:  # as uvicorn does for the admission port
            log.error("cannot listen on the metrics port (--metrics-port %d): %s", mconfig.port, exc.strerror or exc)
            sys.exit(STARTUP_FAILURE)
        log.info("metrics on http://%s:%d/metrics", url_host(mconfig.host), mconfig.port)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.metrics_listener is not None:
            self.metrics_listener.close()
            for connection in list(self._metrics_state.connections):
                connection.shutdown()
        await super().shutdown(sockets=sockets)
