"""The colocation stack on a real node (harness/real_node.py), for the real-node tier and its benchmark: the
Koordinator objects and the agent's RBAC applied, the webhook serving on loopback and registered (failurePolicy
Fail: no pod of the tier is admitted unchecked), and the agent run as the shipped DaemonSet runs it (its flags, a
token of its service account in a kubeconfig with the CA embedded, a read-only /tmp and working directory: the
DaemonSet's ``readOnlyRootFilesystem``), with the pods, measurements and waits they share."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness import real_node
from harness.real_apiserver import _free_port as free_port
from webhook.core.resources import BATCH_CPU

ROOT = Path(__file__).resolve().parents[1]
AGENT_NS, AGENT_SA = "colocation-system", "colocation-agent"
NS = "colo-node"
CGROUP = Path("/sys/fs/cgroup")
PROFILED = {"koordinator.sh/enable-colocation": "true"}     # what the tier's ClusterColocationProfile selects
LS = {"koordinator.sh/qosClass": "LS"}
BURN = "while :; do :; done"


def wait(what: str, ready: Callable[[], Any], seconds: float = 60, every: float = 0.25) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        got = ready()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds:.0f} s")
        time.sleep(every)


@dataclass
class Scene:
    node: real_node.Node
    folder: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    agent_started: float = 0.0
    metrics_port: int = 0

    # -- cluster objects ------------------------------------------------------------------------------------------
    def config(self, colocation: dict[str, Any], thresholds: dict[str, Any]) -> None:
        self.node.apply([{"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
                          "data": {"colocation-config": json.dumps(colocation),
                                   "resource-threshold-config": json.dumps({"clusterStrategy": thresholds})}}])

    def pod(self, name: str, *, priority: str | None = None, labels: dict[str, str] | None = None,
            resources: dict[str, Any] | None = None, command: str = "exec sleep 2147483647",
            memory_volume: bool = False, node_name: bool = False) -> dict[str, Any]:
        container: dict[str, Any] = {"name": "main", "image": real_node.IMAGE, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", command]}
        if resources:
            container["resources"] = resources
        spec: dict[str, Any] = {"hostNetwork": True, "automountServiceAccountToken": False,
                                "terminationGracePeriodSeconds": 2, "containers": [container],
                                "enableServiceLinks": False}
        if node_name:
            spec["nodeName"] = self.node.name
        if priority:
            spec["priorityClassName"] = priority
        if memory_volume:
            spec["volumes"] = [{"name": "mem", "emptyDir": {"medium": "Memory"}}]
            container["volumeMounts"] = [{"name": "mem", "mountPath": "/mem"}]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
               "spec": spec}
        self.node.kubectl("create", "-f", "-", input=json.dumps(pod))
        return dict(self.node.get("pod", "-n", NS, name))

    def running(self, name: str, seconds: float = 90) -> dict[str, Any]:
        last: dict[str, Any] = {}

        def ready() -> dict[str, Any] | None:
            last.update(self.node.get("pod", "-n", NS, name))
            return last if last.get("status", {}).get("phase") == "Running" else None
        try:
            return dict(wait(f"pod {name} Running", ready, seconds))
        except AssertionError as exc:
            events = self.node.kubectl("get", "events", "-n", NS, check=False).stdout
            raise AssertionError(f"{exc}: {json.dumps(last.get('status'))}\n{events}") from None

    def delete(self, *names: str) -> None:
        self.node.kubectl("delete", "pod", "-n", NS, *names, "--grace-period=1", "--wait=true", "--ignore-not-found",
                          timeout=120)

    def allocatable(self) -> dict[str, str]:
        return dict(self.node.get("node", self.node.name)["status"].get("allocatable") or {})

    def batch_cpu(self) -> int | None:
        raw = self.allocatable().get(BATCH_CPU)
        return None if raw is None else int(raw)

    # -- the agent ------------------------------------------------------------------------------------------------
    @property
    def agent_log(self) -> Path:
        return self.folder / "agent.log"

    def start_agent(self, kubeconfig: Path, metrics_port: int) -> None:
        """``colocation-agent run`` with the DaemonSet's flags, in a mount namespace whose /tmp and /var/tmp are
        read-only and whose working directory cannot be written (the DaemonSet's readOnlyRootFilesystem)."""
        argv = [sys.executable, "-m", "webhook.cli.agent", "run", "--node-name", self.node.name,
                "--proc-root", "/proc", "--cgroup-root", "/sys/fs/cgroup", "--disable=",
                "--kubeconfig", str(kubeconfig), "--metrics-port", str(metrics_port)]
        script = ("mount -t tmpfs -o ro,size=1m tmpfs /tmp && mount -t tmpfs -o ro,size=1m tmpfs /var/tmp "
                  "&& cd /proc && exec \"$@\"")
        env = {**os.environ, "PYTHONPATH": os.environ.get("COLOCATION_TEST_AGENT_TREE", str(ROOT))}
        with open(self.agent_log, "ab") as log:
            self.procs["agent"] = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "agent", *argv],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.agent_started, self.metrics_port = time.monotonic(), metrics_port

    def agent_lines(self, pattern: str) -> list[str]:
        return [line for line in self.agent_log.read_text(errors="replace").splitlines() if re.search(pattern, line)]

    def start_webhook(self) -> None:
        port, metrics = free_port(), free_port()
        certs = self.folder / "webhook-certs"
        with open(self.folder / "webhook.log", "ab") as log:
            self.procs["webhook"] = subprocess.Popen(
                [sys.executable, "-m", "webhook.cli.webhook", "serve", "--host", "127.0.0.1", "--port", str(port),
                 "--metrics-port", str(metrics), "--cert-dir", str(certs), "--drain-delay", "0",
                 "--kubeconfig", str(self.node.cluster.kubeconfig)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        ca = base64.b64encode(wait("the webhook's CA", lambda: (certs / "ca.crt").is_file() and
                                   (certs / "ca.crt").read_bytes(), 60)).decode()
        docs = [d for d in yaml.safe_load_all((ROOT / "manifests/base/webhook-configurations.yaml").read_text()) if d]
        for doc in docs:
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
                hook["failurePolicy"] = "Fail"     # a pod this tier creates is never admitted unchecked
                hook["timeoutSeconds"] = 10
        wait("the webhook ready", lambda: "ready" in (self.folder / "webhook.log").read_text() or
             self._readyz(port), 60)
        self.node.apply(docs)

    @staticmethod
    def _readyz(port: int) -> bool:
        import ssl
        import urllib.request

        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        for p in self.procs.values():
            real_node._stop(p)


def kustomized(path: Path, node: real_node.Node) -> list[dict[str, Any]]:
    text = node.kubectl("kustomize", str(path)).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def cpuacct(pod: dict[str, Any]) -> Path:
    return CGROUP / "cpuacct" / "kubepods" / "besteffort" / f"pod{pod['metadata']['uid']}" / "cpuacct.usage"


def cores(path: Path, seconds: float) -> float:
    before, t0 = int(path.read_text()), time.monotonic()
    time.sleep(seconds)
    return (int(path.read_text()) - before) / 1e9 / (time.monotonic() - t0)


def published(scene: Scene) -> list[dict[str, int]]:
    out = []
    # "published batch and mid resources" since mid is published; the older line too (COLOCATION_TEST_AGENT_TREE).
    for line in scene.agent_lines(r"published batch (and mid )?resources on "):
        found = re.search(r"published batch (?:and mid )?resources on \S+: (\{.*\})", line)
        if found:
            out.append({k: int(v) for k, v in json.loads(found.group(1).replace("'", '"')).items()})
    return out


def used_percent() -> float:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total, available = (int(info[k].split()[0]) for k in ("MemTotal", "MemAvailable"))
    return (total - available) * 100 / total


@contextmanager
def colocation(node: real_node.Node, colocation_config: dict[str, Any],
               thresholds: dict[str, Any]) -> Iterator[Scene]:
    """The stack on ``node``, with this slo-controller-config; the webhook and the agent stopped afterwards."""
    folder = node.folder / "scene"
    folder.mkdir()
    s = Scene(node, folder)
    try:
        koordinator = kustomized(ROOT / "manifests" / "koordinator", node)
        node.apply([d for d in koordinator if d["kind"] == "CustomResourceDefinition"])
        node.kubectl("wait", "--for=condition=Established", "crd/clustercolocationprofiles.config.koordinator.sh")
        node.apply([d for d in koordinator if d["kind"] != "CustomResourceDefinition"])
        s.config(colocation_config, thresholds)
        rbac = [d for d in yaml.safe_load_all((ROOT / "manifests/base/agent-rbac.yaml").read_text()) if d]
        node.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NS}}, *rbac])
        node.apply([{"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": NS, "labels": PROFILED}},
                    {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                     "metadata": {"name": "node-tier-profile"},
                     "spec": {"namespaceSelector": {"matchLabels": PROFILED}, "selector": {"matchLabels": PROFILED},
                              "qosClass": "BE", "priorityClassName": "koord-batch",
                              "labels": {"koordinator.sh/mutated": "true"}}}])
        s.start_webhook()
        token = node.kubectl("create", "token", AGENT_SA, "-n", AGENT_NS, "--duration=2h").stdout.strip()
        s.start_agent(node.token_kubeconfig(folder / "agent.kubeconfig", token), free_port())
        yield s
    finally:
        s.stop()




