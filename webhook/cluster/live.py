"""The ``live`` source: list + watch through the official kubernetes client (placeholder)."""

from __future__ import annotations

from typing import Any

from webhook.cluster.state import ClusterState


class LiveSource:
    def __init__(self, state: ClusterState, kubeconfig: str | None = None, **options: Any) -> None:
        self.state = state
        self.kubeconfig = kubeconfig

    def start(self) -> None:
        raise NotImplementedError("live source not implemented yet")

    def stop(self) -> None:
        pass
