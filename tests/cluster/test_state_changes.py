"""A watched change costs only what depends on it: a quota's status touches nothing the rules read, a namespace's
labels only that namespace's view, a profile only that profile's compilation; and the answers follow every change
that matters."""

from __future__ import annotations

import copy
from typing import Any

from webhook.admission.rules.mutating.colocation_profile import profile_set
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState


def _profile(name: str, team: str, rv: str = "1") -> dict[str, Any]:
    return {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
            "metadata": {"name": name, "resourceVersion": rv},
            "spec": {"namespaceSelector": {"matchLabels": {"team": team}}, "qosClass": "BE"}}


def _namespace(name: str, team: str, rv: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "resourceVersion": rv,
                                                                   "labels": {"team": team}}}


def _quota(name: str, ns: str, used: str = "0", hard: str = "10", status_hard: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": ns,
                                                                       "resourceVersion": used},
            "spec": {"hard": {"pods": hard}},
            "status": {"hard": {"pods": status_hard or hard}, "used": {"pods": used}}}


def _state() -> ClusterState:
    state = ClusterState(WEBHOOK_KINDS)
    state.replace("Namespace", [_namespace("a", "red"), _namespace("b", "blue")])
    state.replace("ClusterColocationProfile", [_profile("p-red", "red"), _profile("p-blue", "blue")])
    state.replace("ResourceQuota", [_quota("q", "a")])
    return state


def _candidates(state: ClusterState, ns: str) -> list[str]:
    labels = state.namespace_labels(ns)
    assert labels is not None
    view = profile_set(state).for_namespace(ns, labels)
    return [view.profiles[i].name for i in view.select({}, 0)]


def test_a_quota_status_update_invalidates_nothing_a_rule_reads() -> None:
    state = _state()
    profiles, quotas = profile_set(state), state.resource_quotas("a")
    state.upsert("ResourceQuota", _quota("q", "a", used="7"))          # a pod was created in namespace a
    assert profile_set(state) is profiles
    assert state.resource_quotas("a") is quotas
    quota = state.get("ResourceQuota", "q", "a")
    assert quota is not None and quota["status"]["used"]["pods"] == "7"   # the object is the new one
    state.upsert("ResourceQuota", _quota("q", "a", used="7", hard="20", status_hard="10"))   # its spec
    assert state.resource_quotas("a") is not quotas
    assert state.resource_quotas("a")[0]["spec"]["hard"]["pods"] == "20"
    quotas = state.resource_quotas("a")
    # status.hard is what the quota controller has put in force (the presence check reads it): a change.
    state.upsert("ResourceQuota", _quota("q", "a", used="8", hard="20", status_hard="20"))
    assert state.resource_quotas("a") is not quotas
    assert state.resource_quotas("a")[0]["status"]["hard"]["pods"] == "20"
    assert profile_set(state) is profiles


def test_a_namespace_label_change_rebuilds_that_namespace_view_only() -> None:
    state = _state()
    profiles = profile_set(state)
    assert _candidates(state, "a") == ["p-red"] and _candidates(state, "b") == ["p-blue"]
    view_b = profiles.for_namespace("b", state.namespace_labels("b") or {})
    state.upsert("Namespace", _namespace("a", "blue", rv="2"))
    assert profile_set(state) is profiles                              # nothing recompiled
    assert _candidates(state, "a") == ["p-blue"]                       # the answer follows the labels
    assert profiles.for_namespace("b", state.namespace_labels("b") or {}) is view_b
    state.upsert("Namespace", _namespace("a", "blue", rv="3"))         # a resourceVersion alone
    assert _candidates(state, "a") == ["p-blue"]


def test_a_profile_change_recompiles_that_profile_only() -> None:
    state = _state()
    before = profile_set(state)
    kept = {p.name: p for p in state.colocation_profiles()}
    changed = _profile("p-red", "blue", rv="2")
    state.upsert("ClusterColocationProfile", changed)
    after = profile_set(state)
    assert after is not before
    now = {p.name: p for p in state.colocation_profiles()}
    assert now["p-blue"] is kept["p-blue"] and now["p-red"] is not kept["p-red"]
    assert _candidates(state, "b") == ["p-blue", "p-red"]
    state.upsert("ClusterColocationProfile", {**copy.deepcopy(changed),
                                              "metadata": {"name": "p-red", "resourceVersion": "3"}})
    assert profile_set(state) is after                                  # only its resourceVersion moved


def test_an_invalid_mark_set_or_cleared_is_a_change() -> None:
    state = _state()
    before = profile_set(state)
    state.upsert("ClusterColocationProfile", _profile("p-red", "red", rv="2"), 'unknown field "spec.selecter"')
    marked = profile_set(state)
    assert marked is not before and next(p for p in marked.profiles if p.name == "p-red").error
    state.upsert("ClusterColocationProfile", _profile("p-red", "red", rv="3"))
    fixed = profile_set(state)
    assert next(p for p in fixed.profiles if p.name == "p-red").error is None


def test_a_snapshot_read_stays_what_it_was() -> None:
    """Writes are in place (O(1) per event); what a reader took before is not changed under it."""
    state = _state()
    taken = state.objects("Namespace")
    state.upsert("Namespace", _namespace("c", "green"))
    state.delete("Namespace", _namespace("a", "red"))
    assert sorted(n["metadata"]["name"] for n in taken) == ["a", "b"]
    assert sorted(n["metadata"]["name"] for n in state.objects("Namespace")) == ["b", "c"]
    assert state.namespace_labels("a") is None


