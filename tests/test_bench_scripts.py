"""The in-process benchmark scripts still run: a change that breaks one (a new kind the webhook waits for, a
renamed function) is found here, not by the next person who needs its figures. Tiny sizes: nothing is timed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize(("script", "args", "printed"), [
    ("state_churn.py", ["--namespaces", "50", "--quotas", "20", "--profiles", "10", "--classes", "10",
                        "--events", "200", "--seconds", "0.4"], "events: quota status"),
    ("asgi_inprocess.py", ["--rounds", "5"], "edge    /validate"),
    ("protocol_inprocess.py", ["--rounds", "5"], "webhook /validate"),
    ("chain.py", ["--rounds", "3", "--batches", "1"], "µs"),
    ("memo.py", ["--rounds", "3", "--repeats", "1"], "µs"),
    ("state_memory.py", ["--sizes", "20", "--profiles", "5", "--classes", "5"], "MiB"),  # serve, as deployed
    ("state_memory.py", ["--sizes", "20", "--profiles", "5", "--classes", "5", "--source", "files", "--burst", "1"],
     "MiB  "),  # serve --cluster-state, and the peak through a burst
    ("yaml_bomb.py", ["--levels", "3,9", "--before", "3", "--pods", "5", "--repeats", "1"],
     "bomb-9.yaml:9: yaml: document contains excessive aliasing"),
])
def test_an_in_process_benchmark_runs(script: str, args: list[str], printed: str) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert printed in done.stdout, done.stdout[-2000:]


@pytest.mark.parametrize(("script", "args", "printed"), [
    ("apiserver_evictions.py", ["--sizes", "1,3", "--requests", "3", "--cycles", "1", "--variants", "default,opt-in"],
     "added per pod of the namespace"),
    ("apiserver_pod_create.py", ["--requests", "3", "--cycles", "1", "--profiles", "2"], "profiles-2"),
])
def test_a_real_apiserver_benchmark_runs_or_says_why_not(script: str, args: list[str], printed: str) -> None:
    """With a real apiserver configured (harness/real_apiserver.py), tiny sizes run; without one, the script says
    so and exits 0."""
    from harness import real_apiserver

    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stderr[-2000:]
    reason = real_apiserver.skip_reason()
    assert (f"skipped: {reason}" if reason else printed) in done.stdout, done.stdout[-2000:]


def test_the_real_node_benchmark_says_why_not_without_one() -> None:
    """bench/real_node.py without the parts says so and exits 0; with them it takes minutes and must run alone
    (a kubelet removes the pod cgroups of the kernel tests running beside it), so it is not started here."""
    from harness import real_node

    reason = real_node.skip_reason()
    if reason is None:
        pytest.skip("a real node is configured: run bench/real_node.py on its own (docs/agent.md)")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "real_node.py"), "--minutes", "0.1"], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"skipped: {reason}" in done.stdout
