#!/usr/bin/env python3
"""The live source on a real kube-apiserver when the network misbehaves (issue 34 §1), through the TCP proxy of
harness/tcp_proxy.py (pass, reset, or drop silently: a blackhole that answers for the peer).

1. **Quiet watches** (raw, beside the source): a watch per webhook kind with ``timeoutSeconds`` =
   ``--idle-seconds``, while ConfigMaps change in another namespace every 10 s: what each watch receives (events,
   bookmarks) and when the server ends it. On a kind where nothing changes the apiserver sends no byte at all
   until its watch cache moves past the watch's resourceVersion (k8s.io/apiserver/pkg/storage/cacher,
   cache_watcher.go: a bookmark "roughly every minute" and 2 s before the deadline, only once there is a newer
   resourceVersion to give); the ConfigMap watch, filtered to one object of a kind that changes, gets one a minute.
2. **A blackhole** of ``--blackhole`` seconds under the live source (every webhook kind): when each kind says
   "no data" after the link went silent; a label set on the bench's namespace 30 s into the fault (straight to
   the apiserver), and how long after the link came back the source had it.
3. **A partition of ``--partition`` seconds**: a label set as the link comes back (the connections frozen by the
   fault stay frozen); how long until the source has it.
4. **A minute of resets**: every connection reset, new ones refused by RST; the log lines of that minute (every
   logger at INFO and above, urllib3's and tracebacks counted apart), the failed attempts, the open files before
   and at most; how long until every kind is back once the resets stop.

    COLOCATION_TEST_APISERVER=DIR python bench/live_staleness.py [--scale 1] [--idle-seconds 150]
        [--blackhole 100] [--partition 20]

(or ``COLOCATION_TEST_KUBECONFIG=FILE``, harness/real_apiserver.py). Without either it says so and exits 0.
``--scale`` multiplies every duration, the source's (``Timing().scaled``) and the script's (the tests run it at
0.05). Bounded: each phase waits at most its own duration plus the source's deadlines; about six minutes at
``--scale 1``. What it creates (a namespace, and Koordinator's objects the webhook kinds need where missing) is
deleted at the end.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from harness import real_apiserver  # noqa: E402
from harness.log_records import Lines  # noqa: E402
from harness.tcp_proxy import TCPProxy  # noqa: E402
from webhook.cluster.freshness import Timing  # noqa: E402
from webhook.cluster.live import LiveSource, _lines, _list_function, api_client  # noqa: E402
from webhook.cluster.state import KINDS, SLO_CONFIG_NAME, SLO_CONFIG_NAMESPACE, WEBHOOK_KINDS, ClusterState  # noqa: E402

KOORDINATOR = ROOT / "manifests" / "koordinator"
NEEDED = ("namespace.yaml", "crd-clustercolocationprofiles.yaml", "priorityclasses.yaml", "slo-controller-config.yaml")
LABEL = "colocation-bench/at"


def wait(cond: Callable[[], object], timeout: float, step: float = 0.05) -> float | None:
    """Seconds until ``cond()`` holds, or None past ``timeout``."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            return None
        time.sleep(step)
    return time.monotonic() - start


def ensure_objects(cluster: real_apiserver.Cluster) -> list[Path]:
    """Koordinator's namespace, CRD, PriorityClasses and ConfigMap where missing; the files of those created."""
    created = []
    for name in NEEDED:
        path = KOORDINATOR / name
        done = cluster.kubectl("create", "-f", str(path), check=False)
        if done.returncode == 0:
            created.append(path)
        elif "AlreadyExists" not in done.stderr:
            raise RuntimeError(f"kubectl create -f {path}: {done.stderr.strip()}")
        if name.startswith("crd-"):
            cluster.kubectl("wait", "--for", "condition=Established", "-f", str(path), "--timeout", "60s")
    return created


