"""The ``live`` source: list + watch through the official kubernetes client, held in memory as raw dicts.

One reflector thread per kind: a paginated list replaces the kind in the ``ClusterState`` (readiness only
after the first complete list), then a watch from the list's resourceVersion applies ADDED / MODIFIED /
DELETED and tracks the resourceVersion (bookmarks included). A watch that ends resumes from the last
resourceVersion; 410 Gone (an ERROR event or an HTTP answer) relists. A watch that gets no byte past its read
deadline (just above the ``timeoutSeconds`` the API server ends it at) is dead: the kind relists. Failures retry
with the backoff of ``freshness.Backoff``; a kind that has synced once keeps serving its last complete state.
What is decided (backoff, failure classes, which lines to log, staleness) is in ``webhook/cluster/freshness.py``,
pure; this module is its edge.

Responses are read raw (``_preload_content=False`` + orjson): building the client's model objects costs
more than the parse (docs/benchmarks.md) and we only ever want dicts. Nothing here runs on the admission request path.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import logging
import random
import socket
import ssl
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from webhook.cluster.files import found, utf8
from webhook.cluster.freshness import (
    NO_DATA,
    Backoff,
    Failure,
    KindReport,
    Outage,
    Timing,
    failed_line,
    recovered_line,
    seconds,
    summary_line,
)
from webhook.cluster.intake import judge
from webhook.cluster.kubeconfig import load_kubeconfig
from webhook.cluster.state import (
    KINDS,
    SLO_CONFIG_NAME,
    SLO_CONFIG_NAMESPACE,
    ClusterState,
    Key,
    Kind,
    kept,
    object_key,
)
from webhook.cluster.strict import CUSTOM_KINDS, check
from webhook.cluster.yaml_input import load, yaml_problem

__all__ = ["KindStatus", "LiveSource", "LiveSourceError", "Timing", "api_client", "paginated"]

log = logging.getLogger(__name__)

# paginated(), the one-pass list of `audit`; the reflectors take theirs from Timing.
_CONNECT_TIMEOUT = 5.0
_LIST_READ_TIMEOUT = 60.0


class _Expired(Exception):
    """410 Gone: the resourceVersion (or continue token) is too old; relist from scratch."""


class _APIError(Exception):
    """An ERROR watch event other than 410; retried with backoff."""

    def __init__(self, message: str, code: object, retry_after: float | None) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after


@dataclass
class KindStatus:
    """What one reflector is doing, for logs, metrics and tests."""

    synced: bool = False
    resource_version: str | None = None
    last_error: str | None = None
    lists: int = 0
    relists_after_410: int = 0
    watches: int = 0
    errors: int = 0
    events: dict[str, int] = field(default_factory=dict)
    failing: str | None = None       # the reason of the failures since the last success (freshness.Failure)
    silent: bool = False             # that run began with a watch or list that went silent: the kind relists


_LOADERS: Any = k8s_config  # the kubernetes package ships no type hints for its config loaders


class LiveSourceError(ValueError):
    """The live source cannot be set up (bad kubeconfig, no in-cluster config, bad options)."""


def _kubeconfig_problem(kubeconfig: str) -> str | None:
    """What makes ``kubeconfig`` no kubeconfig at all, in a user's words (the client's loader would say
    ``list indices must be integers`` or a codec's error), or None to let the loader judge the rest."""
    path = Path(kubeconfig)
    try:
        text = utf8(path.read_bytes())
    except IsADirectoryError:
        return f"kubeconfig {kubeconfig}: is a directory"
    except OSError as exc:
        return f"kubeconfig {kubeconfig}: cannot read: {exc.strerror or exc}"
    except ValueError as exc:
        return f"kubeconfig {kubeconfig}: {exc}"
    try:
        doc = load(text)  # before the client's loader: an alias bomb refused here, as kube-apiserver refuses it
    except yaml.YAMLError as exc:
        return f"kubeconfig {yaml_problem(kubeconfig, exc)}"
    if not isinstance(doc, dict):
        return f"kubeconfig {kubeconfig}: holds {found(doc)}; expected a kubeconfig (kind: Config)"
    return None


