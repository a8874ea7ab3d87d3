#!/usr/bin/env python3
"""What the admission policies add to a pod create, measured on a real kube-apiserver.

Each create is a server dry-run (``POST .../pods?dryRun=All``): the apiserver runs defaulting and the whole admission
chain, stores nothing. Its wall time is taken on a warm keep-alive connection; what a policy set adds is the p50 with
it minus the p50 with none, in the same run (the machine is noisy: compare within a run). Policy sets:

- ``none``: no ValidatingAdmissionPolicy.
- ``pod-invariants``: manifests/components/admission-policies/pod-invariants.yaml (every pod CREATE and UPDATE).
- ``admission-policies``: every policy of manifests/components/admission-policies (as its kustomization lists them).
- ``profiles-N`` (N = 1, 10, 100): the per-profile policies ``colocation-webhook policies --cluster-state DIR``
  renders from a folder holding Koordinator's PriorityClasses (manifests/koordinator/priorityclasses.yaml), the
  CRD, a Namespace labelled koordinator.sh/enable-colocation=true and N ClusterColocationProfiles shaped as
  manifests/examples/colocation-profile.yaml, each with its own pod selector (only those policies, not the
  invariants the command also prints).

- ``mutating`` (Kubernetes 1.36+): manifests/components/mutating-policies (the band conversion and the
  extended-resource-spec annotation as MutatingAdmissionPolicies, webhook/policies/mutating.py).
- ``map-profiles-N``: what ``colocation-webhook policies --mutating --cluster-state DIR`` renders for the same N
  profiles: one MutatingAdmissionPolicy per profile, bound by the profile's selectors, and the two above.
- ``map-baked-N``: a shape not shipped: the same profiles in one MutatingAdmissionPolicy (a matchCondition on the
  pod's labels, then each profile's ops behind its selectors; the namespace's labels are tested in the patch, as
  ``namespaceObject`` is empty in matchConditions), and the two above. Where its expression passes the
  apiserver's size limit it is said so, not measured.

Pods, in that namespace: ``plain``, an LS pod no profile matches (cpu/memory); ``profiled``, a pod the first profile
matches, as the webhook converts it (QoS BE, koord-batch, batch resources): the profile policies evaluate only the
pods their binding selects, so ``plain`` pays N selector matches and ``profiled`` also one evaluation; and, for
the sets without validating policies (which refuse it), ``matched``: the pod the first profile matches as its user
writes it (cpu/memory, no class), which the mutating policies convert. A policy set is measured once probe creates
are answered as it answers them (policies take effect a moment after they are written: the apiserver's informers).

    COLOCATION_TEST_APISERVER=DIR python bench/apiserver_pod_create.py [--requests 200] [--cycles 2]
        [--profiles 1,10,100] [--variants none,mutating,map-profiles,map-baked,...]

(or ``COLOCATION_TEST_KUBECONFIG=FILE``, harness/real_apiserver.py). Without either it says so and exits 0. On a
cluster it did not start, every binding is limited to the bench's namespace. Bounded: at most ``--seconds`` per
set per cycle; every object it made deleted at the end (Koordinator's PriorityClasses only if it created them).
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.apiserver_evictions import VAP, VAPB, Caller, client_config, pct  # noqa: E402
from harness import real_apiserver  # noqa: E402
from webhook.policies import mutating  # noqa: E402
from webhook.policies.profiles import selector_cel  # noqa: E402

ADMISSION_POLICIES = ROOT / "manifests" / "components" / "admission-policies"
KOORDINATOR = ROOT / "manifests" / "koordinator"
EXAMPLE_PROFILE = ROOT / "manifests" / "examples" / "colocation-profile.yaml"
ENABLED = {"koordinator.sh/enable-colocation": "true"}
PROFILE_LABEL = "colocation-bench/profile"
REFUSED_BY = "ValidatingAdmissionPolicy '"
MAP = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
MAPB = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings"
PATHS = {"ValidatingAdmissionPolicy": VAP, "ValidatingAdmissionPolicyBinding": VAPB, "MutatingAdmissionPolicy": MAP,
         "MutatingAdmissionPolicyBinding": MAPB}
# The apiserver's limit on one CEL expression, in code points (it refuses a longer one: "expression code point size
# exceeds limit").
EXPRESSION_LIMIT = 100_000


def mutating_family(variant: str) -> bool:
    return variant == "mutating" or variant.startswith("map-")


def profile_count(variant: str) -> int:
    return int(variant.rsplit("-", 1)[1]) if variant.rsplit("-", 1)[-1].isdigit() else 0


def pod(name: str, labels: dict[str, str], converted: bool) -> dict[str, Any]:
    """An LS pod (cpu/memory) or, ``converted``, a BE pod as the webhook leaves it (koord-batch, batch resources)."""
    if converted:
        resources = {"requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
                     "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "2Gi"}}
        labels = {**labels, "koordinator.sh/qosClass": "BE"}
        extra: dict[str, Any] = {"priorityClassName": "koord-batch", "schedulerName": "koord-scheduler"}
    else:
        resources = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}
        extra = {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {**extra, "containers": [{
                "name": "app", "image": "registry.example.com/app:1.0", "args": ["--port", "8080"],
                "env": [{"name": "MODE", "value": "serve"}], "ports": [{"name": "http", "containerPort": 8080}],
                "resources": resources}]}}


def converted(body: dict[str, Any] | None) -> bool:
    return body is not None and "kubernetes.io/batch-cpu" in body["spec"]["containers"][0]["resources"]["requests"]


def baked(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-profile mutating policies of ``objs`` (``render_mutating``'s) as one policy and binding: a
    matchCondition on the pod's labels, each profile's ops behind its selectors, the conversion once."""
    policies = [o for o in objs if o["kind"] == "MutatingAdmissionPolicy"
                and o["metadata"]["name"].startswith(mutating.PREFIX)]
    bindings = {o["spec"]["policyName"]: o for o in objs if o["kind"] == "MutatingAdmissionPolicyBinding"}
    first = bindings[policies[0]["metadata"]["name"]]["spec"]["matchResources"]
    pods, branches = [], []
    for p in policies:
        match = bindings[p["metadata"]["name"]]["spec"]["matchResources"]
        if match["namespaceSelector"] != first["namespaceSelector"]:
            raise RuntimeError("baked: the bench's profiles share one namespaceSelector")
        selected = selector_cel(match.get("objectSelector"), "object.metadata.labels")
        pods.append(f"({selected})")
        # Each profile's own patch: its ops, then the conversion of its class's band (the same for all here).
        branches.append(f"{selected} ? ({p['spec']['mutations'][0]['jsonPatch']['expression']})")
    ns = dict(first["namespaceSelector"])
    ns["matchExpressions"] = [e for e in ns.get("matchExpressions", []) if e["key"] != "kubernetes.io/metadata.name"]
    patch = f"!({selector_cel(ns, 'namespaceObject.metadata.labels')}) ? [] : " + " : ".join(branches) + " : []"
    name = "colocation-profiles-baked"
    policy = {"apiVersion": mutating.API, "kind": "MutatingAdmissionPolicy",
              "metadata": {"name": name, "labels": dict(mutating.LABELS)},
              "spec": {**{k: v for k, v in policies[0]["spec"].items() if k != "mutations"},
                       "matchConditions": [{"name": "profiles", "expression": " || ".join(pods)}],
                       "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": patch}}]}}
    binding = {"apiVersion": mutating.API, "kind": "MutatingAdmissionPolicyBinding",
               "metadata": {"name": name, "labels": dict(mutating.LABELS)},
               "spec": {"policyName": name, "matchResources": {"namespaceSelector": first["namespaceSelector"]}}}
    return [policy, binding]


