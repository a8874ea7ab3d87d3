#!/usr/bin/env python3
"""`colocation-webhook audit` over `kubectl get pods -A -o json` output: objects a second and peak memory.

Writes a List of N pods as kubectl prints it (indented JSON; the recorded pod's shape, with managedFields and
status): a third plain pods in an unprofiled namespace (they agree), a third batch pods in the example's profiled
namespace (the profile and the batch conversion would change them), a third pods that mix batch-cpu and cpu
(denied). Then runs the audit as its own process pinned to one core (`taskset -c 0`) on the embedded example
state, `-o summary`, and reports wall time, objects a second and the process's peak resident memory (its
``ru_maxrss``) by size: flat in N means the file is streamed, not loaded.

    python bench/audit_files.py [--sizes 10000,100000] [--format json|yaml]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "fixtures" / "api" / "pods-list-field-selector-node.json"


def pods() -> list[dict[str, Any]]:
    """Three pods of the recorded shape: one that agrees, one the rules change, one they deny."""
    base = json.loads(RECORDED.read_text())["response"]["body"]["items"][0]
    base["kind"], base["apiVersion"] = "Pod", "v1"
    plain = copy.deepcopy(base)
    plain["metadata"]["namespace"] = "default"
    plain["metadata"]["labels"] = {"app": "web"}
    plain["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": "256Mi"}}
    plain["spec"].pop("priorityClassName", None)
    plain["spec"].update(priority=0, preemptionPolicy="PreemptLowerPriority")  # as the apiserver stored it
    plain["spec"]["schedulerName"] = "default-scheduler"
    batch = copy.deepcopy(base)
    batch["metadata"]["labels"] = {"app": "batch", "koordinator.sh/enable-colocation": "true"}
    batch["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"},
                                                   "limits": {"cpu": "2", "memory": "2Gi"}}
    batch["spec"].pop("priorityClassName", None)
    mixed = copy.deepcopy(base)
    mixed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    return [plain, batch, mixed]


def write_list(path: Path, n: int, fmt: str) -> None:
    """A List of ``n`` pods, written an item at a time (the benchmark itself must not hold them all)."""
    shapes = pods()
    with path.open("w") as f:
        if fmt == "json":
            f.write('{\n    "apiVersion": "v1",\n    "items": [\n')
            for i in range(n):
                p = shapes[i % 3]
                p["metadata"]["name"] = f"pod-{i}"
                text = json.dumps(p, indent=4)
                f.write("        " + text.replace("\n", "\n        ") + (",\n" if i < n - 1 else "\n"))
            f.write('    ],\n    "kind": "List",\n    "metadata": {\n        "resourceVersion": ""\n    }\n}\n')
        else:
            f.write("apiVersion: v1\nitems:\n")
            for i in range(n):
                p = shapes[i % 3]
                p["metadata"]["name"] = f"pod-{i}"
                text = yaml.safe_dump([p], sort_keys=True)
                f.write(text)
            f.write("kind: List\nmetadata:\n  resourceVersion: \"\"\n")


def audit(path: Path) -> tuple[float, float, str]:
    """(seconds, peak MiB, summary) of one audit run in its own process, on one core."""
    cmd = [sys.executable, "-m", "webhook.cli.webhook", "audit", "-f", str(path), "-o", "summary"]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode not in (0, 1):
        raise SystemExit(f"audit failed ({done.returncode}): {done.stderr}")
    # ru_maxrss of children is the largest of any child so far: sizes run in increasing order
    return seconds, max(peak, before) / 1024, done.stdout + done.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="pods per run, comma-separated, increasing")
    ap.add_argument("--format", choices=("json", "yaml"), default="json")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    print(f"audit -f (kubectl get pods -A -o {args.format}), one core, embedded example state; "
          f"machine: {os.cpu_count()} CPUs")
    print(f"{'pods':>8} {'file MiB':>9} {'seconds':>8} {'objects/s':>10} {'peak RSS':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"pods.{args.format}"
            write_list(path, n, args.format)
            size = path.stat().st_size / 2**20
            seconds, peak, out = audit(path)
            print(f"{n:>8} {size:>9.0f} {seconds:>8.1f} {n / seconds:>10.0f} {peak:>7.1f} MiB")
            last = out
            path.unlink()
    print(last.rstrip())
    print("target: >= 5000 objects/s on one core; peak memory flat in the object count")
    return 0


if __name__ == "__main__":
    sys.exit(main())