def _client_configuration(kubeconfig: str | None) -> k8s.Configuration:
    cfg = k8s.Configuration()
    if kubeconfig and (problem := _kubeconfig_problem(kubeconfig)) is not None:
        raise LiveSourceError(f"cannot load {problem}")
    try:
        if kubeconfig:
            load_kubeconfig(kubeconfig, cfg)
        else:
            _LOADERS.load_incluster_config(client_configuration=cfg)
    except yaml.YAMLError as exc:
        raise LiveSourceError(f"cannot load kubeconfig {yaml_problem(kubeconfig, exc)}") from None
    except (k8s_config.ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config"
        raise LiveSourceError(f"cannot load {where}: {exc}") from None
    return cfg


# The list/watch query parameters the reflectors pass, by the names the apiserver reads.
_QUERY = {"limit": "limit", "_continue": "continue", "field_selector": "fieldSelector", "watch": "watch",
          "allow_watch_bookmarks": "allowWatchBookmarks", "resource_version": "resourceVersion",
          "timeout_seconds": "timeoutSeconds", "label_selector": "labelSelector"}


def resource_path(kind: Kind, namespace: str | None) -> str:
    """The collection's REST path: cluster-wide, or in ``namespace`` (the ConfigMap)."""
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    return f"{base}/namespaces/{namespace}/{kind.plural}" if namespace is not None else f"{base}/{kind.plural}"


def _list_function(api: k8s.ApiClient, kind: Kind, namespace: str | None) -> Callable[..., urllib3.HTTPResponse]:
    """A raw list/watch call for a kind, through the official client's REST layer (its auth, TLS and pool).

    Not the typed ``CoreV1Api`` methods: their classes validate every call with pydantic and cost memory for the
    three methods used here (bench/state_memory.py; docs/benchmarks.md), and the reflectors read the body raw anyway."""
    path = resource_path(kind, namespace)

    def call(_request_timeout: tuple[float, float], **query: Any) -> urllib3.HTTPResponse:
        params = [(_QUERY[k], v) for k, v in query.items() if v is not None]
        request = api.param_serialize(method="GET", resource_path=path, query_params=params,
                                      header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        response = api.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:   # as the typed methods do without preloading
            # The Status body, for the message; read whole, the connection goes back to the pool, and one
            # that breaks half-way is closed now (a reset storm's failed answers would hold their sockets).
            _read_all(response.response)
            response.read()  # type: ignore[no-untyped-call]  # the client is untyped
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        raw: urllib3.HTTPResponse = response.response
        return raw

    return call


def _read_all(resp: urllib3.HTTPResponse) -> bytes:
    """The whole body; the connection goes back to the pool once read, and is closed at once if the read fails
    (never back to the pool half-read, nor left for the garbage collector to close)."""
    try:
        return resp.data
    except BaseException:
        resp.close()
        raise
    finally:
        resp.release_conn()


def api_client(kubeconfig: str | None, agent: str) -> k8s.ApiClient:
    """A client for ``kubeconfig`` (None: the in-cluster ServiceAccount); LiveSourceError when unusable."""
    client = k8s.ApiClient(_client_configuration(kubeconfig))
    client.user_agent = agent
    return client


def paginated(api: k8s.ApiClient, kind: Kind, namespace: str | None = None, label_selector: str | None = None,
              page_size: int = 500) -> Iterator[dict[str, Any]]:
    """Every object of ``kind``, one at a time, read a page (``limit``/``continue``) at a time: a pass over a
    large cluster never holds more than one page. Each object gets its ``kind`` and ``apiVersion`` back.
    LiveSourceError names what went wrong (an error status, an unreachable server, a continue token that expired
    part-way: the objects already given cannot be taken back, so the pass fails rather than start over)."""
    call = _list_function(api, kind, namespace)
    host = api.configuration.host
    cont: str | None = None
    given = 0
    while True:
        try:
            resp = call(_request_timeout=(_CONNECT_TIMEOUT, _LIST_READ_TIMEOUT), limit=page_size, _continue=cont,
                        label_selector=label_selector or None)
            try:
                body = orjson.loads(resp.data)
            finally:
                resp.release_conn()
        except ApiException as exc:
            if exc.status == 410 and cont:
                raise LiveSourceError(f"listing {kind.plural}: the list changed too much to go on after {given} "
                                      f"objects ({_status_message(exc)}); run again") from None
            raise LiveSourceError(f"listing {kind.plural}: {_describe(exc, host)}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise LiveSourceError(f"listing {kind.plural}: {_describe(exc, host)}") from None
        except orjson.JSONDecodeError as exc:
            raise LiveSourceError(f"listing {kind.plural}: the API server's answer is not JSON: {exc}") from None
        items = body.get("items") or [] if isinstance(body, dict) else []
        cont = ((body.get("metadata") or {}).get("continue") or None) if isinstance(body, dict) else None
        del body
        for obj in items:
            if isinstance(obj, dict):  # a list's items are objects; anything else is no object to give
                obj["kind"], obj["apiVersion"] = kind.kind, kind.api_version
                given += 1
                yield obj
        del items
        if not cont:
            return


def _status_message(exc: ApiException) -> str:
    """``HTTP 403 Forbidden: <Status.message>`` from an ApiException."""
    message = ""
    try:
        body = orjson.loads(exc.body or b"")
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    except orjson.JSONDecodeError:
        message = (exc.body or "").strip()[:200] if isinstance(exc.body, str) else ""
    head = f"HTTP {exc.status} {exc.reason or ''}".strip()
    return f"{head}: {message}" if message else head


def _describe(exc: BaseException, host: str) -> str:
    """One line naming why the API could not be used (becomes the /readyz reason)."""
    if isinstance(exc, ApiException):
        if exc.status == 0:  # the client wraps TLS failures this way
            return f"cannot reach the API server at {host}: {str(exc.reason).splitlines()[-1]}"
        return _status_message(exc)
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        # "...: Failed to establish a new connection: [Errno 111] Connection refused" -> the errno part
        text = str(exc).rsplit("Failed to establish a new connection: ", 1)[-1]
        return f"cannot reach the API server at {host}: {text}"
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):
        return f"cannot reach the API server at {host}: {type(exc).__name__}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: urllib3's ``reason`` and ``args``, ``__cause__`` and ``__context__``."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        reason = getattr(e, "reason", None)
        todo += [reason if isinstance(reason, BaseException) else None, e.__cause__, e.__context__]
        todo += [a for a in e.args if isinstance(a, BaseException)]


# errnos of a connection the peer (or something on the way) closed or reset: one reason, however urllib3 and
# http.client word it ("Connection aborted.", "Connection broken: ...", "Response ended prematurely",
# "Remote end closed connection without response", a TLS EOF).
_RESET_ERRNOS = {errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED}
_RESET_TYPES = (http.client.RemoteDisconnected, http.client.IncompleteRead, ssl.SSLEOFError, ssl.SSLZeroReturnError,
                urllib3.exceptions.ProtocolError, urllib3.exceptions.InvalidChunkLength)


def _retry_after(exc: ApiException) -> float | None:
    """What an error answer asks the client to wait: its Retry-After header (seconds), or its Status'
    ``details.retryAfterSeconds`` (k8s.io/apimachinery/pkg/api/errors: a 429 or a 503 carries both)."""
    value = (exc.headers or {}).get("Retry-After") if hasattr(exc.headers or {}, "get") else None
    try:
        if value is not None:
            return float(value)
    except ValueError:
        pass   # an HTTP-date: the API server never sends one
    try:
        body = orjson.loads(exc.body or b"")
    except orjson.JSONDecodeError:
        return None
    return _status_retry_after(body)


def _status_retry_after(status: object) -> float | None:
    details = status.get("details") if isinstance(status, dict) else None
    value = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _failure(exc: BaseException, host: str, silence: float) -> Failure:
    """A failed attempt as a ``Failure``: its reason (what makes two failures one), a line for people, whether
    the API server answered, what it asked us to wait. ``silence``: the seconds since the kind's last data."""
    if isinstance(exc, ApiException) and exc.status:
        return Failure(f"HTTP {exc.status}", _status_message(exc), answered=True, retry_after=_retry_after(exc))
    if isinstance(exc, _APIError):
        return Failure(f"watch error {exc.code}", str(exc), answered=True, retry_after=exc.retry_after)
    if isinstance(exc, orjson.JSONDecodeError):
        return Failure("not JSON", f"the API server's answer is not JSON: {exc}", answered=True)
    where = f"cannot reach the API server at {host}"
    causes = list(_causes(exc))
    if any(_timed_out(c) for c in causes):
        # A read deadline, or a connect that got no answer: either way nothing came for that long.
        return Failure(NO_DATA, f"no data from the API server at {host} for {seconds(silence)}", answered=False)
    for c in causes:
        if isinstance(c, ssl.SSLCertVerificationError):
            return Failure("TLS certificate", f"{where}: {c.verify_message or c}", answered=False)
        if isinstance(c, socket.gaierror):
            return Failure("name resolution", f"{where}: {c}", answered=False)
        if isinstance(c, OSError) and c.errno == errno.ECONNREFUSED:
            return Failure("connection refused", f"{where}: {c}", answered=False)
        if (isinstance(c, OSError) and c.errno in _RESET_ERRNOS) or isinstance(c, _RESET_TYPES):
            return Failure("connection reset", f"{where}: {_reset_words(causes)}", answered=False)
    for c in causes:
        if isinstance(c, OSError) and c.errno:
            return Failure(errno.errorcode.get(c.errno, str(c.errno)), f"{where}: {c}", answered=False)
    if isinstance(exc, ApiException):   # status 0: the client wraps TLS failures so
        return Failure("TLS", _describe(exc, host), answered=False)
    return Failure(type(exc).__name__, _describe(exc, host), answered=False)


def _timed_out(exc: BaseException) -> bool:
    # urllib3's NewConnectionError (refused, unreachable) is a ConnectTimeoutError by inheritance only.
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        return False
    return isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError))


