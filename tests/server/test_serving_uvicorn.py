"""Every uvicorn internal the HTTP edge relies on, in one table; a uvicorn that moved one fails here by its name.

``webhook.server.serving`` subclasses uvicorn's ``HttpToolsProtocol`` and ``webhook.tls.watch`` its ``Server``
(docs/architecture.md says why, with the measurements): they override methods uvicorn calls, call methods of
uvicorn's from theirs, and read or set attributes uvicorn's code sets. None of that is uvicorn's documented API, so
uvicorn is pinned to the minor series this table was checked against (``PINNED_SERIES``). To move to a new series:
install it, run this file, and mend what fails, each failure named after the internal that moved (the test id),
then raise ``PINNED_SERIES`` and pyproject's bound together.

Each row checks one internal in the way the edge relies on it: a module attribute is there; a method has the
parameters the edge's override takes, or calls it with (and is a coroutine function where it is awaited); an
instance attribute is set by uvicorn's own code on a real protocol, made with a real ``Config`` and driven through a
real request on a stand-in transport; where the edge relies on uvicorn calling something, the call is in uvicorn's
source.
"""

from __future__ import annotations

import asyncio
import inspect
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httptools
import pytest
import uvicorn
import uvicorn.config
import uvicorn.protocols.http.httptools_impl as httptools_impl
import uvicorn.server
from packaging.requirements import Requirement

from harness.transport import Transport
from webhook.server.serving import AdmissionServer, GuardedProtocol
from webhook.tls.watch import WatchingServer

PINNED_SERIES = "0.54"  # the uvicorn minor series the table below was checked against
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Internal:
    name: str                  # what the edge uses, as it is spelled there: the test id
    check: Callable[[], None]  # raises AssertionError naming it when uvicorn moved it


def _module_attribute(module: Any, name: str) -> Callable[[], None]:
    def check() -> None:
        assert hasattr(module, name), f"{module.__name__}.{name} is gone"
    return check


def _method(cls: type, name: str, params: list[str], coroutine: bool = False) -> Callable[[], None]:
    """``cls.name`` takes ``params`` (self first), in this order; a coroutine function when the edge awaits it."""
    def check() -> None:
        where = f"{cls.__module__}.{cls.__name__}.{name}"
        assert hasattr(cls, name), f"{where} is gone"
        method = getattr(cls, name)
        taken = list(inspect.signature(method).parameters)
        assert taken == params, f"{where} takes {taken}, the edge expects {params}"
        assert inspect.iscoroutinefunction(inspect.unwrap(method)) == coroutine, \
            f"{where} is {'no longer' if coroutine else 'now'} a coroutine function"
    return check


def _calls(cls: type, name: str, call: str) -> Callable[[], None]:
    """uvicorn's ``cls.name`` still makes the call the edge relies on (found in its source)."""
    def check() -> None:
        source = inspect.getsource(getattr(cls, name))
        assert call in source, f"{cls.__name__}.{name} no longer calls {call!r}"
    return check


# -- a real protocol, driven through part of a request ----------------------------------------------------------
# The in-memory transport bench/protocol_inprocess.py uses too: what the protocol writes is kept, nothing is sent.
_Transport = Transport


@dataclass
class _Driven:
    """What a real ``HttpToolsProtocol`` held at each step the edge reads it at."""

    fresh: dict[str, Any]      # its attributes right after __init__
    begun: dict[str, Any]      # after connection_made and the headers of a request (body still to come)
    protocol: Any
    state: uvicorn.server.ServerState


_DRIVEN: list[_Driven] = []


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await receive()  # until the test disconnects


def _driven() -> _Driven:
    if _DRIVEN:
        return _DRIVEN[0]

    async def drive() -> _Driven:
        config = uvicorn.Config(_app, http=httptools_impl.HttpToolsProtocol, log_config=None, lifespan="off")
        config.load()
        state = uvicorn.server.ServerState()
        protocol = httptools_impl.HttpToolsProtocol(config=config, server_state=state, app_state={})
        fresh = dict(vars(protocol))
        protocol.connection_made(_Transport())
        protocol.data_received(b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                               b"Expect: 100-continue\r\n\r\n")
        begun = dict(vars(protocol))
        protocol.connection_lost(None)
        for _ in range(3):  # the app's task sees the disconnect and ends
            await asyncio.sleep(0)
        return _Driven(fresh, begun, protocol, state)

    _DRIVEN.append(asyncio.run(drive()))
    return _DRIVEN[0]