class Bench:
    def __init__(self, admin: Caller, scoped: bool) -> None:
        self.admin, self.scoped = admin, scoped
        self.id = uuid.uuid4().hex[:6]
        self.prefix = f"colo-bench-{self.id}"
        self.ns = self.prefix
        self.labels = {"colocation-bench": self.id}
        self.made_classes: list[str] = []
        self.rendered: dict[int, list[dict[str, Any]]] = {}

    # -- objects --------------------------------------------------------------------------------------------
    def setup(self) -> None:
        self.admin.ok("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": self.ns, "labels": {**ENABLED, **self.labels}}})
        for pc in yaml.safe_load_all((KOORDINATOR / "priorityclasses.yaml").read_text()):
            status, out, _ = self.admin.call("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", pc)
            if status == 201:
                self.made_classes.append(pc["metadata"]["name"])
            elif status != 409:
                raise RuntimeError(f"PriorityClass {pc['metadata']['name']}: HTTP {status}: {out.get('message')}")

    def teardown(self) -> None:
        select = quote(f"colocation-bench={self.id}")
        for path in (VAPB, VAP, MAPB, MAP):
            self.admin.call("DELETE", f"{path}?labelSelector={select}")
        for name in self.made_classes:
            self.admin.call("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
        self.admin.call("DELETE", f"/api/v1/namespaces/{self.ns}")

    def profile(self, i: int) -> dict[str, Any]:
        doc = yaml.safe_load(EXAMPLE_PROFILE.read_text())
        doc["metadata"] = {"name": f"{self.prefix}-p{i}"}
        doc["spec"]["selector"] = {"matchLabels": {PROFILE_LABEL: f"p{i}"}}
        return dict(doc)

    def render(self, n: int, mutating_policies: bool = False) -> list[dict[str, Any]]:
        """The per-profile policies and bindings ``colocation-webhook policies --cluster-state`` prints for n
        profiles (``--mutating``: the mutating ones, with the band conversion and the annotation)."""
        key = -n if mutating_policies else n
        if key in self.rendered:
            return self.rendered[key]
        folder = Path(tempfile.mkdtemp(prefix="colocation-bench-state-"))
        try:
            shutil.copy(KOORDINATOR / "priorityclasses.yaml", folder)
            shutil.copy(KOORDINATOR / "crd-clustercolocationprofiles.yaml", folder)
            (folder / "namespace.yaml").write_text(yaml.safe_dump(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns, "labels": ENABLED}}))
            (folder / "profiles.yaml").write_text(yaml.safe_dump_all([self.profile(i) for i in range(n)]))
            cli = Path(sys.executable).with_name("colocation-webhook")
            command = [str(cli)] if cli.is_file() else [sys.executable, "-m", "webhook.cli.webhook"]
            done = subprocess.run([*command, "policies", "--cluster-state", str(folder), "-o", "json",
                                   *(["--mutating"] if mutating_policies else [])],
                                  capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
            if done.returncode != 0:
                raise RuntimeError(f"colocation-webhook policies: exit {done.returncode}: {done.stderr.strip()}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        items: list[dict[str, Any]] = json.loads(done.stdout)["items"]
        if mutating_policies:
            objs = items
            if len(objs) != 2 * n + 4:
                raise RuntimeError(f"policies --mutating printed {len(objs)} objects for {n} profiles")
        else:
            objs = [o for o in items
                    if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "profile-policy"]
            if len(objs) != 2 * n:
                raise RuntimeError(f"colocation-webhook policies printed {len(objs)} profile objects for {n} profiles")
        self.rendered[key] = objs
        return objs

    def policies(self, variant: str) -> list[dict[str, Any]]:
        if variant == "none":
            return []
        if variant == "pod-invariants":
            objs = list(yaml.safe_load_all((ADMISSION_POLICIES / "pod-invariants.yaml").read_text()))
        elif variant == "admission-policies":
            listed = yaml.safe_load((ADMISSION_POLICIES / "kustomization.yaml").read_text())["resources"]
            objs = [d for f in listed for d in yaml.safe_load_all((ADMISSION_POLICIES / f).read_text())]
        elif variant == "mutating":
            objs = [*mutating.band_mutation([]), *mutating.extended_resource_spec_mutation()]
        elif variant.startswith("map-profiles-"):
            objs = self.render(profile_count(variant), mutating_policies=True)
        elif variant.startswith("map-baked-"):
            rendered = self.render(profile_count(variant), mutating_policies=True)
            objs = [*baked(rendered), *(o for o in rendered if not o["metadata"]["name"].startswith(mutating.PREFIX))]
        else:
            objs = self.render(profile_count(variant))
        return [self._named(o) for o in objs if o]

    def too_large(self, variant: str) -> str:
        """Why the apiserver would refuse the variant's policies (an expression over its size limit), or ''."""
        for obj in self.policies(variant):
            for m in (obj.get("spec") or {}).get("mutations") or []:
                size = len(m["jsonPatch"]["expression"])
                if size > EXPRESSION_LIMIT:
                    return f"its expression has {size} code points, over the apiserver's {EXPRESSION_LIMIT}"
        return ""

    def _named(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj["metadata"]
        if self.prefix not in meta["name"]:
            meta["name"] = f"{self.prefix}-{meta['name']}"
            if obj["kind"].endswith("Binding"):
                obj["spec"]["policyName"] = f"{self.prefix}-{obj['spec']['policyName']}"
        meta["labels"] = {**meta.get("labels", {}), **self.labels}
        if self.scoped and obj["kind"].endswith("Binding"):
            selector = obj["spec"].setdefault("matchResources", {}).setdefault("namespaceSelector", {})
            selector["matchLabels"] = {**selector.get("matchLabels", {}), **self.labels}
        return obj

    # -- probes ---------------------------------------------------------------------------------------------
    def create(self, caller: Caller, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
        return caller.call("POST", f"/api/v1/namespaces/{self.ns}/pods?dryRun=All", body)

    def refused_by(self, body: dict[str, Any]) -> str:
        status, out, _ = self.create(self.admin, body)
        if status == 201:
            return ""
        message = str(out.get("message", ""))
        if REFUSED_BY in message:
            return message.split(REFUSED_BY, 1)[1].split("'", 1)[0]
        raise RuntimeError(f"probe: HTTP {status}: {message}")

    def mixing(self) -> dict[str, Any]:
        body = pod("probe-mixing", {}, converted=False)
        body["spec"]["containers"][0]["resources"]["requests"]["kubernetes.io/batch-cpu"] = "500"
        return body

    def install(self, variant: str) -> float:
        """Replace the bench's policies with ``variant``'s; seconds until the probe creates are answered as it
        answers them: the mixing pod refused by the invariants (or not), each profile's unconverted pod refused
        by its policy, converted by its mutating policy, or admitted as written."""
        select = quote(f"colocation-bench={self.id}")
        for path in (VAPB, VAP, MAPB, MAP):
            self.admin.ok("DELETE", f"{path}?labelSelector={select}")
        objs = self.policies(variant)
        for obj in objs:
            self.admin.ok("POST", PATHS[obj["kind"]], obj)
        n = profile_count(variant)
        invariants = variant in ("pod-invariants", "admission-policies")
        mutates = mutating_family(variant)
        band = pod("probe-band", {}, converted=False)
        band["spec"]["priorityClassName"] = "koord-batch"
        started = time.monotonic()
        pending = list(range(max(n, 1)))  # profile 0 probed even without profile policies: must be admitted
        while True:
            if time.monotonic() - started > 120:
                raise RuntimeError(f"{variant}: the policies were not in effect after 120 s")
            mixing = self.refused_by(self.mixing())
            band_made = self.create(self.admin, band)
            if bool(mixing) != invariants or converted(band_made[1] if band_made[0] == 201 else None) != mutates:
                time.sleep(0.2)
                continue
            still = []
            for i in pending:
                unconverted = pod(f"probe-p{i}", {PROFILE_LABEL: f"p{i}", **ENABLED}, converted=False)
                if mutates:
                    status, out, _ = self.create(self.admin, unconverted)
                    if converted(out if status == 201 else None) != (n > 0):
                        still.append(i)
                elif bool(self.refused_by(unconverted)) != (n > 0):
                    still.append(i)
            if not still:
                return time.monotonic() - started
            pending = still
            time.sleep(0.2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200, help="creates per pod per policy set (default 200)")
    ap.add_argument("--cycles", type=int, default=2,
                    help="the policy sets are measured in turn this many times, the order reversed each time, and "
                         "the samples pooled (default 2)")
    ap.add_argument("--seconds", type=float, default=60, help="at most this long per set per cycle (default 60)")
    ap.add_argument("--profiles", default="1,10,100", help="profile counts (default 1,10,100)")
    ap.add_argument("--variants", default="none,pod-invariants,admission-policies,profiles,mutating,map-profiles,"
                    "map-baked", help="the sets to measure; profiles, map-profiles and map-baked at each count "
                    "(default: all)")
    args = ap.parse_args()
    reason = real_apiserver.skip_reason()
    if reason:
        print(f"apiserver_pod_create: skipped: {reason}")
        return 0
    counts = [int(n) for n in args.profiles.split(",") if n]
    variants = []
    for v in args.variants.split(","):
        variants += [f"{v}-{n}" for n in counts] if v in ("profiles", "map-profiles", "map-baked") else [v]
    if "none" not in variants:
        variants.insert(0, "none")
    per_cycle = max(3, -(-args.requests // args.cycles))
    begun = time.monotonic()
    with real_apiserver.cluster() as cluster:
        admin = Caller(client_config(cluster.kubeconfig))
        bench = Bench(admin, scoped=not cluster.started)
        try:
            bench.setup()
            pods = {"plain": pod("plain", {"app": "web"}, converted=False),
                    "profiled": pod("profiled", {PROFILE_LABEL: "p0", **ENABLED}, converted=True),
                    "matched": pod("matched", {PROFILE_LABEL: "p0", **ENABLED}, converted=False)}
            skipped = {}
            for v in variants:
                why = bench.too_large(v) if v.startswith("map-baked-") else ""
                if why:
                    skipped[v] = why
            variants = [v for v in variants if v not in skipped]

            def measured(variant: str) -> list[str]:
                # A validating set refuses the unconverted pod: it is measured where nothing refuses it.
                return ["plain", "profiled", "matched"] if variant == "none" or mutating_family(variant) else [
                    "plain", "profiled"]

            for name, body in pods.items():
                status, out, _ = bench.create(admin, body)
                if status != 201:
                    raise RuntimeError(f"the {name} pod is refused with no policy: HTTP {status}: {out.get('message')}")
            print(f"kube-apiserver {cluster.version} ({'started by the bench' if cluster.started else 'given'}); "
                  "server dry-run pod creates, ms per request: p50 / p90 / p99 of n; (+x) = p50 minus the p50 with "
                  "no policy")
            samples: dict[str, dict[str, list[float]]] = {v: {name: [] for name in measured(v)} for v in variants}
            waited = dict.fromkeys(variants, 0.0)
            for cycle in range(args.cycles):
                for variant in (variants if cycle % 2 == 0 else variants[::-1]):
                    waited[variant] = max(waited[variant], bench.install(variant))
                    for name in measured(variant):   # warm-up
                        bench.create(admin, pods[name])
                    deadline = time.monotonic() + args.seconds
                    for _ in range(per_cycle):
                        for name in measured(variant):
                            status, out, took = bench.create(admin, pods[name])
                            if status != 201:
                                raise RuntimeError(f"{variant}: {name} refused: HTTP {status}: {out.get('message')}")
                            samples[variant][name].append(took)
                        if time.monotonic() > deadline:
                            break
            base = {name: statistics.median(samples["none"][name]) for name in pods}
            for variant in variants:
                cells = []
                for name, got in samples[variant].items():
                    p50 = statistics.median(got)
                    added = "" if variant == "none" else f" ({(p50 - base[name]) * 1000:+.2f})"
                    cells.append(f"{name} {p50 * 1000:.2f} / {pct(got, 0.9) * 1000:.2f} / "
                                 f"{pct(got, 0.99) * 1000:.2f} of {len(got)}{added}")
                print(f"  {variant:<20} " + "   ".join(cells) + f"   [in effect after {waited[variant]:.1f} s]",
                      flush=True)
            for variant, why in skipped.items():
                print(f"  {variant:<20} not measured: {why}", flush=True)
        finally:
            bench.teardown()
    print(f"done in {time.monotonic() - begun:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
