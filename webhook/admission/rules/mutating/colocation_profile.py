"""ClusterColocationProfiles (Koordinator's ``pkg/webhook/pod/mutating/cluster_colocation_profile.go``), failing
closed (docs/admission-rules-mutating.md, "Where we differ from Koordinator on purpose").

Every profile whose namespaceSelector, selector and probability match applies in name order, later
ones winning; the result is re-matched until it no longer changes, so our own output comes back
from a reinvocation unchanged. What matched goes to ``ctx.facts`` for the batch-resources rule.
"""

from __future__ import annotations

import contextlib
from typing import Any

from webhook.admission.context import MutatingContext
from webhook.admission.domain.colocation_profile import (
    DRAW_ANNOTATION,
    ApplyError,
    DrawError,
    ProfileSet,
    explain_match,
    format_labels,
    pod_draw,
    pod_labels,
    resolve,
)
from webhook.admission.response import Denial, forbidden
from webhook.admission.review import AdmissionRequest
from webhook.cluster.state import ClusterState
from webhook.core.qos import QOS_LABEL

NAME = "colocation-profile"


def handles(request: AdmissionRequest) -> bool:
    return request.is_pod and request.operation == "CREATE"


def profile_set(state: ClusterState) -> ProfileSet:
    """The state's compiled profiles and their namespace views, rebuilt only when a profile changes (a namespace's
    labels are checked by its view)."""
    return state.derived("ClusterColocationProfile", "profile_set", _profile_set, state)


def _profile_set(state: ClusterState) -> ProfileSet:
    return ProfileSet(state.colocation_profiles())


def admit(ctx: MutatingContext) -> Denial | None:
    pset = profile_set(ctx.state)
    if not pset.profiles:
        ctx.note(NAME, "no ClusterColocationProfile in the cluster state")
        return None
    ns = ctx.namespace
    ns_labels = ctx.state.namespace_labels(ns)
    identity = ctx.identity
    if ctx.explain is not None:
        with contextlib.suppress(DrawError):  # a recorded draw that is none: denied below, with the reason
            _explain(ctx, pset, ns, ns_labels, _draw(ctx, ns)[0], identity)
    if ns_labels is None:
        ctx.warn(f"namespace {ns} is not in the webhook's cluster state; no colocation profile applied")
        return None
    view = pset.for_namespace(ns, ns_labels)
    ctx.facts.profile_label_keys = view.label_keys_read
    for p in view.broken:
        ctx.warn(f"colocation profile {p.name} ignored: {p.error}")
    # Only a probability under 100 % reads the draw (any draw passes 100 %): most pods need no hash.
    draw, record = 0, False
    if view.draws:
        try:
            draw, record = _draw(ctx, ns)
        except DrawError as bad:
            return forbidden(ctx.pod_name, str(bad))
    before_labels = pod_labels(ctx.pod)
    try:
        res = resolve(view, ctx.pod, draw, ctx.state.priority_class)
    except ApplyError as exc:  # the chain notes the denial for --explain
        return forbidden(ctx.pod_name, exc.message)
    record = record and view.drawn(before_labels, pod_labels(res.pod))
    for p, why in res.failed:
        ctx.warn(f"colocation profile {p.name} not applied: {why}")
        ctx.note(NAME, f"profile {p.name} not applied: {why}")
    if not res.settled:
        ctx.warn(f"colocation profiles did not settle after {res.passes} passes (they undo each other); "
                          "check their selectors")
    names = [p.name for p in res.matched]
    ctx.facts.matched_profiles = names
    ctx.facts.skip_update_resources = any(p.skip_update_resources for p in res.matched)
    if res.pod is not ctx.pod:
        before = len(ctx.patch.ops)
        _apply(ctx, res.pod)
        if len(ctx.patch.ops) > before:
            changed = _summary(ctx.patch.ops[before:])
            ctx.audit(NAME, f"applied {', '.join(names)}: {changed}")
            ctx.warn(_short(names, res.pod))
            if ctx.explain is not None:
                ctx.note(NAME, f"applied {', '.join(names)} in {res.passes} pass(es): {changed}")
    elif names:
        ctx.note(NAME, f"matched {', '.join(names)}: the pod already carries what they set")
    if record:
        # A reinvocation brings another request uid: the pod keeps its draw, so the answer stays the same.
        ctx.patch.set(("metadata", "annotations", DRAW_ANNOTATION), str(draw))
        ctx.note(NAME, f"probability draw {draw} recorded in {DRAW_ANNOTATION}")
    return None


def _draw(ctx: MutatingContext, ns: str) -> tuple[int, bool]:
    if ctx.settings.pinned_draw is not None:
        return ctx.settings.pinned_draw, False
    meta = ctx.pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    annotations = meta.get("annotations")
    return pod_draw(ns, meta.get("name") or ctx.request.name or "", str(meta.get("generateName") or ""),
                    ctx.request.uid, annotations if isinstance(annotations, dict) else {})


def _apply(ctx: Any, new: dict[str, Any]) -> None:
    """Make the working pod equal to ``new`` with explicit ops (untouched subtrees are shared)."""
    old = ctx.pod
    for key in [k for k in old if k not in new]:
        ctx.patch.remove((key,))
    for key, value in new.items():
        if old.get(key) is not value:
            ctx.patch.update((key,), value)


def _short(names: list[str], pod: dict[str, Any]) -> str:
    """The user-facing warning: which profiles, and the QoS and priority class they leave."""
    text = f"colocation profile {', '.join(names)} applied"
    qos = pod_labels(pod).get(QOS_LABEL)
    pc = (pod.get("spec") or {}).get("priorityClassName")
    extra = [x for x in (f"QoS {qos}" if qos else "", f"priorityClassName {pc}" if pc else "") if x]
    return text + (": " + ", ".join(extra) if extra else "")


def _field(pointer: str) -> str:
    """A patch path as the summary names it: ``/metadata/labels/a~1b`` -> ``a/b``."""
    path = pointer.replace("~1", "/").replace("~0", "~")
    for prefix in ("/metadata/labels/", "/metadata/annotations/", "/spec/", "/metadata/"):
        if path.startswith(prefix):
            return path[len(prefix):]
    return path


def _summary(ops: list[dict[str, Any]]) -> str:
    paths = []
    for op in ops:
        path = _field(op["path"])
        if op["op"] == "remove":
            path = "-" + path
        elif not isinstance(op.get("value"), (dict, list)):
            path = f"{path}={op['value']}"
        if path not in paths:
            paths.append(path)
    return ", ".join(paths)


def _explain(ctx: Any, pset: ProfileSet, ns: str, ns_labels: Any, draw: int, identity: str) -> None:
    labels = pod_labels(ctx.pod)
    ctx.note(NAME, f"pod {ns}/{identity or '<no name>'}: probability draw {draw} (of 0..99); "
                   f"namespace labels {'unknown' if ns_labels is None else format_labels(ns_labels)}")
    for p in pset.profiles:
        matched, why = explain_match(p, ns, ns_labels, labels, draw)
        ctx.note(NAME, f"profile {p.name}: {'MATCH' if matched else 'no match'}: {why}")
