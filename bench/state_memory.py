#!/usr/bin/env python3
"""Resident memory of `serve` holding a large cluster state: a table by cluster size.

For each size, objects shaped as a real cluster's are (with the fields that weigh: managedFields, kubectl's
last-applied annotation, a namespace's spec and status, a quota's used counts) reach `serve` one of two ways:

- ``--source live`` (the default): a local API server (harness/apiserver.py's replay server, loopback only) serves
  them as paginated lists, with an empty watch for each kind; `serve --kubeconfig` lists them.
- ``--source files``: the same objects written to a folder as ``kubectl get KIND -o yaml`` prints them (one
  ``List`` per kind; ``--format json``: ``-o json``); `serve --cluster-state DIR` loads it.

`serve` turns ready, and its resident memory (VmRSS) is read after a few seconds of quiet. With ``--burst N``,
N large reviews (bench/hostile_load.py's ``at-the-caps``: 1 000 containers, 3 MB) are then sent at once, 3 rounds
3 s apart, and the peak is read as the pod's memory cgroup counts it (bench/large_reviews.py's ``Memory``: a cgroup
of its own when run as root, else RSS added up).

    python bench/state_memory.py [--sizes 1000,10000,50000] [--profiles 1000] [--classes 206]
                                 [--source live|files] [--format yaml|json] [--burst 8]

Quotas are half the namespaces. Bounded: one `serve` per size, stopped when measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.large_reviews import Memory, exchange, large_review, post  # noqa: E402
from bench.soak import rss_kib  # noqa: E402
from bench.webhook_load import free_port  # noqa: E402
from harness.apiserver import Received, ReplayAPIServer  # noqa: E402
from webhook.tls.certs import generate  # noqa: E402

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
MANAGED = [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1",
            "time": "2026-11-20T10:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {
                "f:annotations": {".": {}, f"f:{LAST_APPLIED}": {}},
                "f:labels": {".": {}, "f:team": {}, "f:koordinator.sh/enable-colocation": {}}}}}]


def namespaces(n: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"ns-{i}", "uid": f"00000000-0000-0000-0000-{i:012d}", "resourceVersion": str(i),
                          "creationTimestamp": "2026-11-20T10:00:00Z", "managedFields": MANAGED,
                          "labels": {"kubernetes.io/metadata.name": f"ns-{i}", "team": f"t{i % 50}",
                                     "koordinator.sh/enable-colocation": str(i % 2 == 0).lower()},
                          "annotations": {LAST_APPLIED: json.dumps({
                              "apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": f"ns-{i}", "labels": {"team": f"t{i % 50}"}}})}},
             "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}} for i in range(n)]


def quotas(n: int, spread: int) -> list[dict[str, Any]]:
    hard = {"pods": "100", "requests.cpu": "64", "requests.memory": "256Gi", "limits.cpu": "128",
            "limits.memory": "512Gi", "count/configmaps": "100"}
    return [{"metadata": {"name": f"quota-{i}", "namespace": f"ns-{i % spread}", "uid": f"q-{i}",
                          "resourceVersion": str(i), "managedFields": MANAGED * 2,
                          "annotations": {LAST_APPLIED: json.dumps({"spec": {"hard": hard}})}},
             "spec": {"hard": hard},
             "status": {"hard": hard, "used": {k: "0" for k in hard}}} for i in range(n)]


def classes(n: int) -> list[dict[str, Any]]:
    named = [("koord-prod", 9000), ("koord-mid", 7000), ("koord-batch", 5000), ("koord-free", 3000)]
    named += [(f"class-{i}", 1000 + i) for i in range(n - len(named))]
    return [{"metadata": {"name": name, "resourceVersion": "1", "managedFields": MANAGED}, "value": value,
             "preemptionPolicy": "PreemptLowerPriority", "description": "a class for the benchmark " * 4}
            for name, value in named]


def profiles(n: int) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"profile-{i:04d}", "resourceVersion": "1", "managedFields": MANAGED},
             "spec": {"namespaceSelector": {"matchLabels": {"team": f"t{i % 50}"}},
                      "selector": {"matchLabels": {"app": f"app-{i}"}}, "qosClass": "BE",
                      "priorityClassName": "koord-batch", "labels": {"profile": str(i)}}} for i in range(n)]


LISTS = {  # path -> (kind of the list, api version)
    "/apis/scheduling.k8s.io/v1/priorityclasses": ("PriorityClassList", "scheduling.k8s.io/v1"),
    "/api/v1/namespaces": ("NamespaceList", "v1"),
    "/api/v1/resourcequotas": ("ResourceQuotaList", "v1"),
    "/api/v1/limitranges": ("LimitRangeList", "v1"),
    "/apis/config.koordinator.sh/v1alpha1/clustercolocationprofiles": ("ClusterColocationProfileList",
                                                                      "config.koordinator.sh/v1alpha1"),
    "/api/v1/namespaces/koordinator-system/configmaps": ("ConfigMapList", "v1"),
}


def paginated(path: str, items: list[dict[str, Any]]) -> Any:
    kind, version = LISTS[path]

    def respond(r: Received) -> tuple[int, Any]:
        limit = int(r.query.get("limit") or len(items) or 1)
        start = int(r.query.get("continue") or 0)
        page = items[start:start + limit]
        more = start + limit < len(items)
        return 200, {"kind": kind, "apiVersion": version, "items": page,
                     "metadata": {"resourceVersion": "1000000", **({"continue": str(start + limit)} if more else {})}}

    return respond


def kubeconfig(folder: Path, url: str) -> Path:
    path = folder / "kubeconfig"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "bench",
                                "clusters": [{"name": "bench", "cluster": {"server": url}}],
                                "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
                                "users": [{"name": "bench", "user": {"token": "bench"}}]}))
    return path


def objects(n_ns: int, n_profiles: int = 1000, n_classes: int = 206) -> dict[str, list[dict[str, Any]]]:
    """A cluster of that size (quotas in half the namespaces), by its lists' API path."""
    return {"/apis/scheduling.k8s.io/v1/priorityclasses": classes(n_classes),
            "/api/v1/namespaces": namespaces(n_ns), "/api/v1/resourcequotas": quotas(n_ns // 2, n_ns),
            "/api/v1/limitranges": [],
            "/apis/config.koordinator.sh/v1alpha1/clustercolocationprofiles": profiles(n_profiles),
            "/api/v1/namespaces/koordinator-system/configmaps": []}


@contextlib.contextmanager
def cluster(folder: Path, n_ns: int, n_profiles: int = 1000, n_classes: int = 206) -> Iterator[Path]:
    """A local API server holding a cluster of that size (quotas in half the namespaces); its kubeconfig."""
    with ReplayAPIServer() as api:
        for path, items in objects(n_ns, n_profiles, n_classes).items():
            api.add_handler("GET", path, paginated(path, items), watch=False)
            api.add_watch(path, [])
        yield kubeconfig(folder, api.url)


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]  # PyYAML's C classes
    """No anchors: the objects share their managedFields lists here, a real cluster's files repeat them."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def state_folder(folder: Path, n_ns: int, n_profiles: int = 1000, n_classes: int = 206, fmt: str = "yaml") -> Path:
    """The same cluster as files, one per kind as ``kubectl get KIND -o yaml`` (or ``-o json``) prints it: a
    ``List`` whose items carry their kind and apiVersion; the folder to give ``--cluster-state``."""
    out = folder / "state"
    out.mkdir()
    for path, items in objects(n_ns, n_profiles, n_classes).items():
        kind, version = LISTS[path]
        doc = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
               "items": [{"apiVersion": version, "kind": kind.removesuffix("List"), **o} for o in items]}
        with open(out / f"{path.rsplit('/', 1)[1]}.{fmt}", "w") as f:
            if fmt == "json":
                json.dump(doc, f, indent=4)
            else:
                yaml.dump(doc, f, Dumper=_Dumper, sort_keys=False)
    return out


def burst_peak(port: int, ca: Path, pid: int, memory: Memory, burst: int, rounds: int = 3) -> float:
    """Peak MiB while ``burst`` large reviews arrive at once, ``rounds`` times 3 s apart (as hostile_load)."""
    body = large_review("at-the-caps")
    ctx = ssl.create_default_context(cafile=str(ca))

    async def run() -> int:
        memory.reset_peak()
        peak = memory.kib(pid)
        stop = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, memory.kib(pid))
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        for n in range(rounds):
            await asyncio.gather(*(exchange(port, ctx, post("/mutate?timeout=3s", body)) for _ in range(burst)))
            if n < rounds - 1:
                await asyncio.sleep(3)
        stop.set()
        await sampler
        return max(peak, memory.peak_kib() or 0)

    return asyncio.run(run()) / 1024


def measure(n_ns: int, n_profiles: int, n_classes: int, source: str = "live", burst: int = 0,
            fmt: str = "yaml") -> tuple[float, float, float | None]:
    """(seconds until ready, resident MiB once quiet, peak MiB through the burst or None)."""
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if source == "files":
            given = ["--cluster-state", str(state_folder(tmp, n_ns, n_profiles, n_classes, fmt))]
        else:
            given = ["--kubeconfig", str(stack.enter_context(cluster(tmp, n_ns, n_profiles, n_classes)))]
        port = free_port()
        # As the Deployment runs it: the pair given (a Secret), not made by serve.
        pair = generate(tmp / "certs", ["localhost", "127.0.0.1"])
        cmd = [sys.executable, "-m", "webhook.cli.webhook", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--metrics-port", "0", "--tls-cert-file", str(pair.cert), "--tls-private-key-file", str(pair.key),
               "--drain-delay", "0", *given]
        memory = Memory() if burst else None
        if memory is not None:
            stack.callback(memory.remove)
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONPATH": str(ROOT)},
                                preexec_fn=memory.join if memory is not None else None)
        try:
            ready = None
            while time.monotonic() - started < 120:
                try:
                    ctx = ssl.create_default_context(cafile=str(pair.ca_cert))
                    with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                        if r.status == 200:
                            ready = time.monotonic() - started
                            break
                except OSError:
                    pass
                time.sleep(0.05)
            if ready is None:
                raise SystemExit(f"serve did not become ready at {n_ns} namespaces")
            time.sleep(3)
            resident = rss_kib(proc.pid) / 1024
            peak = burst_peak(port, pair.ca_cert, proc.pid, memory, burst) if memory is not None else None
            return ready, resident, peak
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,50000", help="namespaces per run, comma-separated")
    ap.add_argument("--profiles", type=int, default=1000)
    ap.add_argument("--classes", type=int, default=206)
    ap.add_argument("--source", choices=("live", "files"), default="live",
                    help="live: serve --kubeconfig to a local API server; files: serve --cluster-state DIR")
    ap.add_argument("--format", choices=("yaml", "json"), default="yaml", help="of the files (--source files)")
    ap.add_argument("--burst", type=int, default=0, metavar="N",
                    help="then N 3 MB reviews at once, 3 rounds: the peak (0: none)")
    args = ap.parse_args()
    print(f"source: {args.source}" + (f" ({args.format})" if args.source == "files" else "")
          + (f"; burst: {args.burst} x 3 MB reviews at once, 3 rounds" if args.burst else ""))
    print(f"{'namespaces':>10} {'quotas':>7} {'profiles':>8} {'classes':>7} {'ready in':>9} {'resident':>10}"
          + (f" {'peak':>10}" if args.burst else ""))
    for n in (int(s) for s in args.sizes.split(",")):
        ready, rss, peak = measure(n, args.profiles, args.classes, args.source, args.burst, args.format)
        print(f"{n:>10} {n // 2:>7} {args.profiles:>8} {args.classes:>7} {ready:>8.1f}s {rss:>7.1f} MiB"
              + (f" {peak:>6.1f} MiB" if peak is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
