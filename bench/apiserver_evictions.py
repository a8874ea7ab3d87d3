#!/usr/bin/env python3
"""What the agent's eviction policies cost an eviction, measured on a real kube-apiserver.

An eviction (a CREATE of pods/<name>/eviction) is sent with ``?dryRun=All``: the apiserver runs the whole
admission chain on it (EvictionREST.Create calls createValidation before it looks at dryRun) and then deletes
nothing, so the same pod is evicted again and again. Each request's wall time is taken on a warm keep-alive
connection; what a policy adds is the p50 with it minus the p50 with no policy at the same namespace size, in the
same run (the machine is noisy: compare within a run).

Callers: the agent (a token bound to its pod on node A, evicting a pod of node A with its UID, as the agent does),
another service account with eviction rights (a plain token, as a drain's or the descheduler's), and the admin
(a client certificate). Policy sets:

- ``none``: no ValidatingAdmissionPolicy.
- ``default``: manifests/components/agent-node-policy as shipped (the node-status and the eviction policy; neither
  reads anything but the request).
- ``before``: that plus colocation-agent-eviction-node as issue 33 found it (the namespace's pods as params,
  ``parameterNotFoundAction: Deny``).
- ``opt-in``: that plus manifests/components/agent-eviction-node-policy as shipped (``Allow``).
- ``objsel``: a design that is not shipped: the pod-param binding narrowed by ``matchResources.objectSelector``
  to Evictions carrying a label, and a policy requiring the agent's Evictions to carry it. Other callers' Evictions
  then load no params at all; the agent would have to label its Evictions (it does not).

The namespace the evictions go to holds 1, 100, 1,000 pods (shaped as a Deployment's running pods); the policies
take effect a moment after they are written (the apiserver's informers), so each set is measured only once probe
evictions are answered as that set answers them. Also printed: what another caller gets when evicting in a
namespace with no pod (422 from a ``Deny`` pod-param binding, else 404).

    COLOCATION_TEST_APISERVER=DIR python bench/apiserver_evictions.py [--sizes 1,100,1000] [--requests 40]
        [--cycles 2] [--seconds 45] [--variants none,default,before,opt-in,objsel]

(or ``COLOCATION_TEST_KUBECONFIG=FILE``: a cluster of one's own, cluster-admin; harness/real_apiserver.py). Without
either it says so and exits 0. On a cluster it did not start, the bench's bindings are limited to its own
namespaces (a namespaceSelector) and its policies match its own service account, so nothing else is touched.
Bounded: at most ``--seconds`` per size, policy set and cycle (shared out among the callers, each measured in
its own block); all objects deleted at the end.
"""

from __future__ import annotations

import argparse
import copy
import http.client
import json
import ssl
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness import real_apiserver  # noqa: E402

DEFAULT_COMPONENT = ROOT / "manifests" / "components" / "agent-node-policy"
OPT_IN_COMPONENT = ROOT / "manifests" / "components" / "agent-eviction-node-policy"
AGENT_USER = "system:serviceaccount:colocation-system:colocation-agent"
VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAPB = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
VARIANTS = ("none", "default", "before", "opt-in", "objsel")
EVICTION_LABEL = "colocation.koordinator.sh/evicted-by-agent"


