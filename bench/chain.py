"""In-process cost of the admission chains per review, as the profile count and the pod grow.

    cd <repo> && PYTHONPATH=$PWD python bench/chain.py [--rounds N] [--batches N]

Input: the recorded koord-batch pod with init containers
(fixtures/admission/v1-mutate-create-koord-batch-init-containers.json). Mutate runs on it as
recorded; validate runs on the mutated pod, as the apiserver sends it after the mutating webhook.

Two tables, µs per review (best of ``--batches`` batches of CPU time, taken round robin over all
figures, so a burst of other load on a shared machine inflates no figure):
  1. 1, 10, 100, 1000 ClusterColocationProfiles (one matches), the recorded pod.
  2. Pods with 1, 10, 50 regular containers (the recorded container duplicated), 10 profiles.
Each row shows mutate, validate, their sum, the whole /mutate request as the server handles it
(decode body, chain, encode answer), and the growth of the sum against the previous row beside the
growth of the input: a time factor at or below the size factor is linear or better growth.

Targets (issue 3 "Speed"): mutate + validate <= 150 µs with 10 profiles, <= 2 ms with 1000 profiles;
(issue 6 "chain"): linear or better growth in profiles and in containers.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from msgspec.structs import replace

from webhook.admission import chain
from webhook.admission.domain.patch import apply_ops
from webhook.admission.review import decode_review, encode_response, review_from_dict
from webhook.cluster.files import FilesSource
from webhook.cluster.sources import example_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

FIXTURE = Path(__file__).resolve().parents[1] / "examples" / "admissionreview-koord-batch.json"
PROFILE_COUNTS = (1, 10, 100, 1000)
CONTAINER_COUNTS = (1, 10, 50)
TARGETS_US = {10: 150.0, 1000: 2000.0}  # profiles -> mutate + validate


def profiles(n: int) -> list[dict[str, Any]]:
    """``n`` profiles of the usual shapes; exactly one of them (the last) matches the recorded pod."""
    out = []
    for i in range(n - 1):
        spec: dict[str, Any] = {"namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}}}
        kind = i % 4
        if kind == 0:
            spec["selector"] = {"matchLabels": {"app": f"app-{i}"}}
        elif kind == 1:
            spec["selector"] = {"matchExpressions": [{"key": "team", "operator": "In", "values": [f"t{i}", "x"]}]}
        elif kind == 2:
            spec["selector"] = {"matchLabels": {"app": f"svc-{i}", "tier": "batch"}}
            spec["probability"] = "50%"
        else:
            spec["namespaceSelector"] = {"matchLabels": {"team": f"other-{i}"}}
        spec.update(qosClass="BE", priorityClassName="koord-batch", labels={"profile": str(i)})
        out.append({"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                    "metadata": {"name": f"profile-{i:04d}"}, "spec": spec})
    out.append({"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                "metadata": {"name": "batch-init"},
                "spec": {"selector": {"matchLabels": {"app": "batch-init"}}, "qosClass": "BE",
                         "priorityClassName": "koord-batch", "koordinatorPriority": 1000,
                         "labels": {"koordinator.sh/mutated": "true"}}})
    return out


def state_with(n: int) -> ClusterState:
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(example_folder(), state).load()
    state.replace("ClusterColocationProfile", profiles(n))
    return state


def review_with_containers(raw: dict[str, Any], n: int) -> dict[str, Any]:
    """The recorded review with its regular container repeated ``n`` times (unique names)."""
    out = copy.deepcopy(raw)
    spec = out["request"]["object"]["spec"]
    template = spec["containers"][0]
    spec["containers"] = [{**copy.deepcopy(template), "name": f"{template['name']}-{i}"} for i in range(n)]
    return out


class Timer:
    """Best-of-N CPU time per call for many functions, measured round robin: batch i of every function
    runs before batch i + 1 of any, so a burst of load on a shared machine spoils one batch of each
    figure rather than every batch of one figure."""

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.jobs: list[tuple[Callable[[], Any], int]] = []

    def add(self, fn: Callable[[], Any], rounds: int) -> int:
        for _ in range(min(200, rounds)):  # warm caches (lru, compiled profiles) first
            fn()
        self.jobs.append((fn, rounds))
        return len(self.jobs) - 1

    def run(self) -> list[float]:
        """µs per call for each added function, in the order added."""
        best = [float("inf")] * len(self.jobs)
        for _ in range(self.batches):
            for i, (fn, rounds) in enumerate(self.jobs):
                start = time.process_time()
                for _ in range(rounds):
                    fn()
                best[i] = min(best[i], (time.process_time() - start) / rounds)
        return [b * 1e6 for b in best]


def add_review(timer: Timer, raw: dict[str, Any], state: ClusterState, rounds: int) -> tuple[int, int, int, int]:
    """Queue mutate, validate and the whole /mutate request for one review; (job ids..., patch ops)."""
    settings = chain.Settings()
    body = orjson.dumps(raw)
    req = review_from_dict(raw).request
    first = chain.mutate(req, state, settings)
    assert first.allowed, first.message
    final = apply_ops(orjson.loads(orjson.dumps(req.object)), first.patch)
    vreq = replace(req, object=final)
    checked = chain.validate(vreq, state, settings)
    assert checked.allowed, checked.message

    def whole() -> None:
        review = decode_review(body)
        encode_response(review.apiVersion, review.request.uid, chain.mutate(review.request, state, settings))

    m = timer.add(lambda: chain.mutate(req, state, settings), rounds)
    v = timer.add(lambda: chain.validate(vreq, state, settings), rounds)
    w = timer.add(whole, rounds)
    return m, v, w, len(first.patch)


def figures(jobs: tuple[int, int, int, int], times: list[float]) -> dict[str, float]:
    m, v, w, ops = jobs
    return {"mutate": times[m], "validate": times[v], "sum": times[m] + times[v], "whole": times[w], "ops": ops}


def table(title: str, unit: str, rows: list[tuple[int, dict[str, float]]]) -> None:
    print(f"\n{title}")
    print(f"{unit:>10}  {'mutate':>9}  {'validate':>9}  {'sum':>9}  {'/mutate':>9}  {'ops':>4}  growth (sum vs size)")
    prev: tuple[int, dict[str, float]] | None = None
    for size, r in rows:
        growth = "" if prev is None else f"x{r['sum'] / prev[1]['sum']:.2f} for x{size / prev[0]:g}"
        print(f"{size:>10}  {r['mutate']:>9.1f}  {r['validate']:>9.1f}  {r['sum']:>9.1f}  {r['whole']:>9.1f}  "
              f"{int(r['ops']):>4}  {growth}")
        prev = (size, r)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=300, help="calls per batch for the recorded pod")
    ap.add_argument("--batches", type=int, default=21, help="batches per figure; the best one counts")
    args = ap.parse_args()
    raw = json.loads(FIXTURE.read_bytes())
    print(f"pod: {FIXTURE.name}; µs per review, best of {args.batches} batches of CPU time")

    timer = Timer(args.batches)
    profile_jobs = [(n, add_review(timer, raw, state_with(n), args.rounds)) for n in PROFILE_COUNTS]
    state = state_with(10)
    container_jobs = [(n, add_review(timer, review_with_containers(raw, n), state, max(20, args.rounds // n)))
                      for n in CONTAINER_COUNTS]
    times = timer.run()
    by_profiles = [(n, figures(jobs, times)) for n, jobs in profile_jobs]
    table("profiles (recorded pod: 2 init containers, 1 container)", "profiles", by_profiles)
    table("containers (10 profiles; the recorded container repeated)", "containers",
          [(n, figures(jobs, times)) for n, jobs in container_jobs])

    print()
    for n, r in by_profiles:
        if n in TARGETS_US:
            verdict = "ok" if r["sum"] <= TARGETS_US[n] else "OVER"
            print(f"target {n} profiles: mutate + validate {r['sum']:.1f} µs <= {TARGETS_US[n]:g} µs: {verdict}")


if __name__ == "__main__":
    main()
