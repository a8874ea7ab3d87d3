#!/usr/bin/env python3
"""/mutate in process while the cluster state changes under it: the pause a watched change costs the next review.

Builds a large state (default: 10 000 namespaces, 5 000 ResourceQuotas, 1 000 ClusterColocationProfiles, 206
PriorityClasses), marks it synced as the live source would, then applies watch events from a second thread at
``--events`` per second (mixed as a busy cluster's are: quota status updates from pod creates, namespace label
changes, now and then a profile) while the main thread answers the recorded koord-batch review through the
``ReviewService`` as fast as it can. Prints the review latency (p50, p99, max) with and without the churn.

    PYTHONPATH=. python bench/state_churn.py [--namespaces 10000] [--quotas 5000] [--profiles 1000] [--events 1000]

Bounded: ``--seconds`` of churn (default 10).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webhook.cluster.state import WEBHOOK_KINDS, ClusterState  # noqa: E402
from webhook.server.service import ReviewService  # noqa: E402

REVIEW = json.loads((ROOT / "examples" / "admissionreview-koord-batch.json").read_bytes())


def build(namespaces: int, quotas: int, profiles: int, classes: int) -> ClusterState:
    state = ClusterState(WEBHOOK_KINDS)
    ns = [{"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": f"ns-{i}", "resourceVersion": "1",
                        "labels": {"team": f"t{i % 50}", "koordinator.sh/enable-colocation": str(i % 2 == 0).lower()}}}
          for i in range(namespaces)]
    review_ns = REVIEW["request"]["namespace"]
    ns.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": review_ns, "labels": {"koordinator.sh/enable-colocation": "true"}}})
    rq = [{"apiVersion": "v1", "kind": "ResourceQuota",
           "metadata": {"name": f"q-{i}", "namespace": f"ns-{i % namespaces}", "resourceVersion": "1"},
           "spec": {"hard": {"pods": "100", "requests.cpu": "64"}},
           "status": {"hard": {"pods": "100"}, "used": {"pods": "0"}}} for i in range(quotas)]
    pcs = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": f"class-{i}"},
            "value": 1000 + i} for i in range(classes - 4)]
    for name, value in (("koord-prod", 9000), ("koord-mid", 7000), ("koord-batch", 5000), ("koord-free", 3000)):
        pcs.append({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                    "value": value})
    ccps = [{"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
             "metadata": {"name": f"profile-{i:04d}", "resourceVersion": "1"},
             "spec": {"namespaceSelector": {"matchLabels": {"team": f"t{i % 50}"}},
                      "selector": {"matchLabels": {"app": f"app-{i}"}},
                      "qosClass": "BE", "priorityClassName": "koord-batch", "labels": {"profile": str(i)}}}
            for i in range(profiles - 1)]
    ccps.append({"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                 "metadata": {"name": "profile-batch"},
                 "spec": {"namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                          "selector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                          "qosClass": "BE", "priorityClassName": "koord-batch", "schedulerName": "koord-scheduler"}})
    held: dict[str, list[dict[str, Any]]] = {"Namespace": ns, "ResourceQuota": rq, "PriorityClass": pcs,
                                             "ClusterColocationProfile": ccps}
    for kind in WEBHOOK_KINDS:  # every kind the webhook waits for, the others empty
        state.replace(kind, held.get(kind, []))
        state.mark_synced(kind)
    return state


def churn(state: ClusterState, rate: float, stop: threading.Event, counts: dict[str, int]) -> None:
    """Watch events as a busy cluster sends them: 90 % quota status (every pod create in a quota'd namespace),
    9 % a namespace's labels, 1 % a profile."""
    rng = random.Random(1)
    quotas = state.objects("ResourceQuota")
    namespaces = [n for n in state.objects("Namespace") if n["metadata"]["name"].startswith("ns-")]
    profiles = state.objects("ClusterColocationProfile")
    rv = 2
    due = time.monotonic()
    while not stop.is_set():
        rv += 1
        roll = rng.random()
        if roll < 0.90:
            q = copy.deepcopy(rng.choice(quotas))
            q["metadata"]["resourceVersion"] = str(rv)
            q["status"]["used"]["pods"] = str(rv % 100)
            state.upsert("ResourceQuota", q)
            counts["quota status"] += 1
        elif roll < 0.99:
            n = copy.deepcopy(rng.choice(namespaces))
            n["metadata"]["resourceVersion"] = str(rv)
            n["metadata"]["labels"]["rev"] = str(rv)
            state.upsert("Namespace", n)
            counts["namespace labels"] += 1
        else:
            p = copy.deepcopy(rng.choice(profiles))
            p["metadata"]["resourceVersion"] = str(rv)
            p["spec"]["labels"] = {"profile": str(rv)}
            state.upsert("ClusterColocationProfile", p)
            counts["profile"] += 1
        due += 1 / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def measure(service: ReviewService, seconds: float) -> list[float]:
    body = json.dumps(REVIEW).encode()
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        answer = service.answer("mutate", body)
        out.append(time.perf_counter() - start)
        if answer.status != 200:
            raise SystemExit(f"/mutate answered {answer.status}: {answer.body[:300]!r}")
    return out


def summary(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[int(len(ms) * 0.99) - 1]
    return (f"{name:<28} {len(ms):>7} reviews  p50 {statistics.median(ms):7.3f} ms  p99 {p99:7.3f} ms  "
            f"max {ms[-1]:8.3f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namespaces", type=int, default=10000)
    ap.add_argument("--quotas", type=int, default=5000)
    ap.add_argument("--profiles", type=int, default=1000)
    ap.add_argument("--classes", type=int, default=206)
    ap.add_argument("--events", type=float, default=1000, help="watch events per second (default 1000)")
    ap.add_argument("--seconds", type=float, default=10, help="how long each part runs (default 10)")
    args = ap.parse_args()
    started = time.perf_counter()
    state = build(args.namespaces, args.quotas, args.profiles, args.classes)
    print(f"state: {args.namespaces} namespaces, {args.quotas} ResourceQuotas, {args.profiles} profiles, "
          f"{args.classes} PriorityClasses, built in {time.perf_counter() - started:.1f} s")
    gc.freeze()   # as serve does once the state has synced (AdmissionServer.on_tick)
    service = ReviewService(state)
    first = measure(service, 0.0) or []
    t = time.perf_counter()
    service.answer("mutate", json.dumps(REVIEW).encode())
    print(f"first review: {(time.perf_counter() - t) * 1000:.1f} ms")
    del first
    print(summary("steady (no events)", measure(service, args.seconds / 2)))
    stop, counts = threading.Event(), {"quota status": 0, "namespace labels": 0, "profile": 0}
    worker = threading.Thread(target=churn, args=(state, args.events, stop, counts), daemon=True)
    worker.start()
    try:
        samples = measure(service, args.seconds)
    finally:
        stop.set()
        worker.join()
    rate = sum(counts.values()) / args.seconds
    print(summary(f"under {rate:.0f} events/s", samples))
    print("events: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