class Caller:
    """One keep-alive HTTPS connection to the apiserver, with one credential."""

    def __init__(self, cfg: Any, token: str | None = None) -> None:
        url = urlparse(cfg.host)
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
        if not cfg.verify_ssl:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        self.headers = {"Accept": "application/json"}
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        else:
            if cfg.cert_file:
                ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
            if (cfg.api_key or {}).get("authorization"):
                self.headers["Authorization"] = cfg.api_key["authorization"]
        self.host, self.port, self.ctx = url.hostname or "127.0.0.1", url.port or 443, ctx
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json") -> tuple[int, dict[str, Any], float]:
        """(HTTP status, decoded body, seconds from sending the request to the end of the response)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {**self.headers, "Content-Type": content_type} if data is not None else self.headers
        for attempt in (0, 1):
            try:
                started = time.perf_counter()
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                took = time.perf_counter() - started
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = self._connect()
                if attempt:
                    raise
        return resp.status, (json.loads(raw) if raw else {}), took

    def ok(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> dict[str, Any]:
        status, out, _ = self.call(method, path, body, content_type)
        if status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {out.get('message', out)}")
        return out


def client_config(kubeconfig: Path) -> Any:
    from kubernetes import client, config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)  # type: ignore[no-untyped-call]  # the client is untyped
    return cfg


def token(admin: Caller, namespace: str, account: str, pod: dict[str, Any] | None = None) -> str:
    """A TokenRequest, as ``kubectl create token`` makes it (with ``--bound-object-kind Pod``: bound to ``pod``)."""
    spec: dict[str, Any] = {"audiences": [], "expirationSeconds": 3600}
    if pod is not None:
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                  "uid": pod["metadata"]["uid"]}
    out = admin.ok("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                   {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
    return str(out["status"]["token"])


def pod_object(name: str, node: str, i: int) -> dict[str, Any]:
    """A pod shaped as a Deployment's, after the apiserver's admission and defaults, bound to ``node``."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/name": "batch-worker", "pod-template-hash": "7d9f8c6b5",
                       "koordinator.sh/qosClass": "BE"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "batch-worker-7d9f8c6b5",
                                 "uid": "5b0e7f6c-3c1d-4f2a-9d8e-6a7b8c9d0e1f", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "nodeName": node, "serviceAccountName": "default",
            "containers": [{
                "name": "worker", "image": "registry.example.com/batch/worker:1.4.2",
                "args": ["--queue", "jobs", "--concurrency", "4"],
                "env": [{"name": "QUEUE_URL", "value": "amqp://queue.batch.svc:5672"},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "WORKER_INDEX", "value": str(i)}],
                "ports": [{"name": "metrics", "containerPort": 8080}],
                "resources": {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
                              "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2Gi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
                "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            }],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
        },
    }


def running_status(i: int) -> dict[str, Any]:
    """The status a kubelet reports for a running pod (what the apiserver's informer then holds)."""
    at = "2026-11-28T10:00:00Z"
    ip = f"10.244.{i // 250}.{i % 250 + 2}"
    return {"status": {
        "phase": "Running", "hostIP": "192.168.10.11", "hostIPs": [{"ip": "192.168.10.11"}], "podIP": ip,
        "podIPs": [{"ip": ip}], "startTime": at,
        "conditions": [{"type": t, "status": "True", "lastTransitionTime": at}
                       for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                 "PodScheduled")],
        "containerStatuses": [{
            "name": "worker", "ready": True, "started": True, "restartCount": 0,
            "image": "registry.example.com/batch/worker:1.4.2",
            "imageID": "registry.example.com/batch/worker@sha256:" + "ab" * 32,
            "containerID": "containerd://" + f"{i:064x}", "state": {"running": {"startedAt": at}},
            "lastState": {}}],
    }}


