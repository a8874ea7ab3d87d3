"""What `audit` puts through the rules: a pod as it would be created again, or the pod a workload's template makes.

Plain functions over plain dicts. A pod read back from the cluster carries what the apiserver and the kubelet
wrote after admission (status, uid, managedFields); the rules never see those on CREATE, so they are left out.
A workload is audited through its pod template, with the workload's namespace: the template is what every
future pod is made from, so a finding there is the fix that lasts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The workload kinds that hold a pod template, where, and how `--kinds` and kubectl name them.
TEMPLATES: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
KINDS = ("Pod", *TEMPLATES)
PLURALS = {"Pod": "pods", "Deployment": "deployments", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets",
           "ReplicaSet": "replicasets", "Job": "jobs", "CronJob": "cronjobs"}
# kubectl's short names, so `--kinds po,deploy` reads as `kubectl get po,deploy` does
_NAMES = {**{p: k for k, p in PLURALS.items()}, **{k.lower(): k for k in KINDS},
          "po": "Pod", "deploy": "Deployment", "sts": "StatefulSet", "ds": "DaemonSet", "rs": "ReplicaSet",
          "cj": "CronJob", "job": "Job", "pod": "Pod"}
# Written by the apiserver, never part of what a client creates.
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
                    "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")
# Written into every pod by the Priority admission plugin from its class; a pod made again gets them anew.
ADMISSION_SPEC = ("priority", "preemptionPolicy")


def kind_of(name: str) -> str:
    """The kind ``--kinds`` names (``pods``, ``deploy``, ``CronJob``); ValueError naming the known ones."""
    kind = _NAMES.get(name.strip().lower()) or _NAMES.get(name.strip())
    if kind is None:
        raise ValueError(f"unknown kind {name!r}; audit reads {', '.join(PLURALS.values())}")
    return kind


@dataclass(slots=True, frozen=True)
class Subject:
    """One audited object: its identity, the pod the rules see (None when there is none), and why not."""

    kind: str
    namespace: str
    name: str
    owner: str = ""                  # the controller that makes this object, "ReplicaSet/web-7d9c", or ""
    pod: dict[str, Any] | None = None
    problem: str = ""                # why it cannot be audited: no pod template, not an object


def _controller(meta: dict[str, Any]) -> str:
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    return ""


def subject(obj: dict[str, Any], kind: str | None = None) -> Subject:
    """The subject of ``obj`` (``kind`` when a list left it out, as the apiserver's lists do)."""
    kind = kind or str(obj.get("kind") or "")
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or meta.get("generateName") or "")
    owner = _controller(meta)
    if kind == "Pod":
        pod = {k: v for k, v in obj.items() if k != "status"}
        pod["metadata"] = {k: v for k, v in meta.items() if k not in _SERVER_METADATA}
        pod.setdefault("apiVersion", "v1")
        pod["kind"] = "Pod"
        spec = pod.get("spec")
        if isinstance(spec, dict):
            # The Priority plugin's output: it refuses it as input where it now computes otherwise (a class made
            # the global default since), though the same pod made again gets the new values without a word.
            pod["spec"] = {k: v for k, v in spec.items() if k not in ADMISSION_SPEC}
        return Subject(kind, namespace, name, owner, pod)
    where = TEMPLATES.get(kind)
    if where is None:
        return Subject(kind, namespace, name, owner, problem=f"kind {kind or '(none)'} has no pod to audit")
    template: Any = obj
    for key in where:
        template = template.get(key) if isinstance(template, dict) else None
    if not isinstance(template, dict):
        return Subject(kind, namespace, name, owner, problem=f"no pod template at {'.'.join(where)}")
    tmeta = template.get("metadata")
    tmeta = dict(tmeta) if isinstance(tmeta, dict) else {}
    tmeta.pop("name", None)  # each pod gets a generated name; its workload's is what a reader looks for
    tmeta["generateName"] = f"{name}-"
    tmeta["namespace"] = namespace
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": tmeta, "spec": template.get("spec")}
    return Subject(kind, namespace, name, owner, pod)