@dataclass(frozen=True)
class Eviction:
    """One memory eviction timed: seconds from the node crossing the watermark."""

    requested: float                # to the Eviction request (the agent's Event, stamped in microseconds)
    signalled: float | None         # to the kubelet stopping the container (its log; None: not found)
    killed: float                   # to the pod's processes gone from its cgroups (``sleep`` as PID 1 ignores
                                    # SIGTERM: the end of the grace period)
    gone: float                     # to the pod gone from the apiserver (its grace period, 2 s here)
    event: dict[str, Any]


def evict_a_holder(scene: Scene, name: str, colocation_config: dict[str, Any], thresholds: dict[str, Any],
                   hold_mib: int = 1536) -> Eviction:
    """A BE pod filling ``hold_mib`` of tmpfs (charged to its memory cgroup) past a watermark set 3 % above the
    node's usage; the watermark put back to ``thresholds`` afterwards."""
    total_kib = int(Path("/proc/meminfo").read_text().split()[1])
    threshold = math.ceil(used_percent()) + 3
    if threshold + 1 >= used_percent() + hold_mib * 1024 * 100 / total_kib:
        raise RuntimeError(f"{hold_mib} MiB cannot bring this node past {threshold} %")
    scene.config(colocation_config, {**thresholds, "memoryEvictThresholdPercent": threshold})
    time.sleep(3)    # the agent's watch has the new watermark
    pod = scene.pod(name, labels=PROFILED, memory_volume=True,
                    resources={"requests": {"cpu": "100m", "memory": "16Mi"},
                               "limits": {"cpu": "1", "memory": f"{hold_mib + 256}Mi"}},
                    command=f"dd if=/dev/zero of=/mem/fill bs=1M count={hold_mib} && exec sleep 2147483647")
    folder = CGROUP / "memory" / "kubepods" / "besteffort" / f"pod{pod['metadata']['uid']}"
    crossed, wall = wait("the node crossing the watermark",
                         lambda: used_percent() >= threshold and (time.monotonic(), time.time()), 120, every=0.005)

    def killed() -> float | None:
        try:
            return None if any(p.read_text().split() for p in folder.rglob("cgroup.procs")) else time.monotonic()
        except OSError:
            return time.monotonic()
    dead = wait(f"{name}'s processes gone", killed, 60, every=0.002)

    def gone() -> float | None:
        done = scene.node.kubectl("get", "pod", "-n", NS, name, "-o", "name", check=False)
        return time.monotonic() if done.returncode != 0 and "NotFound" in done.stderr else None
    removed = wait(f"{name} gone", gone, 60, every=0.02)
    events = scene.node.get("events.v1.events.k8s.io", "-n", NS)["items"]
    (event,) = [e for e in events if e.get("reason") == "evictPodSuccess" and e["regarding"]["name"] == name]
    requested = dt.datetime.fromisoformat(event["eventTime"].replace("Z", "+00:00")).timestamp()
    signalled = _kubelet_kill(scene.node, name)
    scene.config(colocation_config, thresholds)
    return Eviction(requested - wall, None if signalled is None else signalled - wall, dead - crossed,
                    removed - crossed, event)