def test_what_the_state_holds_of_an_object_is_what_is_read() -> None:
    """managedFields, kubectl's last-applied copy, a namespace's spec and status, a quota's used counts: most of an
    object at scale, and read by nothing."""
    from webhook.cluster.state import LAST_APPLIED, kept

    meta = {"name": "x", "namespace": "n", "resourceVersion": "7", "uid": "u", "labels": {"team": "red"},
            "annotations": {LAST_APPLIED: "{...}", "config.koordinator.sh/skip-update-resources": ""},
            "managedFields": [{"manager": "kubectl"}]}
    ns = kept("Namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta,
                            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
    assert ns == {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "x", "namespace": "n", "labels": {"team": "red"},
        "annotations": {"config.koordinator.sh/skip-update-resources": ""}}}
    quota = kept("ResourceQuota", {"kind": "ResourceQuota", "metadata": meta, "spec": {"hard": {"pods": "1"}},
                                   "status": {"hard": {"pods": "1"}, "used": {"pods": "0"}}})
    assert (quota["spec"], quota["status"]) == ({"hard": {"pods": "1"}}, {"hard": {"pods": "1"}})
    pc = kept("PriorityClass", {"kind": "PriorityClass", "metadata": meta, "value": 5, "globalDefault": False,
                                "preemptionPolicy": "Never", "description": "long text"})
    assert set(pc) == {"apiVersion", "kind", "metadata", "value", "globalDefault", "preemptionPolicy"}
    profile = kept("ClusterColocationProfile", {"kind": "ClusterColocationProfile", "metadata": meta,
                                                "spec": {"qosClass": "BE"}, "status": {}})
    assert profile["spec"] == {"qosClass": "BE"} and "status" not in profile
    pod = kept("Pod", {"kind": "Pod", "metadata": meta, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    assert pod["status"] == {"phase": "Running"} and "managedFields" not in pod["metadata"]
    assert pod["metadata"]["uid"] == "u"    # the agent evicts by uid


def test_repeated_strings_are_held_once() -> None:
    """At 10 000 namespaces and 5 000 quotas, label values and quota amounts repeat: one string each, and a quota's
    status.hard that equals its spec.hard is the same map."""
    from webhook.cluster.state import kept

    def namespace(i: int) -> dict[str, Any]:
        name = "".join(["ns-", str(i)])   # built, as a decoder builds each object's strings anew
        return kept("Namespace", {"kind": "Namespace", "metadata": {
            "name": name, "labels": {"kubernetes.io/metadata.name": "".join(["ns-", str(i)]),
                                     "team": "".join(["t", str(i % 2)])}}})

    def quota(namespace: str, hard: dict[str, str]) -> dict[str, Any]:
        return kept("ResourceQuota", {"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": namespace},
                                      "spec": {"hard": dict(hard)}, "status": {"hard": dict(hard), "used": {}}})

    a, b = namespace(1), namespace(3)
    assert a["metadata"]["labels"]["team"] is b["metadata"]["labels"]["team"]
    assert a["metadata"]["name"] is a["metadata"]["labels"]["kubernetes.io/metadata.name"]
    cpu = "".join(["6", "4"])
    q1, q2 = quota("".join(["ns-", "1"]), {"requests.cpu": cpu}), quota("ns-3", {"requests.cpu": "".join(["6", "4"])})
    assert q1["status"]["hard"] is q1["spec"]["hard"] == {"requests.cpu": "64"}
    assert q1["spec"]["hard"]["requests.cpu"] is q2["spec"]["hard"]["requests.cpu"]
    assert q1["metadata"]["namespace"] is a["metadata"]["name"]
    moved = kept("ResourceQuota", {"kind": "ResourceQuota", "metadata": {"name": "q"}, "spec": {"hard": {"pods": "2"}},
                                   "status": {"hard": {"pods": "1"}}})   # the controller has not caught up yet
    assert moved["status"] == {"hard": {"pods": "1"}} and moved["spec"] == {"hard": {"pods": "2"}}


def test_a_derived_value_is_built_once_from_its_arguments_until_its_kind_changes() -> None:
    state, builds = _state(), []

    def build(namespace: str, *, extra: int) -> list[str]:
        builds.append(namespace)
        return [q["metadata"]["name"] for q in state.resource_quotas(namespace)] * extra

    first = state.derived("ResourceQuota", "names", build, "a", extra=2)
    assert first == ["q", "q"] and builds == ["a"]
    assert state.derived("ResourceQuota", "names", build, "a", extra=2) is first and builds == ["a"]  # a hit
    state.upsert("Namespace", _namespace("c", "green"))               # another kind: still a hit
    assert state.derived("ResourceQuota", "names", build, "a", extra=2) is first and builds == ["a"]
    state.upsert("ResourceQuota", _quota("q2", "a"))                   # its kind changed: built again
    assert state.derived("ResourceQuota", "names", build, "a", extra=1) == ["q", "q2"] and builds == ["a", "a"]


def test_derived_from_last_hands_the_build_what_it_built_before_the_change() -> None:
    state, seen = _state(), []

    def build(last: int | None, step: int) -> int:
        seen.append(last)
        return (last or 0) + step

    assert state.derived_from_last("Namespace", "count", build, 5) == 5
    assert state.derived_from_last("Namespace", "count", build, 5) == 5 and seen == [None]  # a hit
    state.upsert("Namespace", _namespace("c", "green"))
    assert state.derived_from_last("Namespace", "count", build, 1) == 6 and seen == [None, 5]