class Scene:
    """The bench's objects: its namespaces, two Nodes, the agent's account and pod, another account, the pods."""

    def __init__(self, admin: Caller, cfg: Any, scoped: bool) -> None:
        self.admin, self.cfg, self.scoped = admin, cfg, scoped
        self.id = uuid.uuid4().hex[:6]
        self.prefix = f"colo-bench-{self.id}"
        self.agent_ns, self.pods_ns = self.prefix, f"{self.prefix}-pods"
        self.probe_ns, self.empty_ns = f"{self.prefix}-probe", f"{self.prefix}-empty"
        self.node_a, self.node_b = f"{self.prefix}-a", f"{self.prefix}-b"
        self.labels = {"colocation-bench": self.id}
        self.pods: list[dict[str, Any]] = []
        self.target: dict[str, Any] = {}

    def setup(self) -> None:
        a = self.admin
        for ns in (self.agent_ns, self.pods_ns, self.probe_ns, self.empty_ns):
            a.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": ns, "labels": self.labels}})
        for node in (self.node_a, self.node_b):
            a.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                           "metadata": {"name": node, "labels": self.labels}})
        for sa in ("colocation-agent", "drainer"):
            a.ok("POST", f"/api/v1/namespaces/{self.agent_ns}/serviceaccounts",
                 {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}})
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        a.ok("POST", f"{rbac}/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": self.prefix, "labels": self.labels},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                      {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]})
        a.ok("POST", f"{rbac}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": self.prefix, "labels": self.labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": self.prefix},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": self.agent_ns}
                         for sa in ("colocation-agent", "drainer")]})
        agent_pod = a.ok("POST", f"/api/v1/namespaces/{self.agent_ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "colocation-agent-x7k2p"},
            "spec": {"serviceAccountName": "colocation-agent", "nodeName": self.node_a,
                     "containers": [{"name": "agent", "image": "registry.example.com/colocation-webhook:0.1.0"}]}})
        self.agent = Caller(self.cfg, token(a, self.agent_ns, "colocation-agent", agent_pod))
        self.other = Caller(self.cfg, token(a, self.agent_ns, "drainer"))
        self.probe_pods = {n: a.ok("POST", f"/api/v1/namespaces/{self.probe_ns}/pods", pod_object(f"on-{n}", node, 0))
                           for n, node in (("a", self.node_a), ("b", self.node_b))}
        self.grow(1)

    def grow(self, size: int) -> None:
        """Pods in the measured namespace up to ``size``, alternately on node A and B; the first is the target."""
        while len(self.pods) < size:
            i = len(self.pods)
            node = self.node_a if i % 2 == 0 else self.node_b
            path = f"/api/v1/namespaces/{self.pods_ns}/pods"
            made = self.admin.ok("POST", path, pod_object(f"batch-worker-{i:05d}", node, i))
            self.admin.ok("PATCH", f"{path}/{made['metadata']['name']}/status", running_status(i),
                          "application/merge-patch+json")
            self.pods.append(made)
        self.target = self.pods[0]

    def teardown(self) -> None:
        a = self.admin
        select = quote(f"colocation-bench={self.id}")
        for path in (VAPB, VAP, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                     "/apis/rbac.authorization.k8s.io/v1/clusterroles", "/api/v1/nodes"):
            a.call("DELETE", f"{path}?labelSelector={select}")
        for ns in (self.agent_ns, self.pods_ns, self.probe_ns, self.empty_ns):
            a.call("DELETE", f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
            a.call("DELETE", f"/api/v1/namespaces/{ns}")

    # -- the policies ----------------------------------------------------------------------------------------
    def _named(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A shipped policy or binding, renamed for the bench, matching its agent account (and, on a cluster the
        bench did not start, bound only in its namespaces)."""
        obj = copy.deepcopy(obj)
        obj["metadata"]["name"] = obj["metadata"]["name"].replace("colocation-agent", self.prefix)
        obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}), **self.labels}
        spec = obj["spec"]
        if obj["kind"] == "ValidatingAdmissionPolicyBinding":
            spec["policyName"] = spec["policyName"].replace("colocation-agent", self.prefix)
            if self.scoped:
                spec.setdefault("matchResources", {})["namespaceSelector"] = {"matchLabels": self.labels}
        for cond in spec.get("matchConditions", []):
            cond["expression"] = cond["expression"].replace(
                AGENT_USER, f"system:serviceaccount:{self.agent_ns}:colocation-agent")
        return obj

    def policies(self, variant: str) -> list[dict[str, Any]]:
        def docs(folder: Path) -> list[dict[str, Any]]:
            return [d for f in sorted(folder.glob("*-policy.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]

        if variant == "none":
            return []
        out = docs(DEFAULT_COMPONENT)
        if variant == "default":
            return [self._named(o) for o in out]
        node = docs(OPT_IN_COMPONENT)
        binding = next(o for o in node if o["kind"] == "ValidatingAdmissionPolicyBinding")
        if variant == "before":
            binding["spec"]["paramRef"]["parameterNotFoundAction"] = "Deny"
        elif variant == "objsel":
            binding["spec"]["matchResources"] = {"objectSelector": {"matchLabels": {EVICTION_LABEL: "true"}}}
            (evictions,) = [o for o in out if o["metadata"]["name"] == "colocation-agent-evictions"
                            and o["kind"] == "ValidatingAdmissionPolicy"]
            label = copy.deepcopy(evictions)
            label["metadata"]["name"] = "colocation-agent-eviction-label"
            label["spec"]["variables"] = []
            label["spec"]["validations"] = [{
                "expression": f"has(object.metadata.labels) && '{EVICTION_LABEL}' in object.metadata.labels"
                              f" && object.metadata.labels['{EVICTION_LABEL}'] == 'true'",
                "reason": "Forbidden",
                "message": f"colocation-agent must label its Evictions {EVICTION_LABEL}=true"}]
            label_binding = copy.deepcopy(next(o for o in out if o["kind"] == "ValidatingAdmissionPolicyBinding"
                                               and o["spec"]["policyName"] == "colocation-agent-evictions"))
            label_binding["metadata"]["name"] = label_binding["spec"]["policyName"] = label["metadata"]["name"]
            node += [label, label_binding]
        elif variant != "opt-in":
            raise ValueError(variant)
        return [self._named(o) for o in out + node]

    def install(self, variant: str) -> float:
        """Replace the bench's policies with ``variant``'s; seconds until the probes answer as it does."""
        select = quote(f"colocation-bench={self.id}")
        self.admin.ok("DELETE", f"{VAPB}?labelSelector={select}")
        self.admin.ok("DELETE", f"{VAP}?labelSelector={select}")
        for obj in self.policies(variant):
            self.admin.ok("POST", VAP if obj["kind"] == "ValidatingAdmissionPolicy" else VAPB, obj)
        started = time.monotonic()
        want = EXPECTED[variant]
        while (got := self.probe()) != want:
            if time.monotonic() - started > 90:
                raise RuntimeError(f"{variant}: the probes answer {got}, not {want}, after 90 s")
            time.sleep(0.2)
        return time.monotonic() - started

    # -- the evictions ---------------------------------------------------------------------------------------
    def eviction(self, pod: dict[str, Any], uid: bool, labelled: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]}
        if labelled:
            meta["labels"] = {EVICTION_LABEL: "true"}
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": meta}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": pod["metadata"]["uid"]}}
        return body

    @staticmethod
    def evict(caller: Caller, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        meta = body["metadata"]
        return caller.call("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction"
                                   "?dryRun=All", body)

    def _refused_by(self, caller: Caller, body: dict[str, Any]) -> str:
        status, out, _ = self.evict(caller, body)
        if status == 201:
            return ""
        message = str(out.get("message", ""))
        if status == 403 and f"ValidatingAdmissionPolicy '{self.prefix}-" in message:
            return message.split(f"ValidatingAdmissionPolicy '{self.prefix}-", 1)[1].split("'", 1)[0]
        raise RuntimeError(f"probe: HTTP {status}: {message}")

    def probe(self) -> tuple[str, str, str, int]:
        """Which policy refuses the agent's (labelled, on node A, no UID), (unlabelled, node B, UID), (labelled,
        node B, UID), and the HTTP status of another caller's eviction in a namespace with no pod."""
        on_a, on_b = self.probe_pods["a"], self.probe_pods["b"]
        empty = {"metadata": {"name": "no-such-pod", "namespace": self.empty_ns, "uid": ""}}
        return (self._refused_by(self.agent, self.eviction(on_a, uid=False, labelled=True)),
                self._refused_by(self.agent, self.eviction(on_b, uid=True, labelled=False)),
                self._refused_by(self.agent, self.eviction(on_b, uid=True, labelled=True)),
                self.evict(self.other, self.eviction(empty, uid=False, labelled=False))[0])


# How the probes are answered under each set (Scene.probe).
EXPECTED = {
    "none": ("", "", "", 404),
    "default": ("evictions", "", "", 404),
    "before": ("evictions", "eviction-node", "eviction-node", 422),
    "opt-in": ("evictions", "eviction-node", "eviction-node", 404),
    "objsel": ("evictions", "eviction-label", "eviction-node", 404),
}
EMPTY_NAMESPACE = {404: "404 (pod not found)", 422: "422 (no params found ... `Deny` parameterNotFoundAction)"}


def measure(scene: Scene, callers: dict[str, tuple[Caller, dict[str, Any]]], requests: int,
            seconds: float) -> dict[str, list[float]]:
    """Each caller in its own block (so that one caller's costly evictions, and the garbage the apiserver collects
    after them, do not fall between another's): ``requests`` evictions or ``seconds`` shared out among the callers
    (at least 3 each), after two not counted."""
    samples: dict[str, list[float]] = {}
    for name, (caller, body) in callers.items():
        deadline = time.monotonic() + seconds / len(callers)
        got: list[float] = []
        for i in range(requests + 2):
            status, out, took = scene.evict(caller, body)
            if status != 201:
                raise RuntimeError(f"{name}: eviction refused: HTTP {status}: {out.get('message')}")
            if i >= 2:
                got.append(took)
            if len(got) >= 3 and time.monotonic() > deadline:
                break
        samples[name] = got
    return samples


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextmanager
def scene_on(cluster: real_apiserver.Cluster) -> Iterator[Scene]:
    cfg = client_config(cluster.kubeconfig)
    scene = Scene(Caller(cfg), cfg, scoped=not cluster.started)
    try:
        scene.setup()
        yield scene
    finally:
        scene.teardown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,100,1000", help="pods in the namespace evicted in (default 1,100,1000)")
    ap.add_argument("--requests", type=int, default=40, help="evictions per caller per cell (default 40)")
    ap.add_argument("--cycles", type=int, default=2,
                    help="the policy sets are measured in turn this many times per size, the order reversed each "
                         "time, and the samples pooled (default 2)")
    ap.add_argument("--seconds", type=float, default=45, help="at most this long per set per cycle (default 45)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"policy sets (default {','.join(VARIANTS)})")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    variants = [v for v in args.variants.split(",") if v]
    if unknown := set(variants) - set(VARIANTS):
        ap.error(f"unknown policy sets: {sorted(unknown)}")
    if "none" not in variants:
        variants.insert(0, "none")
    reason = real_apiserver.skip_reason()
    if reason:
        print(f"apiserver_evictions: skipped: {reason}")
        return 0
    begun = time.monotonic()
    per_cycle = max(3, -(-args.requests // args.cycles))
    with real_apiserver.cluster() as cluster, scene_on(cluster) as scene:
        print(f"kube-apiserver {cluster.version} ({'started by the bench' if cluster.started else 'given'}); "
              f"dry-run evictions, ms per request: p50 / p90 of n; (+x) = p50 minus the p50 with no policy")
        if scene.scoped:
            print("  (a cluster the bench did not start: its bindings carry a namespaceSelector for its namespaces)")
        p50: dict[tuple[int, str, str], float] = {}
        for size in sizes:
            scene.grow(size)
            callers = {"agent": (scene.agent, scene.eviction(scene.target, uid=True, labelled=True)),
                       "service account": (scene.other, scene.eviction(scene.target, uid=False, labelled=False)),
                       "admin": (scene.admin, scene.eviction(scene.target, uid=False, labelled=False))}
            pooled: dict[str, dict[str, list[float]]] = {v: {name: [] for name in callers} for v in variants}
            waited = dict.fromkeys(variants, 0.0)
            for cycle in range(args.cycles):
                order = callers if cycle % 2 == 0 else dict(reversed(callers.items()))
                for variant in (variants if cycle % 2 == 0 else variants[::-1]):
                    waited[variant] = max(waited[variant], scene.install(variant))
                    for name, got in measure(scene, order, per_cycle, args.seconds).items():
                        pooled[variant][name] += got
            for variant in variants:
                cells = []
                for name, got in pooled[variant].items():
                    p50[(size, variant, name)] = statistics.median(got) * 1000
                    added = p50[(size, variant, name)] - p50[(size, "none", name)]
                    cells.append(f"{name} {p50[(size, variant, name)]:.1f} / {pct(got, 0.9) * 1000:.1f} of "
                                 f"{len(got)}" + ("" if variant == "none" else f" ({added:+.1f})"))
                print(f"  {size:>5} pods  {variant:<8} " + "   ".join(cells)
                      + f"   [in effect after {waited[variant]:.1f} s]", flush=True)
        print("another caller's eviction in a namespace with no pod: "
              + "; ".join(f"{v}: HTTP {EMPTY_NAMESPACE[EXPECTED[v][3]]}" for v in variants))
        if len(sizes) > 1:
            lo, hi = sizes[0], sizes[-1]
            for v in variants[1:]:
                per = []
                for name in ("agent", "service account", "admin"):
                    grew = p50[(hi, v, name)] - p50[(hi, "none", name)] - p50[(lo, v, name)] + p50[(lo, "none", name)]
                    per.append(f"{name} {grew / (hi - lo) * 1000:+.0f} µs")
                print(f"  {v:<8} added per pod of the namespace ({lo} -> {hi} pods): " + ", ".join(per))
    print(f"done in {time.monotonic() - begun:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