def _kubelet_kill(node: real_node.Node, pod: str) -> float | None:
    """When the kubelet began stopping ``pod``'s container (klog's ``I1201 21:22:25.850510`` stamps, local time)."""
    found = None
    for line in real_node._tail(node.kubelet_log, 10**9).splitlines():
        if "Killing container with a grace period" in line and f'pod="{NS}/{pod}"' in line:
            found = line
    if found is None:
        return None
    stamp = dt.datetime.strptime(f"{dt.date.today().year}{found[1:21]}", "%Y%m%d %H:%M:%S.%f")
    return stamp.astimezone().timestamp()


@dataclass(frozen=True)
class Suppressed:
    alone: float                    # the BE burner's cores with nothing else on the node
    under: float                    # its cores while the LS burner burns
    ls: float                       # the LS burner's cores meanwhile
    quota: Path                     # the besteffort folder's cpu.cfs_quota_us


def suppress_a_burner(scene: Scene, window_seconds: float) -> Suppressed:
    """A BE burner (limit 2 cores) alone, then beside an LS burner once the besteffort quota is below a core;
    both burners are left running (``be-burner``, ``ls-burner``)."""
    scene.pod("be-burner", labels=PROFILED, command=BURN,
              resources={"requests": {"cpu": "100m", "memory": "16Mi"}, "limits": {"cpu": "2", "memory": "64Mi"}})
    be = scene.running("be-burner")
    time.sleep(window_seconds + 2)   # the usage window holds no other burner
    alone = cores(cpuacct(be), 5)
    scene.pod("ls-burner", priority="koord-prod", labels=LS, command=BURN,
              resources={"requests": {"cpu": "100m", "memory": "16Mi"}})
    ls = scene.running("ls-burner")
    quota = CGROUP / "cpu" / "kubepods" / "besteffort" / "cpu.cfs_quota_us"
    wait("the besteffort quota below one core", lambda: 0 < int(quota.read_text()) < 100000, 60, every=0.5)
    time.sleep(5)
    ls_usage = CGROUP / "cpuacct" / "kubepods" / "burstable" / f"pod{ls['metadata']['uid']}" / "cpuacct.usage"
    before, t0 = int(ls_usage.read_text()), time.monotonic()
    under = cores(cpuacct(be), 10)
    ls_cores = (int(ls_usage.read_text()) - before) / 1e9 / (time.monotonic() - t0)
    return Suppressed(alone, under, ls_cores, quota)
