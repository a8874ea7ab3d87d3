"""What the capabilities that act on the cluster are given by the cycle, in one place."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from webhook.agent.coexistence import Coexistence
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions

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