def quiet_watches(kubeconfig: Path, seconds: float, out: dict[str, list[str]]) -> list[threading.Thread]:
    """One raw watch per webhook kind with timeoutSeconds = ``seconds``: what arrives, and when it ends."""
    api = api_client(str(kubeconfig), "colocation-bench/quiet-watch")
    api.configuration.connection_pool_maxsize = len(WEBHOOK_KINDS) + 2

    def watch(kind: str) -> None:
        namespace, selector = (SLO_CONFIG_NAMESPACE, f"metadata.name={SLO_CONFIG_NAME}") if kind == "ConfigMap" \
            else (None, None)
        call = _list_function(api, KINDS[kind], namespace)
        query = {"field_selector": selector} if selector else {}
        listed = call(_request_timeout=(5, 60), limit=500, **query)
        rv = orjson.loads(listed.data)["metadata"]["resourceVersion"]
        listed.release_conn()
        start = time.monotonic()
        resp = call(_request_timeout=(5, seconds + 60), watch=True, allow_watch_bookmarks=True, resource_version=rv,
                    timeout_seconds=max(1, round(seconds)), **query)
        seen = []
        for line in _lines(resp):
            event = orjson.loads(line)
            seen.append(f"{event.get('type')} at {time.monotonic() - start:.1f} s")
        seen.append(f"ended at {time.monotonic() - start:.2f} s (timeoutSeconds {max(1, round(seconds))})")
        resp.release_conn()
        out[kind] = seen

    threads = [threading.Thread(target=watch, args=(k,), daemon=True) for k in WEBHOOK_KINDS]
    for t in threads:
        t.start()
    return threads


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="every duration times this (tests: 0.05)")
    p.add_argument("--idle-seconds", type=float, default=150.0, help="how long the quiet watches last (unscaled)")
    p.add_argument("--blackhole", type=float, default=100.0, help="seconds of blackhole (scaled)")
    p.add_argument("--partition", type=float, default=20.0, help="seconds of the short partition (scaled)")
    args = p.parse_args()
    reason = real_apiserver.skip_reason()
    if reason:
        print(f"live_staleness: skipped: {reason}")
        return 0
    scale = args.scale
    timing = Timing().scaled(scale)
    lines = Lines()
    logging.getLogger().addHandler(lines)
    logging.getLogger().setLevel(logging.INFO)
    with real_apiserver.cluster() as cluster:
        created = ensure_objects(cluster)
        bench_ns = f"colocation-bench-{uuid.uuid4().hex[:6]}"
        cluster.kubectl("create", "namespace", bench_ns)
        stop = threading.Event()

        def churn() -> None:   # ConfigMaps changing in another namespace: the ConfigMap kind's watch cache moves
            i = 0
            while not stop.wait(10 * scale):
                cluster.kubectl("-n", bench_ns, "create", "configmap", f"churn-{i}", check=False)
                i += 1

        threading.Thread(target=churn, daemon=True).start()
        quiet: dict[str, list[str]] = {}
        watchers = quiet_watches(cluster.kubeconfig, args.idle_seconds, quiet)
        folder = Path(tempfile.mkdtemp(prefix="colocation-bench-"))
        try:
            with TCPProxy(("127.0.0.1", cluster.port)) as proxy:
                proxied = cluster.through(proxy.port, folder / "kubeconfig")
                state = ClusterState(WEBHOOK_KINDS)
                source = LiveSource(state, kubeconfig=str(proxied), timing=timing)
                source.start()
                try:
                    if wait(lambda: state.ready, 60) is None:
                        raise RuntimeError(f"not synced: {state.not_ready_reason()}")
                    print(f"live source: timeoutSeconds {timing.watch_seconds(0)}-{timing.watch_seconds(0.999)}, "
                          f"read deadline {timing.read_margin:g} s above it (a dead watch seen within "
                          f"{timing.longest_silence:g} s of its last byte), list deadline "
                          f"{timing.list_read_timeout:g} s; {len(WEBHOOK_KINDS)} kinds", flush=True)
                    time.sleep(2 * scale)
                    blackhole(cluster, bench_ns, state, source, proxy, lines, timing, args.blackhole * scale, scale)
                    partition(cluster, bench_ns, state, source, proxy, timing, args.partition * scale)
                    resets(source, proxy, lines, timing, 60 * scale)
                finally:
                    source.stop()
        finally:
            stop.set()
            for t in watchers:
                t.join(args.idle_seconds + 70)
            print(f"quiet watches while ConfigMaps change in another namespace every {10 * scale:g} s:")
            for kind in WEBHOOK_KINDS:
                print(f"  {kind:24} {', '.join(quiet.get(kind, ['(no answer)']))}")
            shutil.rmtree(folder, ignore_errors=True)
            cluster.kubectl("delete", "namespace", bench_ns, "--wait=false", check=False)
            for path in reversed(created):
                cluster.kubectl("delete", "-f", str(path), "--wait=false", check=False)
    return 0


def label(cluster: real_apiserver.Cluster, namespace: str, value: str) -> None:
    cluster.kubectl("label", "namespace", namespace, f"{LABEL}={value}", "--overwrite")


