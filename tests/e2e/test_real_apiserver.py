"""The real-apiserver tier (harness/real_apiserver.py): what the apiserver compiles, validates and runs, proven on it.

Skipped unless pointed at a kube-apiserver 1.30 or newer (docs/policies.md, "Proving the policies on a real
apiserver"). With the webhook configurations installed and no replica answering (``failurePolicy: Ignore``):
- every shipped object of the default install, every component and overlay, the CRD and the policies that
  ``colocation-webhook policies --kubeconfig`` renders from the cluster are accepted (server-side apply; dry-run
  where a controller would act);
- mixing and whole-unit violations are refused by the invariants policy with the webhook's text, a
  profile-matched pod and a band pod still asking for cpu/memory are refused, a plain pod and a converted band pod
  admitted;
- for a table of pods the webhook does not mutate, the apiserver's verdict and message equal the validating
  chain's (``review``) on the very object the apiserver built (its defaults included);
- ``policies --check`` finds the applied policies up to date, and one edited in the cluster stale.

All the tests of this tier share one apiserver and run on one worker (``xdist_group``); each binds the policies it
needs and unbinds them after, waiting for the apiserver to act on the change.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import real_apiserver
from tests.policies.test_invariants import BE, CASES, B, _container, _expected, _pod
from webhook.admission import chain
from webhook.admission.review import request_from_dict
from webhook.cli import webhook as webhook_cli
from webhook.cluster.profiles import SKIP_UPDATE_RESOURCES
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.policies import invariants as policies
from webhook.policies import profiles as profile_policies

pytestmark = pytest.mark.xdist_group("real-apiserver")

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
ENABLED = {"koordinator.sh/enable-colocation": "true"}
PROFILE = "colocation-profile-example"
# Kinds of other projects' CRDs the components use: their definitions are not ours to ship.
FOREIGN_KINDS = {"PodMonitor", "PrometheusRule", "Certificate", "Issuer"}
# The classes the table's priorities need beyond Koordinator's four (the Priority plugin sets spec.priority from a
# class; a pod may not write it).
CLASSES = {9000: "koord-prod", 7000: "koord-mid", 5000: "koord-batch", 3000: "koord-free"}
DENIED = "denied request: "
MUTATING_MINOR = 36


@pytest.fixture(scope="module")
def cluster() -> Iterator[real_apiserver.Cluster]:
    with real_apiserver.for_tests() as c:
        c.kubectl("apply", "--server-side", "-f", str(MANIFESTS / "koordinator" / "crd-clustercolocationprofiles.yaml"))
        c.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                  "crd/clustercolocationprofiles.config.koordinator.sh")
        c.kubectl("apply", "--server-side", "-f", str(MANIFESTS / "koordinator" / "priorityclasses.yaml"))
        extra = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": f"test-{v}"},
                  "value": v} for v in (9500, 7500)]
        runtime = [{"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": f"test-{n}"},
                    "handler": "runc", "overhead": {"podFixed": {"cpu": cpu}}} for n, cpu in (("250m", "250m"),
                                                                                             ("1", "1"))]
        _apply(c, [*extra, *runtime])
        # The webhook configurations as installed, and no replica: every call fails and is ignored.
        c.kubectl("apply", "--server-side", "-f", str(MANIFESTS / "base" / "webhook-configurations.yaml"))
        yield c


def _apply(c: real_apiserver.Cluster, docs: list[dict[str, Any]], *flags: str) -> str:
    text = yaml.safe_dump_all(docs, sort_keys=False)
    return c.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=colocation-test", *flags,
                     "-f", "-", input=text).stdout


def _delete(c: real_apiserver.Cluster, docs: list[dict[str, Any]]) -> None:
    c.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=yaml.safe_dump_all(docs))


def _namespace(c: real_apiserver.Cluster, labels: dict[str, str] | None = None) -> str:
    name = f"colo-real-{uuid.uuid4().hex[:8]}"
    _apply(c, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}])
    return name


def _create(c: real_apiserver.Cluster, pod: dict[str, Any], dry_run: bool = True) -> tuple[bool, str]:
    """(admitted, the refusal's message after ``denied request: ``, or the whole error)."""
    flags = ["--dry-run=server"] if dry_run else []
    done = c.kubectl("create", *flags, "-o", "json", "-f", "-", input=json.dumps(pod), check=False)
    if done.returncode == 0:
        return True, ""
    err = done.stderr.strip()
    return False, err.split(DENIED, 1)[1] if DENIED in err else err


_wait = real_apiserver.wait_until


@contextlib.contextmanager
def bound(c: real_apiserver.Cluster, docs: list[dict[str, Any]], *probes: dict[str, Any]) -> Iterator[None]:
    """Apply policies and bindings; return once every probe (a pod each refuses: the apiserver takes up each
    policy on its own) is refused, and, at the end, delete them and wait until every probe is admitted again."""
    _apply(c, docs)
    try:
        _wait("the new policies", lambda: not any(_create(c, p)[0] for p in probes))
        yield
    finally:
        _delete(c, docs)
        _wait("the deleted policies", lambda: all(_create(c, p)[0] for p in probes))


def _pod_in(ns: str, name: str, labels: dict[str, str] | None = None, resources: dict[str, Any] | None = None,
            **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"containers": [{"name": "app", "image": "busybox", "resources": resources or {}}], **spec}}