def _reset_words(causes: list[BaseException]) -> str:
    """The plainest words of a reset among its wrappings ("[Errno 104] Connection reset by peer")."""
    for c in causes:
        if isinstance(c, OSError) and c.errno in _RESET_ERRNOS:
            return str(c)
    return "the connection was closed before the answer ended"


def _forget(exc: BaseException) -> None:
    """Drop what a failed attempt's exceptions hold: urllib3's frames keep the connection (and its socket) in
    reference cycles that only the cyclic garbage collector would free, so a reset storm grew the open files by
    a hundred between its runs. Cleared, the socket closes as the exception goes."""
    for e in _causes(exc):
        traceback.clear_frames(e.__traceback__)


def _lines(resp: urllib3.HTTPResponse) -> Iterator[bytes]:
    """NDJSON lines of a watch stream as they arrive (an event may span chunks).

    Written by hand because ``kubernetes.watch.Watch().stream(..., deserialize=False)`` (37.0.2) raises
    KeyError('raw_object') on an ERROR event (the 410 we must relist on) and does not track the
    resourceVersion without deserializing into models, which is the cost we avoid.
    """
    buf = b""
    for chunk in resp.stream(65536, decode_content=True):
        buf += chunk
        while (i := buf.find(b"\n")) >= 0:
            line, buf = buf[:i], buf[i + 1:]
            if line.strip():
                yield line
    if buf.strip():
        yield buf