def _set_by_init(name: str) -> Callable[[], None]:
    def check() -> None:
        assert name in _driven().fresh, f"HttpToolsProtocol.__init__ no longer sets self.{name}"
    return check


def _set_per_request(name: str, kind: type | tuple[type, ...]) -> Callable[[], None]:
    def check() -> None:
        begun = _driven().begun
        assert name in begun, f"HttpToolsProtocol no longer sets self.{name} for a request"
        assert isinstance(begun[name], kind), f"HttpToolsProtocol's self.{name} is a {type(begun[name]).__name__}"
    return check


def _has(attribute: str, of: Callable[[], object]) -> Callable[[], None]:
    """``of()`` (an object uvicorn made) has ``attribute`` (a dotted name reads further)."""
    def check() -> None:
        obj = of()
        for part in attribute.split("."):
            assert hasattr(obj, part), f"{type(obj).__name__} has no {part!r} ({attribute})"
            obj = getattr(obj, part)
    return check


def _in_order(*checks: Callable[[], None]) -> Callable[[], None]:
    def check() -> None:
        for c in checks:
            c()
    return check


def _cycle() -> object:
    return _driven().begun["cycle"]


def _flow() -> object:
    return _driven().begun["flow"]


def _begun_parser() -> object:
    return _driven().begun["parser"]


def _state() -> object:
    return _driven().state


def _connection_made_registers() -> None:
    d = _driven()
    assert "connections" in d.fresh and d.fresh["connections"] is d.state.connections, \
        "HttpToolsProtocol.connection_made no longer adds the protocol to server_state.connections (the tick's list)"


def _expect_100_continue_read() -> None:
    assert _driven().begun["expect_100_continue"] is True, \
        "HttpToolsProtocol.on_header no longer sets self.expect_100_continue for 'Expect: 100-continue'"


def _url_collected() -> None:
    assert _driven().begun["url"] == b"/mutate?timeout=10s", "HttpToolsProtocol.on_url no longer collects self.url"


def _headers_collected() -> None:
    headers = _driven().begun["headers"]
    assert (b"content-length", b"2") in headers, \
        "HttpToolsProtocol.on_header no longer collects lower-cased (name, value) pairs in self.headers"
    assert _driven().begun["scope"]["headers"] is headers, "the scope's headers are no longer self.headers"


def _capture_signals_is_a_context_manager() -> None:
    assert inspect.isgeneratorfunction(inspect.unwrap(uvicorn.Server.capture_signals)), \
        "uvicorn.Server.capture_signals is no longer a @contextmanager generator"


def _loaded_config() -> uvicorn.Config:
    config = uvicorn.Config(_app, http=httptools_impl.HttpToolsProtocol, log_config=None, lifespan="off")
    config.load()
    return config


def _serves_the_class_given() -> None:
    assert _loaded_config().http_protocol_class is httptools_impl.HttpToolsProtocol, \
        "uvicorn.Config(http=<a protocol class>) no longer serves that class (Config.http_protocol_class)"


