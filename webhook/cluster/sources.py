"""Choosing and starting the cluster-state source from command-line flags (both programs)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Protocol

from webhook.cluster.files import FilesSource
from webhook.cluster.live import LiveSource, LiveSourceError
from webhook.cluster.state import SLO_CONFIG_NAME, SLO_CONFIG_NAMESPACE, ClusterState

__all__ = ["LiveSourceError", "Source", "build_source", "describe", "example_folder", "in_cluster"]


class Source(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


def example_folder() -> Path:
    """The embedded example state shipped in the package."""
    return Path(str(resources.files("webhook.cluster") / "example"))


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def describe(cluster_state: Path | None, kubeconfig: str | None) -> str:
    if cluster_state is not None:
        return f"files from {cluster_state}"
    if kubeconfig:
        return f"live cluster via {kubeconfig}"
    if in_cluster():
        return "live cluster via in-cluster config"
    return f"embedded example state ({example_folder()})"


def build_source(state: ClusterState, cluster_state: Path | None, kubeconfig: str | None,
                 watch_files: bool = True, kinds: tuple[str, ...] | None = None,
                 field_selectors: dict[str, str] | None = None,
                 config_map: tuple[str, str] = (SLO_CONFIG_NAMESPACE, SLO_CONFIG_NAME),
                 use_in_cluster: bool | None = None) -> Source:
    """Load files synchronously (StateFileError is the caller's to report) or set up a live source.

    With neither flag: in-cluster config when ``use_in_cluster`` (None: when KUBERNETES_SERVICE_HOST is set),
    else the example state.
    """
    live_here = in_cluster() if use_in_cluster is None else use_in_cluster
    if cluster_state is None and not kubeconfig and not live_here:
        src = FilesSource(example_folder(), state)
        src.load()
        return _NoWatch(src)
    if cluster_state is not None:
        src = FilesSource(cluster_state, state)
        src.load()
        return src if watch_files else _NoWatch(src)
    return LiveSource(state, kubeconfig=kubeconfig, kinds=kinds, field_selectors=field_selectors,
                      config_map=config_map)


class _NoWatch:
    def __init__(self, src: FilesSource) -> None:
        self.src = src

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass
