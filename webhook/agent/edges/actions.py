"""Acting on the cluster through the official kubernetes client: evictions, events.k8s.io/v1 Events, node status.

``API_CALLS`` names every API write the agent makes; the deployment derives its RBAC from it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from webhook.agent.domain.event_series import Create, EventKey, Patch, Regarding, SeriesBook
from webhook.agent.domain.eviction import EvictOutcome, EvictResult

log = logging.getLogger(__name__)

# (apiGroup, resource, verb) for every write below.
API_CALLS: list[tuple[str, str, str]] = [
    ("", "pods/eviction", "create"),
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
    ("", "nodes/status", "patch"),
]
COMPONENT = "colocation-agent"      # the Events' reportingController
SMP = "application/strategic-merge-patch+json"
EVENTS_PATH = "/apis/events.k8s.io/v1/namespaces/{namespace}/events"
EVENT_PATH = EVENTS_PATH + "/{name}"


_OUTCOMES = {201: EvictOutcome.EVICTED, 200: EvictOutcome.EVICTED, 429: EvictOutcome.BLOCKED,
             404: EvictOutcome.GONE, 409: EvictOutcome.CONFLICT}


def _status_message(exc: Any) -> str:
    """The API's message for a failed call: its Status body's, else the HTTP reason."""
    return _message(getattr(exc, "body", None), str(getattr(exc, "reason", exc)))


def _message(data: bytes | str | None, default: str) -> str:
    """The ``message`` of a Status body, else ``default``."""
    try:
        return str(json.loads(data or b"").get("message") or default)
    except (TypeError, ValueError, AttributeError):
        return default


def _micro_time(seconds: float) -> str:
    """A metav1.MicroTime: RFC 3339 with exactly six fractional digits, UTC."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeActions:
    """The agent's writes; every call returns or logs, never raises into the control loop."""

    def __init__(self, api_client: Any, node_name: str, timeout: float = 5.0, connect_timeout: float = 1.0,
                 series: SeriesBook | None = None, wall: Callable[[], float] = time.time) -> None:
        from kubernetes import client

        self._client = client
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.node_name = node_name
        self.series = series or SeriesBook()
        self.wall = wall
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        # Set when a call could not reach the API server; until ``begin_cycle``, later calls fail at once, so a
        # cycle pays one timeout, not one per eviction candidate, and goes on with the node's own work.
        self.unreachable: str | None = None
        self._warm()

    def _warm(self) -> None:
        """The client checks arguments with validators it builds on a method's first call (milliseconds for the
        eviction: docs/benchmarks.md): build them now, with arguments it refuses before any request, not when a node
        is short of memory."""
        for call, args in ((self.core.create_namespaced_pod_eviction, (None, None, None)),
                           (self.core.patch_node_status, (None, None))):
            with contextlib.suppress(Exception):  # the validation error is the point
                call(*args)

    def begin_cycle(self) -> None:
        self.unreachable = None

    def _timeouts(self) -> tuple[float, float]:
        return self.connect_timeout, self.timeout

    def _network_error(self, exc: Exception) -> str:
        self.unreachable = str(exc) or type(exc).__name__
        return self.unreachable

    def evict(self, namespace: str, name: str, uid: str) -> EvictResult:
        """policy/v1 Eviction with the UID precondition, so PodDisruptionBudgets hold."""
        c = self._client
        if self.unreachable is not None:
            return EvictResult(EvictOutcome.FAILED, None, f"API server unreachable this cycle: {self.unreachable}")
        body = c.V1Eviction(
            api_version="policy/v1", kind="Eviction",
            metadata=c.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=c.V1DeleteOptions(preconditions=c.V1Preconditions(uid=uid)),
        )
        try:
            resp: Any = self.core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False,
                                                             _request_timeout=self._timeouts())
            resp.read()
            return EvictResult(EvictOutcome.EVICTED, getattr(resp, "status", 201))
        except c.ApiException as exc:
            return EvictResult(_OUTCOMES.get(exc.status, EvictOutcome.FAILED), exc.status, _status_message(exc))
        except Exception as exc:  # network errors: no more calls this cycle; the next one tries again
            return EvictResult(EvictOutcome.FAILED, None, self._network_error(exc))

    # -- events.k8s.io/v1 Events, repeats folded into a series ------------------------------------------
    def event(self, regarding: dict[str, Any], reason: str, note: str, action: str, type_: str = "Warning") -> bool:
        """Record that ``action`` happened to ``regarding`` (apiVersion, kind, namespace, name, uid) because of
        ``reason``: a new Event the first time, a patch of its series on a repeat (or nothing yet, when the
        repeat is folded until ``flush_events``). False when a write was needed and failed."""
        if self.unreachable is not None:
            return False
        ref = Regarding(str(regarding.get("apiVersion") or ""), str(regarding.get("kind") or ""),
                        str(regarding.get("namespace") or ""), str(regarding.get("name") or ""),
                        str(regarding.get("uid") or ""))
        key = EventKey(ref, reason, action)
        write = self.series.observe(key, self.wall(), self._event_name(ref), ref.namespace or "default", note,
                                    type_)
        return True if write is None else self._write(key, write)

    def flush_events(self) -> None:
        """Send the folded repeats whose patch is due (once per cycle is plenty)."""
        if self.unreachable is not None:
            return
        for key, write in self.series.due(self.wall()):
            if not self._write(key, write):
                return

    def _event_name(self, ref: Regarding) -> str:
        return f"{ref.name or ref.kind.lower()}.{time.time_ns():x}"   # client-go's <regarding>.<unix nanos>

    def _write(self, key: EventKey, write: Create | Patch) -> bool:
        ns = write.namespace
        if isinstance(write, Create):
            status, answer = self._request("POST", EVENTS_PATH, {"namespace": ns}, self._event_body(key, write))
        else:
            series = {"series": {"count": write.count, "lastObservedTime": _micro_time(write.last)}}
            status, answer = self._request("PATCH", EVENT_PATH, {"namespace": ns, "name": write.name}, series, SMP)
            if status == 404:    # the Event expired (the apiserver's event TTL): the series starts a new object
                again = self.series.gone(key, self._event_name(key.regarding))
                return again is not None and self._write(key, again)
        if 200 <= status < 300:
            if isinstance(write, Create):
                self.series.created(key, write, self.wall())
            else:
                self.series.patched(key, write, self.wall())
            return True
        self.series.failed(key, write)
        log.warning("cannot record event %s on %s %s/%s: %s", key.reason, key.regarding.kind, ns,
                    key.regarding.name, answer)
        return False

    def _event_body(self, key: EventKey, write: Create) -> dict[str, Any]:
        ref = key.regarding
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": write.name, "namespace": write.namespace},
            "eventTime": _micro_time(write.first),
            "reportingController": COMPONENT, "reportingInstance": self.node_name[:128],
            "action": key.action, "reason": key.reason, "note": write.note, "type": write.type,
            "regarding": {"apiVersion": ref.api_version, "kind": ref.kind, "namespace": ref.namespace,
                          "name": ref.name, "uid": ref.uid},
        }
        if write.count > 1:
            body["series"] = {"count": write.count, "lastObservedTime": _micro_time(write.last)}
        return body

    def _request(self, method: str, path: str, params: dict[str, str], body: dict[str, Any],
                 content_type: str = "application/json") -> tuple[int, str]:
        """One call with a raw JSON body, (status, the Status message or reason). The generated EventsV1Api would
        first turn the body into its model, whose datetime drops the microseconds a MicroTime must have."""
        api = self.api_client
        try:
            call = api.param_serialize(method=method, resource_path=path, path_params=params, body=body,
                                       header_params={"Accept": "application/json", "Content-Type": content_type},
                                       auth_settings=["BearerToken"])
            resp: Any = api.call_api(*call, _request_timeout=self._timeouts())
            data = resp.read()
        except Exception as exc:  # network errors: no more calls this cycle
            return 0, self._network_error(exc)
        status = int(resp.status)
        if 200 <= status < 300:
            return status, ""
        return status, f"HTTP {status}: {_message(data, str(getattr(resp, 'reason', '')))}"

    def patch_node_status(self, body: dict[str, Any]) -> bool:
        """Strategic-merge patch of ``nodes/<node>/status`` (batch resources, the BEMemoryPressure condition)."""
        if self.unreachable is not None:
            return False
        try:
            resp: Any = self.core.patch_node_status(self.node_name, body, _content_type=SMP, _preload_content=False,
                                               _request_timeout=self._timeouts())
            resp.read()
            return True
        except Exception as exc:
            api = isinstance(exc, self._client.ApiException)
            log.warning("cannot patch node %s status: %s", self.node_name,
                        _status_message(exc) if api else self._network_error(exc))
            return False


def api_client_for(kubeconfig: str | None) -> Any:
    """An ApiClient from a kubeconfig file, or the in-cluster service account when None."""
    import urllib3
    from kubernetes import client, config

    from webhook.cluster.kubeconfig import load_kubeconfig

    loaders: Any = config  # the kubernetes package ships no type hints for its config loaders
    cfg = type.__call__(client.Configuration)   # a fresh one, not a copy of the process-wide default
    # A connection that cannot be made is not retried: the cycle's one short timeout is enough to know.
    cfg.retries = urllib3.Retry(total=3, connect=0)
    if kubeconfig:
        load_kubeconfig(kubeconfig, cfg)     # as new_client_from_config, its certificates in memory
    else:
        loaders.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)
