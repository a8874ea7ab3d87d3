"""The live source on a real kube-apiserver (harness/real_apiserver.py; skipped without one), through the TCP proxy of
harness/tcp_proxy.py, with time compressed twenty times (``Timing().scaled(0.05)``: watches of 2 s, a read deadline
0.75 s above, lists of 1.5 s, a minute in 3 s). What the replay server only imitates, proven on the apiserver:
it ends a quiet watch at its timeoutSeconds, so the deadline never cuts one; a blackhole is seen within the
deadline and mended by a relist; a minute of resets is a handful of lines. bench/live_staleness.py measures the
same at full scale (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import real_apiserver
from harness.log_records import Lines  # the bench's log handler too: one copy
from harness.tcp_proxy import TCPProxy
from tests.cluster.test_live import wait_for
from webhook.cluster.freshness import Timing
from webhook.cluster.live import LiveSource
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

pytestmark = pytest.mark.xdist_group("real-apiserver")

ROOT = Path(__file__).resolve().parents[2]
KOORDINATOR = ROOT / "manifests" / "koordinator"
FAST = Timing().scaled(0.05)


@pytest.fixture(scope="module")
def cluster() -> Iterator[real_apiserver.Cluster]:
    with real_apiserver.for_tests() as c:
        created = []
        for name in ("namespace.yaml", "crd-clustercolocationprofiles.yaml", "priorityclasses.yaml",
                     "slo-controller-config.yaml"):
            done = c.kubectl("create", "-f", str(KOORDINATOR / name), check=False)
            assert done.returncode == 0 or "AlreadyExists" in done.stderr, done.stderr
            if done.returncode == 0:
                created.append(KOORDINATOR / name)
        c.kubectl("wait", "--for", "condition=Established", "-f", str(KOORDINATOR / "crd-clustercolocationprofiles.yaml"),
                  "--timeout", "60s")
        yield c
        for path in reversed(created):
            c.kubectl("delete", "-f", str(path), "--wait=false", check=False)


def test_on_a_real_apiserver_quiet_kinds_stay_a_blackhole_is_seen_and_resets_are_few_lines(
        cluster: real_apiserver.Cluster, tmp_path: Path) -> None:
    lines = Lines()
    root = logging.getLogger()
    root.addHandler(lines)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        with TCPProxy(("127.0.0.1", cluster.port)) as proxy:
            kubeconfig = cluster.through(proxy.port, tmp_path / "kubeconfig")
            state = ClusterState(WEBHOOK_KINDS)
            src = LiveSource(state, kubeconfig=str(kubeconfig), timing=FAST)
            src.start()
            try:
                wait_for(lambda: state.ready, timeout=30, what="first sync")
                # Quiet kinds: three watch timeouts and more, nothing cut, nothing relisted, nothing said.
                mark = len(lines.records)
                time.sleep(3 * FAST.watch_seconds(0.999) + 1)
                status = src.status()
                assert all(s.lists == 1 and s.errors == 0 and s.watches >= 3 for s in status.values()), status
                assert max(state.ages(time.monotonic()).values()) < FAST.longest_silence
                assert lines.records[mark:] == []
                # A blackhole: every kind says so within its deadline, and relists once the link is back.
                proxy.mode = "drop"
                wait_for(lambda: all(s.silent for s in src.status().values()), timeout=FAST.longest_silence + 1,
                         what="every kind to notice the blackhole")
                proxy.mode = "pass"
                wait_for(lambda: all(s.lists == 2 and s.failing is None for s in src.status().values()),
                         timeout=FAST.list_read_timeout + 5, what="every kind relisted")
                # A minute of resets: one line a kind, perhaps a summary; every kind back at once after.
                mark = len(lines.records)
                proxy.mode = "reset"
                time.sleep(60 * 0.05)
                minute = lines.records[mark:]
                proxy.mode = "pass"
                wait_for(lambda: all(s.failing is None for s in src.status().values()), timeout=3,
                         what="every kind back")
            finally:
                src.stop()
    finally:
        root.removeHandler(lines)
        root.setLevel(level)
    said = [r.getMessage() for r in minute]
    assert len(minute) <= 10 and not [r for r in minute if r.name.startswith("urllib3") or r.exc_info], said
    assert sorted(m.split(":", 1)[0] for m in said if "Connection reset by peer" in m) == sorted(WEBHOOK_KINDS)


def test_the_benchmark_runs_or_says_why_not() -> None:
    """bench/live_staleness.py at a twentieth of its durations: with a real apiserver it prints its figures, without
    one it says why and exits 0."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "live_staleness.py"), "--scale", "0.05",
                           "--idle-seconds", "3"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    reason = real_apiserver.skip_reason()
    expected = [f"skipped: {reason}"] if reason else ["blackhole of 5 s: the kinds said", "a minute of resets (3 s): ",
                                                      "(urllib3: 0, tracebacks: 0)", "quiet watches while"]
    assert all(e in done.stdout for e in expected), done.stdout[-3000:]