class _Reflector:
    """List + watch of one kind into the state; runs in its own thread until the stop event is set."""

    def __init__(self, source: LiveSource, kind: Kind, field_selector: str | None,
                 namespace: str | None, name: str | None) -> None:
        self.source = source
        self.kind = kind
        self.field_selector = field_selector
        self.namespace = namespace
        self.name = name  # keep only this object (the one ConfigMap), even if the server sends more
        # The apiserver enforces the built-in kinds' schemas; a CRD may preserve unknown fields, so those
        # objects are checked here and kept marked invalid (the rules fail closed on them).
        self.checked = kind.kind in CUSTOM_KINDS
        self.status = KindStatus()
        self.call = _list_function(source.api_client, kind, namespace)
        self.timing = source.timing
        self.backoff = Backoff(source.timing)
        self.report = KindReport(source.timing.summary_every)
        self.started = time.monotonic()
        self.current_at: float | None = None   # time.monotonic() of the last list, event, bookmark, watch open or end
        self._active: urllib3.HTTPResponse | None = None
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self.run, name=f"live-{kind.kind}", daemon=True)

    @property
    def label(self) -> str:
        return self.kind.kind

    # -- loop -----------------------------------------------------------------------------
    def run(self) -> None:
        src = self.source
        rv: str | None = None
        expired_in_a_row = 0
        quiet = 0
        while not src._stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                rv, events, early = self._watch(rv)
                expired_in_a_row = 0
                # a watch the server ends long before its timeout with nothing in it must not become a busy loop
                if events == 0 and early:
                    quiet += 1
                    if src._stop.wait(self.timing.delay(quiet, False, random.random())):
                        break
                else:
                    quiet = 0
            except _Expired as exc:
                rv = None
                self.status.relists_after_410 += 1
                expired_in_a_row += 1
                log.warning("%s: %s; relisting", self.label, exc)
                # a server that keeps answering 410 must not turn this into a busy loop
                if expired_in_a_row > 1 and src._stop.wait(
                        self.timing.delay(expired_in_a_row - 1, False, random.random())):
                    break
            except Exception as exc:
                if src._stop.is_set():
                    break
                failure = _failure(exc, src.host, time.monotonic() - (self.current_at or self.started))
                _forget(exc)
                del exc
                if failure.silent:
                    rv = None   # a watch gone silent proves nothing about what it missed: list again
                elif rv is not None:
                    # Resume from the last event applied, not from where the failed watch began: that one may
                    # be compacted away by now (a 410 and a full relist after every reset of a long watch).
                    rv = self.status.resource_version or rv
                self._failed(failure)
                if src._stop.wait(self.backoff.failed(failure, random.random())):
                    break

    def _failed(self, failure: Failure) -> None:
        now = time.monotonic()
        self.status.errors += 1
        self.status.last_error = failure.text
        self.status.failing = failure.reason
        self.status.silent = self.status.silent or failure.silent
        if not self.status.synced:
            self.source.state.mark_unsynced(self.kind.kind, failure.text)
        self.source._outage_failed(self.kind.kind, failure.reason, now)
        if self.report.failed(failure, now):
            log.warning("%s", failed_line(self.label, failure, self.status.synced, self.status.resource_version))
        else:
            log.debug("%s: attempt %d failed: %s", self.label, self.report.run, failure.text)

    def _recovered(self, listed: tuple[int, str] | None = None) -> str | None:
        """The API server answered (a list completed, ``listed``: its count and resourceVersion; or a watch
        opened). The backoff starts over; the line that says the kind recovered when its failures were said
        (None otherwise)."""
        now = time.monotonic()
        self.backoff.succeeded()
        age = now - self.current_at if self.current_at is not None else None
        run = self.report.recovered(now)
        if self.status.failing is not None:
            self.source._outage_recovered(self.kind.kind)
        self.status.last_error = self.status.failing = None
        self.status.silent = False
        if run is None:
            return None
        lasted, silent = run
        return recovered_line(self.label, lasted, silent, age, listed, first=not self.status.synced)

    def _current(self) -> None:
        self.current_at = now = time.monotonic()
        self.source.state.mark_current(self.kind.kind, now)

    # -- list -----------------------------------------------------------------------------
    def _query(self) -> dict[str, Any]:
        return {"field_selector": self.field_selector} if self.field_selector else {}

    def _open(self, read_timeout: float, **kw: Any) -> urllib3.HTTPResponse:
        try:
            return self.call(_request_timeout=(self.timing.connect_timeout, read_timeout), **self._query(), **kw)
        except ApiException as exc:
            if exc.status == 410:
                raise _Expired(_status_message(exc)) from None
            raise

    def _list(self) -> str:
        items: list[dict[str, Any]] = []
        invalid: dict[Key, str] = {}
        cont: str | None = None
        while True:
            kw: dict[str, Any] = {"limit": self.source.page_size}
            if cont:
                kw["_continue"] = cont
            try:
                resp = self._open(self.timing.list_read_timeout, **kw)
            except _Expired as exc:
                if not cont:
                    raise
                # an expired continue token: a consistent list must start over
                log.warning("%s: list continue token expired (%s); restarting the list", self.label, exc)
                self.status.relists_after_410 += 1
                items, invalid, cont = [], {}, None
                if self.source._stop.is_set():
                    raise
                continue
            body = orjson.loads(_read_all(resp))
            # Page by page, so that only one page of whole objects is held at a time. Pages of 100 (client-go
            # lists 500): a page of whole objects weighs several times what is kept of it, and the memory a
            # larger page spreads over stays resident after the sync (bench/state_memory.py; docs/benchmarks.md,
            # "Figures behind the code's comments"), for a few more requests to the apiserver, once at start.
            for o in body.get("items") or []:
                if self._wanted(o):
                    obj, why = self._taken(o)
                    items.append(obj)
                    if why is not None:
                        invalid[object_key(obj)] = why
            meta = body.get("metadata") or {}
            del body
            cont = meta.get("continue") or None
            if not cont:
                break
        rv = str(meta.get("resourceVersion") or "")
        said = self._recovered((len(items), rv))
        self.source.state.replace(self.kind.kind, items, invalid)
        now = time.monotonic()
        self.current_at = now
        self.source.state.mark_listed(self.kind.kind, now, time.time())
        self.status.lists += 1
        self.status.resource_version = rv
        first = not self.status.synced
        if first:
            self.status.synced = True
            self.source.state.mark_synced(self.kind.kind)
        if said is not None:
            log.info("%s", said)
        elif first:
            log.info("%s: synced %d objects (resourceVersion %s)", self.label, len(items), rv)
        else:
            log.info("%s: relisted %d objects (resourceVersion %s)", self.label, len(items), rv)
        return rv

    def _fill(self, obj: dict[str, Any]) -> dict[str, Any]:
        # list items come without kind/apiVersion; the rules and the agent expect whole objects
        obj["kind"] = self.kind.kind
        obj["apiVersion"] = self.kind.api_version
        return obj

    def _taken(self, obj: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """What the state holds of an object from the API (only what is read of it), and why it must not be
        used; checked whole, before anything is left out."""
        whole = self._fill(obj)
        return kept(self.kind.kind, whole), self._check(whole)

    def _wanted(self, obj: dict[str, Any]) -> bool:
        return self.name is None or (obj.get("metadata") or {}).get("name") == self.name

    def _check(self, obj: dict[str, Any]) -> str | None:
        """Why ``obj`` must not be used (unknown fields, or the one judgement the files source makes too:
        ``intake.judge``), logged once per object and reason; None if fine."""
        why = (check(obj) if self.checked else None) or judge(obj).reason
        key = object_key(obj)
        # The state holds the marks this reflector set (replace and delete clear what left the cluster).
        if why != self.source.state.invalid(self.kind.kind).get(key):
            name = f"{key[0]}/{key[1]}" if key[0] else key[1]
            if why is not None:
                log.warning("%s %s: %s; not applied until it is fixed", self.label, name, why)
            else:
                log.info("%s %s: fixed, applied again", self.label, name)
        return why

    # -- watch ----------------------------------------------------------------------------
    def _watch(self, rv: str) -> tuple[str, int, bool]:
        """Apply events until the watch ends; returns the resourceVersion to resume from, the event count, and
        whether the server ended it long before its timeout.

        The API server ends a watch at its ``timeoutSeconds``, and sends nothing before that on a kind where
        nothing changes (a bookmark only once its watch cache has moved past the watch's resourceVersion:
        docs/benchmarks.md, "bench/live_staleness.py"). So the read deadline sits just above the timeout: past
        it, no byte means a dead connection, never a quiet kind (``Timing``)."""
        src = self.source
        timeout = self.timing.watch_seconds(random.random())
        resp = self._open(self.timing.watch_deadline(timeout), watch=True, allow_watch_bookmarks=True,
                          resource_version=rv, timeout_seconds=timeout)
        opened = time.monotonic()
        with self._lock:
            if src._stop.is_set():
                resp.close()
                return rv, 0, False
            self._active = resp
        self.status.watches += 1
        said = self._recovered()
        if said is not None:
            log.info("%s", said)
        # Opened from the last resourceVersion applied, the watch sends at once whatever came after it, so the cache
        # is current again now. A middlebox that cuts quiet connections before the server's timeoutSeconds (an
        # HAProxy with "timeout client 20s") then costs a reconnect, not an ever older cache.
        self._current()
        state, kind = src.state, self.kind.kind
        events = 0
        ended = False
        try:
            for line in _lines(resp):
                if src._stop.is_set():
                    break
                event = orjson.loads(line)
                events += 1
                self._current()
                etype = event.get("type")
                obj = event.get("object") or {}
                self.status.events[etype] = self.status.events.get(etype, 0) + 1
                if etype == "ERROR":
                    message = f"watch error {obj.get('code')} {obj.get('reason')}: {obj.get('message')}"
                    if obj.get("code") == 410:
                        raise _Expired(message)
                    raise _APIError(message, obj.get("code"), _status_retry_after(obj))
                if etype in ("ADDED", "MODIFIED"):
                    if self._wanted(obj):
                        state.upsert(kind, *self._taken(obj))
                elif etype == "DELETED":
                    state.delete(kind, obj)
                new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                if new_rv:
                    rv = new_rv
                    self.status.resource_version = rv
            else:
                # The end of the stream (the last chunk): the server had sent everything up to now.
                ended = not src._stop.is_set()
        except (urllib3.exceptions.HTTPError, OSError):
            if not src._stop.is_set():
                raise
        finally:
            with self._lock:
                self._active = None
            if ended:
                resp.release_conn()   # read to its end: the connection serves the next watch
            else:
                resp.close()          # broken, or left part-read: close it now, never back into the pool
                resp.release_conn()
        if ended:
            self._current()
        return rv, events, ended and time.monotonic() - opened < timeout / 2

    def interrupt(self) -> None:
        """Unblock a watch read from another thread (stop())."""
        with self._lock:
            resp = self._active
            if resp is None:
                return
            try:
                resp.shutdown()  # urllib3 >= 2.3
            except (AttributeError, ValueError, RuntimeError, OSError):
                sock = getattr(getattr(resp, "connection", None), "sock", None)
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)


