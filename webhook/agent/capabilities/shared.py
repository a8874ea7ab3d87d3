"""What the capabilities that act on the cluster are given by the cycle, in one place, and the one way they evict."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from webhook.agent.coexistence import Coexistence
from webhook.agent.domain.eviction import EVENT_ACTION, EVENT_REASON_FAIL, EvictOutcome
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions

log = logging.getLogger("colocation-agent")

if TYPE_CHECKING:   # an edge: the type only (capabilities never import one, webhook.agent.capabilities.contract)
    from webhook.agent.edges.actions import KubeActions


class Shared:
    """The options, which capabilities run, the API actions (None: ``once``, which plans only) and the metrics."""

    def __init__(self, options: AgentOptions, coexistence: Coexistence, actions: KubeActions | None,
                 metrics: AgentMetrics) -> None:
        self.options = options
        self.coexistence = coexistence
        self.actions = actions
        self.metrics = metrics

    def writes_node(self, node: dict[str, Any] | None) -> bool:
        """Whether a change of ``node``'s status is made (there is an API to make it) or logged (a dry run)."""
        return node is not None and (self.actions is not None or self.options.dry_run)

    def evict(self, namespace: str, name: str, uid: str, reason: str, message: str, event_reason: str,
              figures: str) -> bool:
        """One eviction through the Eviction API, as every eviction capability makes it; whether the pod goes.
        Logged instead in a dry run, planned only without an API (``once``). Refused: logged, counted and, for a pod
        still there, an Event ``evictPodFail`` with the error; made: counted and an Event ``event_reason``.
        ``reason`` labels the metrics and the log (the feature); ``figures``: the pod's usage and the need."""
        if self.options.dry_run:
            log.info("dry-run: would evict %s/%s (uid %s, %s), reason %s: %s", namespace, name, uid, figures, reason,
                     message)
            return True
        if self.actions is None:
            return True   # planning only (``once``)
        result = self.actions.evict(namespace, name, uid)
        pod = {"kind": "Pod", "apiVersion": "v1", "namespace": namespace, "name": name, "uid": uid}
        if result.outcome is not EvictOutcome.EVICTED:
            log.warning("eviction of %s/%s %s (%s): %s", namespace, name, result.outcome.value, result.code,
                        result.message)
            self.metrics.eviction_failures.labels(reason, result.outcome.value).inc()
            if result.outcome is not EvictOutcome.GONE:   # no Event about a pod that is not there
                self.actions.event(pod, EVENT_REASON_FAIL, f"{message}, error {result.message or result.outcome}",
                                   EVENT_ACTION)
            return False
        log.info("evicted %s/%s (%s), reason %s", namespace, name, figures, reason)
        self.metrics.evictions.labels(reason).inc()
        self.actions.event(pod, event_reason, message, EVENT_ACTION)
        return True