P = httptools_impl.HttpToolsProtocol
S = uvicorn.Server
INTERNALS = [
    # modules: what the edge imports beyond uvicorn.Config and uvicorn.Server
    Internal("uvicorn.protocols.http.httptools_impl.HttpToolsProtocol",
             _module_attribute(httptools_impl, "HttpToolsProtocol")),
    Internal("uvicorn.server.ServerState", _module_attribute(uvicorn.server, "ServerState")),
    Internal("uvicorn.config.STARTUP_FAILURE", _module_attribute(uvicorn.config, "STARTUP_FAILURE")),
    # HttpToolsProtocol: how it is made (uvicorn's startup, and AdmissionServer for the metrics port)
    Internal("HttpToolsProtocol.__init__", _method(P, "__init__", ["self", "config", "server_state", "app_state",
                                                                    "_loop"])),
    Internal("Server.startup creates the protocol with config=, server_state=, app_state=",
             _calls(S, "startup", "config.http_protocol_class(")),
    # HttpToolsProtocol: the methods GuardedProtocol overrides (and calls uvicorn's from), as they are called
    Internal("HttpToolsProtocol.connection_made", _method(P, "connection_made", ["self", "transport"])),
    Internal("HttpToolsProtocol.connection_lost", _method(P, "connection_lost", ["self", "exc"])),
    Internal("HttpToolsProtocol.on_message_begin", _method(P, "on_message_begin", ["self"])),
    Internal("HttpToolsProtocol.on_url", _method(P, "on_url", ["self", "url"])),
    Internal("HttpToolsProtocol.on_header", _method(P, "on_header", ["self", "name", "value"])),
    Internal("HttpToolsProtocol.send_400_response", _method(P, "send_400_response", ["self", "msg"])),
    Internal("HttpToolsProtocol.data_received sends send_400_response on a parser error (the 431 stops it)",
             _calls(P, "data_received", "self.send_400_response(")),
    Internal("HttpToolsProtocol.on_headers_complete", _method(P, "on_headers_complete", ["self"])),
    Internal("HttpToolsProtocol.on_body", _method(P, "on_body", ["self", "body"])),
    Internal("HttpToolsProtocol.on_message_complete", _method(P, "on_message_complete", ["self"])),
    Internal("HttpToolsProtocol.resume_writing", _method(P, "resume_writing", ["self"])),
    Internal("HttpToolsProtocol.shutdown", _method(P, "shutdown", ["self"])),
    Internal("Server.shutdown calls each connection's shutdown()", _calls(S, "shutdown", "connection.shutdown()")),
    # HttpToolsProtocol: the attributes GuardedProtocol reads (or sets), as uvicorn's own code leaves them
    Internal("HttpToolsProtocol.loop", _in_order(_set_by_init("loop"), _has("loop.time", lambda: _driven().protocol))),
    Internal("HttpToolsProtocol.timeout_keep_alive", _set_by_init("timeout_keep_alive")),
    Internal("HttpToolsProtocol.server_state", _set_by_init("server_state")),
    Internal("HttpToolsProtocol.connections (server_state.connections)", _connection_made_registers),
    Internal("HttpToolsProtocol.transport", _set_per_request("transport", asyncio.Transport)),
    Internal("HttpToolsProtocol.parser", _in_order(
        _set_per_request("parser", httptools.HttpRequestParser),
        *(_has(m, _begun_parser) for m in ("should_upgrade", "get_method", "should_keep_alive",
                                           "get_http_version")))),
    Internal("HttpToolsProtocol.flow", _in_order(_set_per_request("flow", object), _has("write_paused", _flow),
                                                  _has("pause_reading", _flow), _has("resume_reading", _flow))),
    Internal("HttpToolsProtocol.scope", _set_per_request("scope", dict)),
    Internal("HttpToolsProtocol.url", _in_order(_set_per_request("url", bytes), _url_collected)),
    Internal("HttpToolsProtocol.headers", _in_order(_set_per_request("headers", list), _headers_collected)),
    Internal("HttpToolsProtocol.expect_100_continue", _in_order(_set_per_request("expect_100_continue", bool),
                                                                _expect_100_continue_read)),
    Internal("HttpToolsProtocol.cycle", _in_order(_set_per_request("cycle", httptools_impl.RequestResponseCycle),
                                                   _has("response_started", _cycle),
                                                   _has("response_complete", _cycle), _has("keep_alive", _cycle))),
    Internal("ServerState.default_headers", _has("default_headers", _state)),
    Internal("ServerState.total_requests", _has("total_requests", _state)),
    # uvicorn.Server: what WatchingServer and AdmissionServer override, call or read
    Internal("Server.__init__", _method(S, "__init__", ["self", "config"])),
    Internal("Server.run", _method(S, "run", ["self", "sockets"])),  # AdmissionServer's runs serve() on its loop
    Internal("Server.serve", _in_order(_method(S, "serve", ["self", "sockets"], coroutine=True),
                                       _calls(S, "serve", "self.capture_signals()"))),
    Internal("Server.capture_signals", _in_order(_method(S, "capture_signals", ["self"]),
                                                 _capture_signals_is_a_context_manager)),
    Internal("Server.handle_exit", _method(S, "handle_exit", ["self", "sig", "frame"])),
    Internal("Server.startup", _method(S, "startup", ["self", "sockets"], coroutine=True)),
    Internal("Server.startup passes ssl= to loop.create_server (the handshake timeout)",
             _calls(S, "startup", "ssl=config.ssl")),
    Internal("Server.shutdown", _method(S, "shutdown", ["self", "sockets"], coroutine=True)),
    Internal("Server.on_tick", _method(S, "on_tick", ["self", "counter"], coroutine=True)),
    Internal("Server.main_loop ticks every 0.1 s", _in_order(_calls(S, "main_loop", "await self.on_tick(counter)"),
                                                             _calls(S, "main_loop", "asyncio.sleep(0.1)"))),
    Internal("Server.should_exit, force_exit, started, server_state",
             _in_order(*(_has(a, lambda: S(uvicorn.Config(_app))) for a in
                         ("should_exit", "force_exit", "started", "server_state.connections")))),
    Internal("Config.load, ssl, host, port", _in_order(*(_has(a, _loaded_config) for a in
                                                         ("load", "ssl", "host", "port")))),
    Internal("Config.http_protocol_class (http=GuardedProtocol)", _serves_the_class_given),
]