class LiveSource:
    """Keeps a ClusterState in step with the API server (list + watch per kind)."""

    def __init__(self, state: ClusterState, kubeconfig: str | None = None,
                 kinds: list[str] | tuple[str, ...] | None = None,
                 field_selectors: dict[str, str] | None = None,
                 config_map: tuple[str, str] = (SLO_CONFIG_NAMESPACE, SLO_CONFIG_NAME),
                 page_size: int = 100, api_client: k8s.ApiClient | None = None,
                 timing: Timing | None = None) -> None:
        self.state = state
        self.kubeconfig = kubeconfig
        self.kinds = tuple(kinds if kinds is not None else state.kinds)
        for k in self.kinds:
            if k not in KINDS:
                raise LiveSourceError(f"unknown kind {k!r}; known kinds: {', '.join(KINDS)}")
            if k not in state.kinds:
                raise LiveSourceError(f"kind {k!r} is not held by this cluster state ({', '.join(state.kinds)})")
        self.field_selectors = dict(field_selectors or {})
        for k in self.field_selectors:
            if k not in ("Pod", "Node"):
                raise LiveSourceError(f"field selectors are supported for Pod and Node, not {k!r}")
        self.config_map = config_map
        self.page_size = int(page_size)
        self.timing = timing or Timing()
        if api_client is None:
            cfg = _client_configuration(kubeconfig)
            cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, len(self.kinds) + 2)
            # No retries inside urllib3: every failed attempt comes back to the reflector, which waits and tries
            # again by its own backoff and logs by its own rules. urllib3's would each log a warning with the
            # request's URL (a reset storm: a thousand lines in three minutes) and leave the failed connection
            # in garbage the reflector never sees (_forget).
            cfg.retries = False
            api_client = k8s.ApiClient(cfg)
            api_client.user_agent = "colocation-webhook/live-source"
        self.api_client = api_client
        self.host = api_client.configuration.host
        self._stop = threading.Event()
        self._outage = Outage(self.timing.summary_every, self.kinds)
        self._outage_lock = threading.Lock()
        self._summaries = threading.Thread(target=self._summarize, name="live-summary", daemon=True)
        self._reflectors: dict[str, _Reflector] = {}
        for k in self.kinds:
            if k == "ConfigMap":
                ns, name = config_map
                r = _Reflector(self, KINDS[k], f"metadata.name={name}", ns, name)
            else:
                r = _Reflector(self, KINDS[k], self.field_selectors.get(k), None, None)
            self._reflectors[k] = r

    def status(self) -> dict[str, KindStatus]:
        return {k: r.status for k, r in self._reflectors.items()}

    # -- the summary while any kind fails -------------------------------------------------------
    def _outage_failed(self, kind: str, reason: str, now: float) -> None:
        with self._outage_lock:
            self._outage.failed(kind, reason, now, time.time())

    def _outage_recovered(self, kind: str) -> None:
        with self._outage_lock:
            self._outage.recovered(kind)

    def _summarize(self) -> None:
        tick = min(1.0, self.timing.summary_every / 20)
        while not self._stop.wait(tick):
            with self._outage_lock:
                summary = self._outage.due(time.monotonic())
            if summary is not None:
                log.warning("%s", summary_line(summary, self.host, len(self.kinds)))

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        log.info("live cluster state from %s: %s", self.host, ", ".join(
            f"{k} ({r.field_selector})" if r.field_selector else k for k, r in self._reflectors.items()))
        for r in self._reflectors.values():
            r.thread.start()
        self._summaries.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for r in self._reflectors.values():
            r.interrupt()
        for r in self._reflectors.values():
            if r.thread.is_alive():
                r.thread.join(timeout=timeout)
                if r.thread.is_alive():
                    log.warning("%s: reflector did not stop within %.0fs", r.label, timeout)
        if self._summaries.is_alive():
            self._summaries.join(timeout=timeout)