def _invariants() -> list[dict[str, Any]]:
    return [policies.policy(), policies.binding()]


def _kustomize(path: Path) -> list[dict[str, Any]]:
    out = subprocess.run([shutil.which("kubectl") or "kubectl", "kustomize", str(path)], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


# -- every shipped object ------------------------------------------------------------------------------------------
def _targets(tmp: Path) -> dict[str, Path]:
    """Every kustomization a user applies: the default install, the overlays (generated-certs after its
    documented `certs generate`), Koordinator's objects and each component."""
    tree = tmp / "manifests"
    shutil.copytree(MANIFESTS, tree, ignore=shutil.ignore_patterns("certs"))
    code = webhook_cli.main(["certs", "generate", "--service", "colocation-webhook", "--namespace",
                             "colocation-system", "--out", str(tree / "overlays" / "generated-certs" / "certs")])
    assert code == 0
    # Koordinator's first: the default install puts a quota into its namespace (docs/install.md, install order).
    found = {"koordinator": tree / "koordinator", "manifests": tree, "bootstrap": tree / "bootstrap"}
    found.update({f"overlays/{p.name}": p for p in sorted((tree / "overlays").iterdir())})
    found.update({f"components/{p.name}": p for p in sorted((tree / "components").iterdir())})
    return found


def test_every_shipped_object_is_accepted(cluster: real_apiserver.Cluster, tmp_path: Path) -> None:
    foreign: set[str] = set()
    for name, path in _targets(tmp_path).items():
        if name == "components/mutating-policies" and cluster.minor < MUTATING_MINOR:
            continue  # MutatingAdmissionPolicy v1: 1.36 (tests/e2e/test_real_apiserver_mutating.py)
        docs = _kustomize(path)
        if not docs:  # a component that only patches the install (beside-koordlet): the install with it
            overlay = tmp_path / f"with-{path.name}"
            overlay.mkdir()
            (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
                "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["../manifests"], "components": [f"../manifests/components/{path.name}"]}))
            docs = _kustomize(overlay)
        assert docs, name
        # Namespaces and CRDs for real (what comes after needs them), the rest as a server-side dry run: the
        # apiserver validates, defaults and admits each object as it would store it, and no controller acts.
        first = [d for d in docs if d["kind"] in ("Namespace", "CustomResourceDefinition")]
        rest = [d for d in docs if d["kind"] not in ("Namespace", "CustomResourceDefinition", *FOREIGN_KINDS)]
        foreign |= {d["kind"] for d in docs if d["kind"] in FOREIGN_KINDS}
        if first:
            _apply(cluster, first)
        if name == "components/network-policy":
            # Unedited, its placeholder is refused, as its kustomization says, rather than blocking the webhook;
            # with a CIDR, as an overlay of the user's own gives it, accepted.
            refused = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-",
                                      input=yaml.safe_dump_all(rest), check=False)
            assert refused.returncode != 0 and 'Invalid value: "CONTROL-PLANE-CIDR": must be a valid CIDR value' \
                in refused.stderr, refused.stderr
            rest = list(yaml.safe_load_all(yaml.safe_dump_all(rest).replace("CONTROL-PLANE-CIDR", "10.0.0.0/24")))
        out = _apply(cluster, rest, "--dry-run=server")
        assert out.count("serverside-applied (server dry run)") == len(rest), f"{name}: {out}"
    assert foreign == FOREIGN_KINDS  # what the tier leaves unproven: the Prometheus operator's and cert-manager's


def test_the_policies_rendered_from_the_cluster_are_accepted_and_check_up_to_date(
        cluster: real_apiserver.Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = yaml.safe_load((MANIFESTS / "examples" / "colocation-profile.yaml").read_text())
    skipping = {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                "metadata": {"name": "keeps-cpu", "annotations": {SKIP_UPDATE_RESOURCES: "true"}},
                "spec": {"selector": {"matchLabels": {"app": "spark"}}, "qosClass": "BE"}}
    _apply(cluster, [profile, skipping])
    rendered: list[dict[str, Any]] = []
    try:
        assert webhook_cli.main(["policies", "--kubeconfig", str(cluster.kubeconfig)]) == 0
        rendered = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
        assert {d["metadata"]["name"] for d in rendered} == {
            policies.POLICY_NAME, profile_policies.BAND_POLICY_NAME, "colocation-profile-" + PROFILE,
            "colocation-profile-keeps-cpu"}
        _apply(cluster, rendered)
        applied = tmp_path / "applied.yaml"

        def check() -> tuple[int, str]:
            applied.write_text(cluster.kubectl(
                "get", "validatingadmissionpolicies,validatingadmissionpolicybindings", "-l",
                "app.kubernetes.io/part-of=colocation-webhook", "-o", "yaml").stdout)
            code = webhook_cli.main(["policies", "--kubeconfig", str(cluster.kubeconfig), "--check", str(applied)])
            return code, capsys.readouterr().out

        assert check() == (0, "the applied policies are up to date (the pod invariants, the band conversion and "
                              "2 profile(s))\n")
        # Edited in the cluster, its digest annotation kept: stale all the same.
        cluster.kubectl("patch", "validatingadmissionpolicy", "colocation-profile-" + PROFILE, "--type=json",
                        "-p", json.dumps([{"op": "replace", "path": "/spec/validations/0/expression",
                                           "value": "true"}]))
        code, out = check()
        assert code == 1
        assert out == (f"ValidatingAdmissionPolicy/colocation-profile-{PROFILE}: profile {PROFILE}: stale: "
                       "spec.validations[0].expression: differs (edited in the cluster, or the cluster state changed "
                       "since it was applied)\n")
    finally:
        _delete(cluster, rendered)
        _delete(cluster, [profile, skipping])


# -- with the webhook down -----------------------------------------------------------------------------------------
def test_with_the_webhook_down_the_policies_refuse_what_it_would_have_changed_or_refused(
        cluster: real_apiserver.Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    ns = _namespace(cluster, ENABLED)
    profile = yaml.safe_load((MANIFESTS / "examples" / "colocation-profile.yaml").read_text())
    _apply(cluster, [profile])
    assert webhook_cli.main(["policies", "--kubeconfig", str(cluster.kubeconfig)]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    cpu = {"requests": {"cpu": "500m", "memory": "256Mi"}}
    mixing = _pod_in(ns, "mixing", labels=BE, priorityClassName="koord-batch",
                     resources={"requests": {**B, "cpu": "1"}})
    matched = _pod_in(ns, "matched", labels=dict(ENABLED), resources=cpu)
    band = _pod_in(ns, "band", priorityClassName="koord-batch", resources=cpu)
    try:
        with bound(cluster, docs, mixing, matched, band):
            admitted, message = _create(cluster, mixing)
            assert not admitted and message == _chain_message(_built(cluster, mixing))
            assert message.startswith('container "app" asks for both kubernetes.io/batch-cpu and cpu: ')

            fraction = _pod_in(ns, "fraction", labels=BE, priorityClassName="koord-batch",
                               resources={"requests": {"kubernetes.io/batch-cpu": "0.5"}})
            admitted, message = _create(cluster, fraction)
            # The apiserver hands admission its canonical form of a quantity ("0.5" is "500m"), to the webhook too.
            assert not admitted and message == _chain_message(_built(cluster, fraction))
            assert "must be a whole number" in message

            assert _create(cluster, matched) == (False, profile_policies.message(PROFILE))

            assert _create(cluster, band) == (False, (
                "the colocation webhook did not run on this pod: its priority 5000 is in the koord-batch band, whose "
                "pods ask for kubernetes.io/batch-cpu and kubernetes.io/batch-memory in place of cpu and memory, and "
                "it still asks for cpu or memory; create it again once the webhook is back"))
            mid = _pod_in(ns, "mid", priorityClassName="koord-mid", resources={"limits": {"memory": "1Gi"}})
            assert _create(cluster, mid)[1].startswith("the colocation webhook did not run on this pod: its priority "
                                                       "7000 is in the koord-mid band")

            # What the webhook would have made of them, and what it leaves alone, is admitted.
            converted = _pod_in(ns, "converted", labels=BE, priorityClassName="koord-batch", resources={
                "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "256Mi"}})
            assert _create(cluster, converted) == (True, "")
            assert _create(cluster, _pod_in(ns, "plain", resources=cpu)) == (True, "")
            assert _create(cluster, _pod_in(ns, "prod", priorityClassName="koord-prod", resources=cpu)) == (True, "")
            assert _create(cluster, _pod_in("kube-system", "system", priorityClassName="koord-batch",
                                            resources=cpu)) == (True, "")
    finally:
        _delete(cluster, [profile])


# -- the table: the apiserver's verdict is the chain's -------------------------------------------------------------
def _state() -> ClusterState:
    s = ClusterState(WEBHOOK_KINDS)
    s.replace_all({})
    return s


def _built(c: real_apiserver.Cluster, pod: dict[str, Any]) -> dict[str, Any]:
    """The object the apiserver builds of ``pod`` (defaults, priority, canonical quantities), as admission sees it:
    created as a dry run in a namespace no binding covers."""
    built: dict[str, Any] = json.loads(c.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(
        {**pod, "metadata": {**pod["metadata"], "namespace": "kube-system"}})).stdout)
    built["metadata"]["namespace"] = pod["metadata"]["namespace"]
    return built


def _chain_message(pod: dict[str, Any], old: dict[str, Any] | None = None) -> str:
    """What the validating chain says of the pod (the empty string: admitted), less what the policy leaves to
    the webhook (docs/policies.md)."""
    request = {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "",
               "name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"],
               "operation": "UPDATE" if old is not None else "CREATE", "object": pod, "oldObject": old,
               "userInfo": {"username": "alice"}}
    decision = chain.validate(request_from_dict(copy.deepcopy(request)), _state(), chain.Settings())
    allowed, message = _expected(decision)
    return "" if allowed else message


def _on_the_apiserver(pod: dict[str, Any], ns: str, name: str) -> dict[str, Any]:
    """A table pod as a user writes it: the class that gives its priority (the Priority plugin sets it), a
    RuntimeClass whose overhead it carries."""
    pod = copy.deepcopy(pod)
    pod["metadata"].update(name=name, namespace=ns)
    spec = pod["spec"]
    value = spec.pop("priority", None)
    if value is not None:
        spec["priorityClassName"] = CLASSES.get(value, f"test-{value}")
    overhead = spec.pop("overhead", None)
    if overhead is not None:
        spec["runtimeClassName"] = f"test-{overhead['cpu']}"
    # An extended resource (the legacy alibabacloud.com/ names) needs its limit, equal to its request.
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        res = c.get("resources") or {}
        for name, value in (res.get("requests") or {}).items():
            if "/" in name and not name.startswith("kubernetes.io/"):
                res.setdefault("limits", {})[name] = value
    return pod


MORE: list[tuple[str, dict[str, Any]]] = [  # beyond test_admission_policies.CASES: more of what the webhook leaves
    ("no resources", _pod([_container("app")])),
    ("LS at koord-prod with cpu", _pod([_container("app", {"cpu": "2"}, {"cpu": "2"})], labels={
        "koordinator.sh/qosClass": "LS"}, priority=9000)),
    ("batch in an init container and the container", _pod([_container("app", B)], init=[_container("setup", B)],
                                                         labels=BE, priority=5000)),
    ("batch-memory 1.5Gi is whole bytes", _pod([_container("app", {"kubernetes.io/batch-memory": "1.5Gi"})],
                                               labels=BE, priority=5000)),
    ("batch-memory 0.5 is no whole byte", _pod([_container("app", {"kubernetes.io/batch-memory": "0.5"})],
                                               labels=BE, priority=5000)),
    ("batch-cpu 1500m is a fraction", _pod([_container("app", {"kubernetes.io/batch-cpu": "1500m"})], labels=BE,
                                           priority=5000)),
    ("legacy reclaimed-cpu", _pod([_container("app", {"alibabacloud.com/reclaimed-cpu": "500"})], labels=BE,
                                  priority=5000)),
    ("legacy reclaimed-memory", _pod([_container("app", {"alibabacloud.com/reclaimed-memory": "1Gi"})], labels=BE,
                                     priority=5000)),
    ("LSE without cpu", _pod([_container("app", {"memory": "1Gi"})], labels={"koordinator.sh/qosClass": "LSE"},
                             priority=9000)),
    ("LS with batch resources", _pod([_container("app", B)], labels={"koordinator.sh/qosClass": "LS"},
                                     priority=5000)),
    ("BE at koord-free", _pod([_container("app", B)], labels=BE, priority=3000)),
    ("a sidecar with batch", _pod([_container("app", B)], init=[_container("proxy", B, restartPolicy="Always")],
                                  labels=BE, priority=5000)),
    ("a batch limit without a request", _pod([_container("app", None, B)], labels=BE, priority=5000)),
    ("two containers, one fraction", _pod([_container("a", B), _container("b", {"kubernetes.io/batch-cpu": "0.1"})],
                                          labels=BE, priority=5000)),
]


def _table() -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    rows: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    for name, request, _ in CASES:
        rows.append((name, request["object"], request["oldObject"]))
    rows.extend((name, pod, None) for name, pod in MORE)
    return rows


def test_the_apiserver_refuses_what_the_chain_refuses_with_its_text(cluster: real_apiserver.Cluster) -> None:
    rows = _table()
    ns = _namespace(cluster)
    # The olds of the updates, stored before the policy is bound (a cluster already holds objects we never saw).
    pods: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    for i, (name, pod, old) in enumerate(rows):
        target = "kube-system" if pod["metadata"]["namespace"] == "kube-system" else ns
        made = _on_the_apiserver(pod, target, f"t{i}")
        stored = None
        if old is not None:
            stored_old = _on_the_apiserver(old, target, f"t{i}")
            admitted, error = _create(cluster, stored_old, dry_run=False)
            assert admitted, f"{name}: {error}"
            stored = json.loads(cluster.kubectl("get", "pod", "-n", target, f"t{i}", "-o", "json").stdout)
        pods.append((name, made, stored))
    probe = _pod_in(ns, "probe", labels=BE, priorityClassName="koord-batch",
                    resources={"requests": {**B, "cpu": "1"}})
    disagreements: list[str] = []
    before_admission: list[str] = []
    with bound(cluster, _invariants(), probe):
        for name, pod, stored in pods:
            if stored is None:
                try:
                    built = _built(cluster, pod)
                except RuntimeError as exc:
                    # The apiserver's own validation refuses it before any admission step (a request above its
                    # limit): the rule says it in the same words.
                    text = str(exc).split(" is invalid: ", 1)[-1]
                    before_admission.append(name)
                    if text != _chain_message(pod):
                        disagreements.append(f"{name}: apiserver validation {text!r}, chain {_chain_message(pod)!r}")
                    continue
                want = _chain_message(built)
                got = _create(cluster, pod)
            else:
                new = copy.deepcopy(stored)
                new["metadata"]["labels"] = pod["metadata"].get("labels") or {}
                want = _chain_message(new, stored)
                patch = {"metadata": {"labels": {**{k: None for k in stored["metadata"].get("labels") or {}},
                                                 **new["metadata"]["labels"]}}}
                done = cluster.kubectl("patch", "pod", "-n", pod["metadata"]["namespace"], pod["metadata"]["name"],
                                       "--dry-run=server", "--type=merge", "-p", json.dumps(patch), check=False)
                got = ((True, "") if done.returncode == 0 else
                       (False, done.stderr.strip().split(DENIED, 1)[-1]))
            if got != (not want, want):
                disagreements.append(f"{name}: apiserver {got}, chain {want!r}")
    assert not disagreements, "\n".join(disagreements)
    assert before_admission == ["request above limit"]
    assert len(rows) - len(before_admission) >= 30