def has_label(state: ClusterState, namespace: str, value: str) -> bool:
    return (state.namespace_labels(namespace) or {}).get(LABEL) == value


def blackhole(cluster: real_apiserver.Cluster, namespace: str, state: ClusterState, source: LiveSource,
              proxy: TCPProxy, lines: Lines, timing: Timing, seconds: float, scale: float) -> None:
    wall = time.time()
    proxy.mode = "drop"
    dropped = time.monotonic()
    time.sleep(30 * scale)
    value = f"blackhole-{uuid.uuid4().hex[:4]}"
    label(cluster, namespace, value)
    changed = time.monotonic()
    noticed: dict[str, float] = {}

    def all_said() -> bool:
        for r in lines.since(wall):
            kind = r.getMessage().split(":", 1)[0]
            if kind in WEBHOOK_KINDS and " no data from the API server " in r.getMessage():
                noticed.setdefault(kind, r.created - wall)
        return len(noticed) == len(WEBHOOK_KINDS)

    wait(all_said, max(seconds, timing.longest_silence + 5) - (time.monotonic() - dropped))
    time.sleep(max(0.0, dropped + seconds - time.monotonic()))
    proxy.mode = "pass"
    back = time.monotonic()
    took = wait(lambda: has_label(state, namespace, value), timing.list_read_timeout + timing.longest_silence + 10)
    said = [f"{t:.1f}" for t in sorted(noticed.values())]
    print(f"blackhole of {seconds:g} s: the kinds said \"no data\" {', '.join(said) or 'never'} s after the link went "
          f"silent (bound {timing.longest_silence:g} s); first line at {said[0] if said else '-'} s", flush=True)
    if took is None:
        print("blackhole: the label set 30 s into the fault never reached the state", flush=True)
    else:
        print(f"blackhole: a label set {30 * scale:g} s into the fault reached the state {took:.1f} s after the link "
              f"came back ({back + took - changed:.1f} s after it was set)", flush=True)
    wait(lambda: all(s.failing is None for s in source.status().values()), timing.list_read_timeout + 10)


def partition(cluster: real_apiserver.Cluster, namespace: str, state: ClusterState, source: LiveSource,
              proxy: TCPProxy, timing: Timing, seconds: float) -> None:
    listed = {k: s.lists for k, s in source.status().items()}
    proxy.mode = "drop"
    time.sleep(seconds)
    proxy.mode = "pass"
    value = f"partition-{uuid.uuid4().hex[:4]}"
    label(cluster, namespace, value)
    took = wait(lambda: has_label(state, namespace, value), timing.longest_silence + timing.list_read_timeout + 10)
    print(f"partition of {seconds:g} s: a label set as the link came back reached the state "
          f"{'never' if took is None else f'{took:.1f} s later'} (bound: {timing.longest_silence:g} s from the last "
          f"byte, then a relist)", flush=True)
    # Every kind's watch was frozen by the fault: each relists once its deadline passes.
    wait(lambda: all(s.lists > listed[k] and s.failing is None for k, s in source.status().items()),
         timing.longest_silence + timing.list_read_timeout + 10)


def resets(source: LiveSource, proxy: TCPProxy, lines: Lines, timing: Timing, seconds: float) -> None:
    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    wait(lambda: all(s.failing is None for s in source.status().values()), timing.longest_silence + 10)
    time.sleep(1)
    before, errors = open_files(), sum(s.errors for s in source.status().values())
    wall = time.time()
    proxy.mode = "reset"
    end = time.monotonic() + seconds
    most = before
    while time.monotonic() < end:
        most = max(most, open_files())
        time.sleep(0.05)
    minute = lines.since(wall)
    failed = sum(s.errors for s in source.status().values()) - errors
    proxy.mode = "pass"
    took = wait(lambda: all(s.failing is None for s in source.status().values()), timing.longest_silence + 10)
    urllib3 = sum(1 for r in minute if r.name.startswith("urllib3"))
    tracebacks = sum(1 for r in minute if r.exc_info)
    print(f"a minute of resets ({seconds:g} s): {len(minute)} log lines (urllib3: {urllib3}, tracebacks: "
          f"{tracebacks}), {failed} failed attempts, open files {before} before, at most {most}; every kind back "
          f"{'never' if took is None else f'{took:.1f} s'} after the resets stopped", flush=True)
    for r in minute:
        print(f"  {r.levelname} {r.getMessage()[:160]}")


if __name__ == "__main__":
    raise SystemExit(main())
