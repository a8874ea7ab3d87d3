"""Acting on the cluster through the official kubernetes client: evictions, events, node status.

``API_CALLS`` names every API write the agent makes; the deployment derives its RBAC from it.
"""

from __future__ import annotations

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

    def __init__(self, api_client: Any, node_name: str, timeout: float = 5.0) -> None:
        from kubernetes import client

        self._client = client
        self.core = client.CoreV1Api(api_client)
        self.node_name = node_name
        self.timeout = timeout

    def evict(self, namespace: str, name: str, uid: str) -> EvictResult:
        """policy/v1 Eviction with the UID precondition, so PodDisruptionBudgets hold."""
        c = self._client
        body = c.V1Eviction(
            api_version="policy/v1", kind="Eviction",
            metadata=c.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=c.V1DeleteOptions(preconditions=c.V1Preconditions(uid=uid)),
        )
        try:
            resp: Any = self.core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False,
                                                                  _request_timeout=self.timeout)
            resp.read()
            return EvictResult(EvictOutcome.EVICTED, getattr(resp, "status", 201))
        except c.ApiException as exc:
            return EvictResult(_OUTCOMES.get(exc.status, EvictOutcome.FAILED), exc.status, _status_message(exc))
        except Exception as exc:  # network errors: the next candidate or the next round will tell
            return EvictResult(EvictOutcome.FAILED, None, str(exc))

    def event(self, involved: dict[str, Any], reason: str, message: str, type_: str = "Warning") -> bool:
        """A core/v1 Event about ``involved`` (kind, namespace, name, uid, apiVersion)."""
        namespace = involved.get("namespace") or "default"
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
                                                     _request_timeout=self.timeout)
            resp.read()
            return True
        except Exception as exc:  # an event is best effort
            log.warning("cannot record event %s on %s/%s: %s", reason, namespace, involved.get("name"),
                        _status_message(exc) if isinstance(exc, self._client.ApiException) else exc)
            return False

    def patch_node_status(self, body: dict[str, Any]) -> bool:
        """Strategic-merge patch of ``nodes/<node>/status`` (batch resources, the BEMemoryPressure condition)."""
        try:
            resp: Any = self.core.patch_node_status(self.node_name, body, _content_type=SMP, _preload_content=False,
                                                    _request_timeout=self.timeout)
            resp.read()
            return True
        except Exception as exc:
            log.warning("cannot patch node %s status: %s", self.node_name,
                        _status_message(exc) if isinstance(exc, self._client.ApiException) else exc)
            return False


def api_client_for(kubeconfig: str | None) -> Any:
    """An ApiClient from a kubeconfig file, or the in-cluster service account when None."""
    from kubernetes import client, config

    loaders: Any = config  # the kubernetes package ships no type hints for its config loaders
    if kubeconfig:
        return loaders.new_client_from_config(config_file=kubeconfig)
    cfg = client.Configuration()
    loaders.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)
