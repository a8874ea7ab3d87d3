"""`colocation-agent once --kubeconfig`: the agent's live source against recorded API responses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.apiserver import ReplayAPIServer
from tests.cluster.test_live import write_kubeconfig


def test_once_over_a_live_cluster_uses_node_pods_and_config_from_the_api(tmp_path: Path) -> None:
    with ReplayAPIServer() as api:
        for name in ("nodes-list", "pods-list-field-selector-node", "configmaps-list-koordinator-system"):
            api.add_exchange(name)
        kubeconfig = write_kubeconfig(tmp_path, api.url)
        r = subprocess.run([sys.executable, "-m", "webhook.cli.agent", "once", "--node-name", "colo-node-1",
                            "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        lists = {(r.path, r.query.get("fieldSelector")) for r in api.received if "watch" not in r.query}
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["node"] == "colo-node-1"
    # The recorded node has 32Gi of memory: the watermark is computed against it, not this machine.
    assert out["memory"]["capacityBytes"] == 32 * 1024**3
    # The recorded ConfigMap enables colocation, so batch resources are computed (non-zero on 8 cores).
    assert out["batch"]["kubernetes.io/batch-cpu"] > 0
    assert {("/api/v1/nodes", "metadata.name=colo-node-1"), ("/api/v1/pods", "spec.nodeName=colo-node-1"),
            ("/api/v1/namespaces/koordinator-system/configmaps", "metadata.name=slo-controller-config")} <= lists
    assert "Traceback" not in r.stderr
