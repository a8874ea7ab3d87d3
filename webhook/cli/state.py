"""What the webhook's commands that answer as the server would share (serve, review, audit, policies): the flags
that decide an answer, the Settings made of them, and the cluster state they read."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from webhook.cli.common import UsageError, list_first, positive, stderr_warning, unverified_tls

if TYPE_CHECKING:
    from webhook.admission.context import Settings
    from webhook.cluster.sources import Source
    from webhook.cluster.state import ClusterState


def review_settings_flags(p: argparse.ArgumentParser) -> None:
    """What decides an answer, given to ``serve``, ``review`` and ``audit`` alike (they answer as the server
    would)."""
    from webhook.admission.context import MAX_CONTAINERS, MAX_PATCH_BYTES

    p.add_argument("--quota-config", type=Path, metavar="F",
                   help="the apiserver's AdmissionConfiguration (ResourceQuota limitedResources) for quota presence")
    p.add_argument("--on-rule-error", choices=("allow", "deny"), default="allow",
                   help="a rule that raises: allow the review with a warning naming the rule (fail-open, as "
                        "failurePolicy Ignore asks), or deny it with a 500 (fail-closed)")
    p.add_argument("--max-containers", type=positive, default=MAX_CONTAINERS, metavar="N",
                   help="a pod with more containers (init, regular and ephemeral together) is denied with a 400")
    p.add_argument("--max-patch-bytes", type=positive, default=MAX_PATCH_BYTES, metavar="N",
                   help="a review whose JSONPatch would be larger is denied with a 400")


def review_settings(args: argparse.Namespace) -> Settings:
    """The Settings of ``review_settings_flags``; an unusable --quota-config is a UsageError."""
    from webhook.admission.context import Settings
    from webhook.admission.quota_config import QuotaConfigError, load_quota_config

    settings = Settings(on_rule_error=args.on_rule_error, max_containers=args.max_containers,
                        max_patch_bytes=args.max_patch_bytes)
    if args.quota_config is None:
        return settings
    try:
        settings.limited_resources = load_quota_config(args.quota_config)
    except QuotaConfigError as exc:
        raise UsageError(f"--quota-config: {exc}") from None
    return settings


def cluster_state(cluster_state: Path | None, kubeconfig: str | None = None, watch: bool = False,
                  use_in_cluster: bool | None = None,
                  say: Callable[[str], None] | None = None) -> tuple[ClusterState, Source]:
    """The webhook's kinds of state and the source that fills them, not started: a folder, a cluster, or the
    embedded example; an unusable folder or kubeconfig is a UsageError. ``say``: where a warning about the
    kubeconfig goes (default: a stderr line)."""
    from webhook.cluster.files import StateFileError
    from webhook.cluster.sources import LiveSourceError, build_source
    from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

    warn = say or stderr_warning("colocation-webhook")
    unverified_tls(kubeconfig, warn)
    state = ClusterState(WEBHOOK_KINDS)
    try:
        source = build_source(state, cluster_state, kubeconfig, watch_files=watch, use_in_cluster=use_in_cluster)
    except StateFileError as exc:
        raise UsageError(f"--cluster-state: {exc}") from None
    except LiveSourceError as exc:
        raise UsageError(str(exc)) from None
    if cluster_state is not None and not any(state.counts().values()):
        # A readable folder is a state, an empty one too (docs/cluster-state.md); but a wrong path is the likelier
        # intent than a cluster without a class, namespace or profile.
        warn(f"--cluster-state {cluster_state}: holds no object the cluster state reads: the rules see an empty "
             "cluster (no PriorityClass, Namespace, quota or profile)")
    return state, source


def listed_state(cluster_state_dir: Path | None, kubeconfig: str | None, in_cluster: bool,
                 sync_timeout: float) -> tuple[ClusterState, Source | None]:
    """The embedded example state unless a folder or a cluster is asked for; a cluster is listed (every kind
    synced) before the offline commands answer, and its source is the caller's to stop."""
    live = bool(kubeconfig or in_cluster)
    state, source = cluster_state(cluster_state_dir, kubeconfig, use_in_cluster=in_cluster)
    if not live:
        return state, None
    list_first(state, source, sync_timeout, f"--kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config")
    return state, source
