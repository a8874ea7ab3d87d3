"""Acting on the cluster through the official kubernetes client: evictions, events, node status.

``API_CALLS`` names every API write the agent makes; the deployment derives its RBAC from it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

log = logging.getLogger(__name__)

# (apiGroup, resource, verb) for every write below.
API_CALLS: list[tuple[str, str, str]] = [
    ("", "pods/eviction", "create"),
    ("", "events", "create"),
    ("", "nodes/status", "patch"),
]
COMPONENT = "colocation-agent"
SMP = "application/strategic-merge-patch+json"


class EvictOutcome(StrEnum):
    EVICTED = "evicted"
    BLOCKED = "blocked"        # 429: a PodDisruptionBudget (or the API's rate limit) said no
    GONE = "gone"              # 404: the pod no longer exists
    CONFLICT = "conflict"      # 409: same name, different UID (recreated)
    FAILED = "failed"          # anything else (5xx, network)


@dataclass(frozen=True, slots=True)
class EvictResult:
    outcome: EvictOutcome
    code: int | None = None
    message: str = ""


_OUTCOMES = {201: EvictOutcome.EVICTED, 200: EvictOutcome.EVICTED, 429: EvictOutcome.BLOCKED,
             404: EvictOutcome.GONE, 409: EvictOutcome.CONFLICT}


def _status_message(exc: Any) -> str:
    import json

    try:
        return str(json.loads(exc.body).get("message") or exc.reason)
    except (TypeError, ValueError, AttributeError):
        return str(getattr(exc, "reason", exc))


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeActions:
    """The agent's writes; every call returns or logs, never raises into the control loop."""

    def __init__(self, api_client: Any, node_name: str, timeout: float = 5.0, connect_timeout: float = 1.0) -> None:
        from kubernetes import client

        self._client = client
        self.core = client.CoreV1Api(api_client)
        self.node_name = node_name
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        # Set when a call could not reach the API server; until ``begin_cycle``, later calls fail at once, so a
        # cycle pays one timeout, not one per eviction candidate, and goes on with the node's own work.
        self.unreachable: str | None = None
        self._warm()

    def _warm(self) -> None:
        """The client checks arguments with validators it builds on a method's first call (4 ms for the
        eviction): build them now, with arguments it refuses before any request, not when a node is short of
        memory."""
        for call, args in ((self.core.create_namespaced_pod_eviction, (None, None, None)),
                           (self.core.create_namespaced_event, (None, None)),
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

    def event(self, involved: dict[str, Any], reason: str, message: str, type_: str = "Warning") -> bool:
        """A core/v1 Event about ``involved`` (kind, namespace, name, uid, apiVersion)."""
        namespace = involved.get("namespace") or "default"
        if self.unreachable is not None:
            return False
        stamp = _now_rfc3339()
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{involved['name']}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason, "message": message,
            "source": {"component": COMPONENT, "host": self.node_name},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1, "type": type_,
            "reportingComponent": COMPONENT, "reportingInstance": self.node_name,
        }
        try:
            # A raw dict body, which the client sends as is (its hints ask for a CoreV1Event model).
            core: Any = self.core
            resp: Any = core.create_namespaced_event(namespace, body, _preload_content=False,
                                                     _request_timeout=self._timeouts())
            resp.read()
            return True
        except Exception as exc:  # an event is best effort
            api = isinstance(exc, self._client.ApiException)
            log.warning("cannot record event %s on %s/%s: %s", reason, namespace, involved.get("name"),
                        _status_message(exc) if api else self._network_error(exc))
            return False

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

    loaders: Any = config  # the kubernetes package ships no type hints for its config loaders
    cfg = type.__call__(client.Configuration)   # a fresh one, not a copy of the process-wide default
    # A connection that cannot be made is not retried: the cycle's one short timeout is enough to know.
    cfg.retries = urllib3.Retry(total=3, connect=0)
    if kubeconfig:
        return loaders.new_client_from_config(config_file=kubeconfig, client_configuration=cfg)
    loaders.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)