def test_the_table_covers_every_override() -> None:
    """Each uvicorn method the edge's classes override has its row: a new override needs one."""
    for ours, theirs, prefix in ((GuardedProtocol, P, "HttpToolsProtocol."), (WatchingServer, S, "Server."),
                                 (AdmissionServer, S, "Server.")):
        overridden = {n for n, v in vars(ours).items()
                      if (callable(v) or isinstance(v, property)) and callable(getattr(theirs, n, None))}
        named = {i.name.removeprefix(prefix).split()[0].rstrip(",") for i in INTERNALS if i.name.startswith(prefix)}
        assert overridden - named == set(), f"{ours.__name__} overrides {overridden - named} with no row here"


@pytest.mark.parametrize("internal", INTERNALS, ids=[i.name for i in INTERNALS])
def test_the_uvicorn_internal_the_edge_relies_on_is_there(internal: Internal) -> None:
    internal.check()


def test_uvicorn_is_the_pinned_series() -> None:
    assert uvicorn.__version__.split(".")[:2] == PINNED_SERIES.split("."), \
        f"uvicorn {uvicorn.__version__} is installed; the edge was checked against {PINNED_SERIES}.x (see above)"


def test_pyproject_pins_uvicorn_to_the_series() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    uvicorn_req = next(Requirement(d) for d in deps if Requirement(d).name == "uvicorn")
    major, minor = (int(p) for p in PINNED_SERIES.split("."))
    inside = [f"{major}.{minor}.0", f"{major}.{minor}.99"]
    outside = [f"{major}.{minor + 1}.0", f"{major}.{minor - 1}.99"]
    assert all(uvicorn_req.specifier.contains(v) for v in inside) and \
        not any(uvicorn_req.specifier.contains(v) for v in outside), \
        f"pyproject's {uvicorn_req} must admit {PINNED_SERIES}.x and nothing else"


# -- the table can fail, and by the internal's name --------------------------------------------------------------
def _gone_attribute(monkeypatch: pytest.MonkeyPatch) -> None:
    init = P.__init__

    def without_timeout_keep_alive(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        del self.timeout_keep_alive
    monkeypatch.setattr(P, "__init__", without_timeout_keep_alive)


MOVES: list[tuple[str, Callable[[pytest.MonkeyPatch], None]]] = [
    ("HttpToolsProtocol.on_header", lambda mp: mp.setattr(P, "on_header", lambda self, raw: None)),
    ("HttpToolsProtocol.timeout_keep_alive", _gone_attribute),
    ("uvicorn.server.ServerState", lambda mp: mp.delattr(uvicorn.server, "ServerState")),
    ("Server.on_tick", lambda mp: mp.setattr(S, "on_tick", lambda self, counter: False)),
]


@pytest.mark.parametrize(("name", "move"), MOVES, ids=[m[0] for m in MOVES])
def test_a_moved_internal_fails_its_row(name: str, move: Callable[[pytest.MonkeyPatch], None],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    row = next(i for i in INTERNALS if i.name == name)
    move(monkeypatch)
    _DRIVEN.clear()  # drive the protocol again, as moved
    try:
        with pytest.raises(AssertionError, match=name.rsplit(".", 1)[-1]):
            row.check()
    finally:
        monkeypatch.undo()
        _DRIVEN.clear()
