"""The live source against a replay of recorded kube-apiserver answers (tests/fixtures/api).

Every test goes through a real kubeconfig file and the official kubernetes client; the replay server
answers with recorded bodies (a few derived from them where the recording has no such answer, named so).
"""

from __future__ import annotations

import copy
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.apiserver import ReplayAPIServer, Route, load_exchange
from tests.conftest import load_fixture
from tests.serving import free_port, run_server
from webhook.cluster.freshness import Timing
from webhook.cluster.live import LiveSource, LiveSourceError
from webhook.cluster.state import AGENT_KINDS, WEBHOOK_KINDS, ClusterState

PC = "/apis/scheduling.k8s.io/v1/priorityclasses"
NS = "/api/v1/namespaces"
RQ = "/api/v1/resourcequotas"
LR = "/api/v1/limitranges"
CCP = "/apis/config.koordinator.sh/v1alpha1/clustercolocationprofiles"
CM = "/api/v1/namespaces/koordinator-system/configmaps"
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
NODE_SELECTOR = "spec.nodeName=colo-node-1"

WEBHOOK_LISTS = {  # kind -> (recorded list, path our client calls)
    "PriorityClass": ("priorityclasses-list", PC),
    "Namespace": ("namespaces-list", NS),
    "ResourceQuota": ("resourcequotas-list-all-namespaces", RQ),
    "LimitRange": ("limitranges-list-derived-empty", LR),
    "ClusterColocationProfile": ("clustercolocationprofiles-list", CCP),
    "ConfigMap": ("configmaps-list-koordinator-system", CM),
}
CONTINUE_TOKEN = load_exchange("priorityclasses-list-limit-2")["response"]["body"]["metadata"]["continue"]


def wait_for(cond: Callable[[], object], timeout: float = 4.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def write_kubeconfig(folder: Path, url: str, ca: Path | None = None) -> Path:
    path = folder / "kubeconfig.yaml"
    cluster: dict[str, str] = {"server": url} if ca is None else {"server": url, "certificate-authority": str(ca)}
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "replay",
        "clusters": [{"name": "replay", "cluster": cluster}],
        "users": [{"name": "tester", "user": {"token": "replay-token"}}],
        "contexts": [{"name": "replay", "context": {"cluster": "replay", "user": "tester"}}],
    }))
    return path


class RecordingState(ClusterState):
    """A real ClusterState that also notes each write, so a test can check the order events were applied."""

    def __init__(self, kinds: Any) -> None:
        super().__init__(kinds)
        self.writes: list[tuple[Any, ...]] = []

    def replace(self, kind: str, objects: Any, invalid: Any = None) -> None:
        objects = list(objects)
        self.writes.append(("replace", kind, sorted(o["metadata"]["name"] for o in objects)))
        super().replace(kind, objects, invalid)

    def upsert(self, kind: str, obj: dict[str, Any], invalid: str | None = None) -> None:
        self.writes.append(("upsert", kind, obj["metadata"]["name"], obj["metadata"].get("labels")))
        super().upsert(kind, obj, invalid)

    def delete(self, kind: str, obj: dict[str, Any]) -> None:
        self.writes.append(("delete", kind, obj["metadata"]["name"]))
        super().delete(kind, obj)

    def mark_unsynced(self, kind: str, reason: str) -> None:
        self.writes.append(("unsynced", kind, reason))
        super().mark_unsynced(kind, reason)


@pytest.fixture()
def api() -> Iterator[ReplayAPIServer]:
    with ReplayAPIServer(speed=20) as srv:
        yield srv


@contextmanager
def live(state: ClusterState, url: str, folder: Path, **kw: Any) -> Iterator[LiveSource]:
    options: dict[str, Any] = {"timing": Timing(watch_timeout=5, backoff_initial=0.02, backoff_max=0.2)}
    options.update(kw)
    src = LiveSource(state, kubeconfig=str(write_kubeconfig(folder, url)), **options)
    src.start()
    try:
        yield src
    finally:
        src.stop(timeout=3)


def serve_webhook_kinds(srv: ReplayAPIServer) -> None:
    for name, path in WEBHOOK_LISTS.values():
        srv.add_exchange(name, path=path)
        srv.add_watch(path, [])


def watches(srv: ReplayAPIServer, path: str) -> list[dict[str, str]]:
    return [r.query for r in srv.requests_to("GET", path) if r.query.get("watch") == "true"]


def lists(srv: ReplayAPIServer, path: str) -> list[dict[str, str]]:
    return [r.query for r in srv.requests_to("GET", path) if "watch" not in r.query]


def pc_list_body(extra: list[dict[str, Any]] | None = None, items: slice = slice(None)) -> dict[str, Any]:
    """The recorded PriorityClass list, optionally cut to a page or with extra items (derived answers)."""
    body: dict[str, Any] = copy.deepcopy(load_exchange("priorityclasses-list")["response"]["body"])
    body["items"] = body["items"][items] + (extra or [])
    return body


# -- initial list -------------------------------------------------------------------------------
def test_initial_list_of_every_webhook_kind_then_ready(api: ReplayAPIServer, tmp_path: Path) -> None:
    serve_webhook_kinds(api)
    state = ClusterState(WEBHOOK_KINDS)
    assert not state.ready
    with live(state, api.url, tmp_path):
        wait_for(lambda: state.ready, what="first sync")
        assert state.counts() == {"PriorityClass": 6, "Namespace": 8, "ResourceQuota": 2, "LimitRange": 0,
                                  "ClusterColocationProfile": 1, "ConfigMap": 1}
        # list items come without kind/apiVersion; the source fills them in
        for kind, api_version in [("PriorityClass", "scheduling.k8s.io/v1"), ("Namespace", "v1"),
                                  ("ResourceQuota", "v1"), ("ConfigMap", "v1"),
                                  ("ClusterColocationProfile", "config.koordinator.sh/v1alpha1")]:
            for obj in state.objects(kind):
                assert (obj["kind"], obj["apiVersion"]) == (kind, api_version)
        batch = state.priority_class("koord-batch")
        assert batch is not None and batch["value"] == 5000
        labels = state.namespace_labels("colo-demo")
        assert labels is not None and labels["koordinator.sh/enable-colocation"] == "true"
        assert [q["metadata"]["name"] for q in state.resource_quotas("prod-apps")] == ["koord-prod-quota"]
        assert state.colocation_profiles()[0].qos_class == "BE"
        # only the one ConfigMap is kept (the recorded list also holds kube-root-ca.crt)
        assert state.config_map("koordinator-system", "slo-controller-config") is not None
        assert state.config_map("koordinator-system", "kube-root-ca.crt") is None
        # each kind watches from its own list's resourceVersion, with bookmarks
        for path, rv in [(PC, "345"), (NS, "381"), (RQ, "381"), (CCP, "283"), (CM, "381")]:
            wait_for(functools.partial(watches, api, path), what=f"watch of {path}")
            assert watches(api, path)[0]["resourceVersion"] == rv
            assert watches(api, path)[0]["allowWatchBookmarks"] == "true"
    assert lists(api, CM)[0]["fieldSelector"] == "metadata.name=slo-controller-config"
    assert all(r.headers.get("authorization") == "Bearer replay-token" for r in api.received)


def test_not_ready_until_every_kind_has_listed(api: ReplayAPIServer, tmp_path: Path) -> None:
    serve_webhook_kinds(api)
    api.routes = [r for r in api.routes if r.path != CCP]  # the CRD list answers 404 (not installed)
    state = ClusterState(WEBHOOK_KINDS)
    with live(state, api.url, tmp_path):
        wait_for(lambda: state.synced_kinds() == set(WEBHOOK_KINDS) - {"ClusterColocationProfile"}
                 and "HTTP 404" in (state.not_ready_reason() or ""), what="other kinds synced")
        assert not state.ready
        assert (state.not_ready_reason() or "").startswith(
            "cluster state not synced yet: ClusterColocationProfile (HTTP 404")
        serve_webhook_kinds(api)  # the CRD appears
        wait_for(lambda: state.ready, what="ready once the CRD lists")


# -- watch --------------------------------------------------------------------------------------
def test_watch_events_applied_and_resumed_from_bookmark(api: ReplayAPIServer, tmp_path: Path) -> None:
    api.add_exchange("priorityclasses-list")
    api.add_exchange("priorityclasses-watch-bookmarks", query={"resourceVersion": "345"}, times=1)
    api.add_watch(PC, [], query={"resourceVersion": "348"})
    state = RecordingState(("PriorityClass",))
    with live(state, api.url, tmp_path) as src:
        wait_for(lambda: watches(api, PC)[1:], what="the watch to resume after the stream ended")
        assert watches(api, PC)[1]["resourceVersion"] == "348"  # the BOOKMARK's resourceVersion
        assert state.writes == [
            ("replace", "PriorityClass", ["koord-batch", "koord-free", "koord-mid", "koord-prod",
                                          "system-cluster-critical", "system-node-critical"]),
            ("upsert", "PriorityClass", "koord-watch-demo", None),
            ("upsert", "PriorityClass", "koord-watch-demo", {"demo": "modified"}),
            ("delete", "PriorityClass", "koord-watch-demo"),
        ]
        assert state.priority_class("koord-watch-demo") is None
        assert state.ready and state.counts() == {"PriorityClass": 6}
        status = src.status()["PriorityClass"]
        assert status.events == {"ADDED": 1, "MODIFIED": 1, "DELETED": 1, "BOOKMARK": 1}
        assert status.lists == 1  # resumed, not relisted


def _watch_410_error_event(srv: ReplayAPIServer) -> None:
    srv.add_exchange("priorityclasses-watch-too-old-rv", query={"resourceVersion": "345"}, times=1)


def _watch_http_410(srv: ReplayAPIServer) -> None:
    gone = load_exchange("priorityclasses-list-exact-too-old-rv")["response"]
    srv.add(Route(method="GET", path=PC, status=gone["status"], body=gone["body"], watch=True,
                  query={"resourceVersion": "345"}, times=1))


@pytest.mark.parametrize("gone", [_watch_410_error_event, _watch_http_410], ids=["error-event-410", "http-410"])
def test_watch_410_relists_and_picks_up_new_state(api: ReplayAPIServer, tmp_path: Path,
                                                 gone: Callable[[ReplayAPIServer], None]) -> None:
    stale = {"metadata": {"name": "koord-stale", "resourceVersion": "300"}, "value": 1}
    api.add_json("GET", PC, pc_list_body(extra=[stale]), times=1)  # derived: the list before the restart
    gone(api)
    api.add_exchange("priorityclasses-list-rv-0", path=PC)  # the list after the apiserver restart (rv 363)
    api.add_watch(PC, [], query={"resourceVersion": "363"})
    state = RecordingState(("PriorityClass",))
    with live(state, api.url, tmp_path) as src:
        wait_for(lambda: any(q["resourceVersion"] == "363" for q in watches(api, PC)), what="watch after relist")
        assert [q["resourceVersion"] for q in watches(api, PC)] == ["345", "363"]
        assert len(lists(api, PC)) == 2
        assert state.priority_class("koord-stale") is None
        assert state.counts() == {"PriorityClass": 6}
        assert src.status()["PriorityClass"].relists_after_410 == 1
        assert state.ready
        assert not [w for w in state.writes if w[0] == "unsynced"]  # readiness never dropped


# -- pagination ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name, continue_expires, expected_continues", [
    ("pages", False, [None, CONTINUE_TOKEN]),
    ("continue-410-restarts-the-list", True, [None, CONTINUE_TOKEN, None, CONTINUE_TOKEN]),
])
def test_paginated_list(api: ReplayAPIServer, tmp_path: Path, name: str, continue_expires: bool,
                        expected_continues: list[str | None]) -> None:
    if continue_expires:
        api.add_exchange("priorityclasses-list-continue-too-old", query={"continue": CONTINUE_TOKEN}, times=1)
    # derived: the second page of the recorded limit=2 list (the recording has the first page only)
    api.add_json("GET", PC, pc_list_body(items=slice(2, None)), query={"continue": CONTINUE_TOKEN})
    api.add_exchange("priorityclasses-list-limit-2", query={"limit": "2"})
    api.add_watch(PC, [])
    state = RecordingState(("PriorityClass",))
    with live(state, api.url, tmp_path, page_size=2):
        wait_for(lambda: state.ready, what="sync")
        assert [q.get("continue") for q in lists(api, PC)] == expected_continues
        assert all(q["limit"] == "2" for q in lists(api, PC))
        # one replace with the whole list: the first page alone never reaches the state
        assert [w for w in state.writes if w[0] == "replace"] == [
            ("replace", "PriorityClass", ["koord-batch", "koord-free", "koord-mid", "koord-prod",
                                          "system-cluster-critical", "system-node-critical"])]


# -- field selectors (the node agent) ---------------------------------------------------------------
def test_pods_and_node_with_field_selectors(api: ReplayAPIServer, tmp_path: Path) -> None:
    selector = {"fieldSelector": NODE_SELECTOR}
    api.add_exchange("pods-list-field-selector-node", query=selector)
    api.add_exchange("pods-watch-field-selector-node-during-eviction", query=selector, times=1)
    api.add_watch(PODS, [], query={**selector, "resourceVersion": "337"})
    api.add_exchange("nodes-list", query={"fieldSelector": "metadata.name=colo-node-1"})
    api.add_watch(NODES, [])
    api.add_exchange("configmaps-list-koordinator-system", path=CM)
    api.add_watch(CM, [])
    state = ClusterState(AGENT_KINDS)
    with live(state, api.url, tmp_path,
              field_selectors={"Pod": NODE_SELECTOR, "Node": "metadata.name=colo-node-1"}):
        wait_for(lambda: any(q["resourceVersion"] == "337" for q in watches(api, PODS)), what="pod watch resume")
        assert state.ready
        assert sorted(p["metadata"]["name"] for p in state.pods_on_node("colo-node-1")) == [
            "be-batch-0", "be-batch-1", "be-evict-ok", "be-protected", "ls-web-0"]
        evicted = state.get("Pod", "be-evict-ok", "colo-demo")
        assert evicted is not None and evicted["metadata"]["deletionTimestamp"]
        assert "DisruptionTarget" in [c["type"] for c in evicted["status"]["conditions"]]
        assert evicted["kind"] == "Pod"
        node = state.node("colo-node-1")
        assert node is not None and node["status"]["allocatable"]["cpu"] == "8"
    assert all(q["fieldSelector"] == NODE_SELECTOR for q in lists(api, PODS) + watches(api, PODS))
    assert all(q["fieldSelector"] == "metadata.name=colo-node-1" for q in lists(api, NODES) + watches(api, NODES))


# -- API unreachable ------------------------------------------------------------------------------
def test_unreachable_at_start_then_recovers_by_itself(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there yet
    state = ClusterState(WEBHOOK_KINDS)
    with live(state, f"http://127.0.0.1:{port}", tmp_path) as src:
        wait_for(lambda: all(f"{k} (cannot reach the API server" in (state.not_ready_reason() or "")
                             for k in WEBHOOK_KINDS), what="a reason for every kind")
        assert not state.ready
        assert f"127.0.0.1:{port}" in (state.not_ready_reason() or "")
        with ReplayAPIServer(port=port) as srv:
            serve_webhook_kinds(srv)
            wait_for(lambda: state.ready, what="recovery")
            assert state.not_ready_reason() is None
            assert all(s.last_error is None for s in src.status().values())


def test_once_synced_kind_keeps_serving_when_the_api_goes_away(tmp_path: Path) -> None:
    port = free_port()
    state = RecordingState(("PriorityClass",))
    srv = ReplayAPIServer(port=port).start()
    srv.add_exchange("priorityclasses-list")
    srv.add_watch(PC, [])
    with live(state, srv.url, tmp_path) as src:
        wait_for(lambda: state.ready, what="sync")
        srv.stop()  # the held watch ends, and reconnecting fails
        wait_for(lambda: src.status()["PriorityClass"].errors >= 2, what="failed reconnects")
        assert "cannot reach the API server" in (src.status()["PriorityClass"].last_error or "")
        assert state.ready and state.counts() == {"PriorityClass": 6}
        assert not [w for w in state.writes if w[0] == "unsynced"]
        with ReplayAPIServer(port=port) as again:
            again.add_watch(PC, [])
            wait_for(lambda: watches(again, PC), what="watch after reconnect")
            assert watches(again, PC)[0]["resourceVersion"] == "345"  # resumed, no relist needed
            wait_for(lambda: src.status()["PriorityClass"].last_error is None, what="recovered")


# -- readiness through the real HTTPS webhook server ----------------------------------------------------
def test_readyz_503_with_reason_then_200_after_first_sync(tmp_path: Path, cert_dir: Path) -> None:
    port = free_port()
    state = ClusterState(WEBHOOK_KINDS)
    with live(state, f"http://127.0.0.1:{port}", tmp_path), run_server(state, cert_dir) as web, \
            web.client() as http:
        wait_for(lambda: "cannot reach the API server" in http.get("/readyz").text, what="reason on /readyz")
        r = http.get("/readyz")
        assert r.status_code == 503
        assert r.text.startswith("cluster state not synced yet: PriorityClass (cannot reach the API server at")
        with ReplayAPIServer(port=port) as srv:
            serve_webhook_kinds(srv)
            wait_for(lambda: http.get("/readyz").status_code == 200, what="/readyz 200")
            assert http.get("/readyz").text == "ok"
            # the request path only reads the state: serving /readyz made no API calls
            before = len(srv.received)
            for _ in range(3):
                http.get("/readyz")
            assert len([r for r in srv.received[before:] if "watch" not in r.query]) == 0


# -- unknown fields in a CRD object ------------------------------------------------------------------
# The apiserver rejects unknown fields of built-in kinds, but a CRD that preserves unknown fields hands a
# ClusterColocationProfile with ``selecter:`` over as it is: it must never apply (it would match every pod).
def ccp_item(name: str, rv: str, **spec_changes: Any) -> dict[str, Any]:
    """The recorded profile under another name, its spec changed (derived; a value of None removes the field)."""
    item: dict[str, Any] = copy.deepcopy(load_exchange("clustercolocationprofiles-list")["response"]["body"]["items"][0])
    item["metadata"].update(name=name, resourceVersion=rv, uid=f"uid-{name}")
    item["spec"]["namespaceSelector"] = {"matchLabels": {"koordinator.sh/enable-colocation": "true"}}
    for key, value in spec_changes.items():
        if value is None:
            item["spec"].pop(key, None)
        else:
            item["spec"][key] = value
    return item


TYPO = {"selector": None, "selecter": {"matchLabels": {"app": "batch"}}}
TYPO_MESSAGE = 'unknown field "spec.selecter"'


class MarkingState(ClusterState):
    """A real ClusterState noting each profile write with its invalid mark, in order."""

    def __init__(self, kinds: Any) -> None:
        super().__init__(kinds)
        self.marks: list[tuple[str, Any]] = []

    def replace(self, kind: str, objects: Any, invalid: Any = None) -> None:
        if kind == "ClusterColocationProfile":
            self.marks.append(("replace", dict(invalid or {})))
        super().replace(kind, objects, invalid)

    def upsert(self, kind: str, obj: dict[str, Any], invalid: str | None = None) -> None:
        if kind == "ClusterColocationProfile":
            self.marks.append((obj["metadata"]["name"], invalid))
        super().upsert(kind, obj, invalid)


def live_warnings(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == "webhook.cluster.live" and "ClusterColocationProfile colo-" in r.getMessage()]


def test_listed_profile_with_unknown_field_fails_closed(api: ReplayAPIServer, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    from tests.mutating import labels_of, mutate, pod

    caplog.set_level(logging.INFO, logger="webhook.cluster.live")
    for kind, (name, path) in WEBHOOK_LISTS.items():
        if kind == "ClusterColocationProfile":  # derived: the recorded list plus a profile with a typo
            body = copy.deepcopy(load_exchange(name)["response"]["body"])
            body["items"].append(ccp_item("colo-typo", "283", **TYPO))
            api.add_json("GET", path, body)
        else:
            api.add_exchange(name, path=path)
        api.add_watch(path, [])
    state = ClusterState(WEBHOOK_KINDS)
    with live(state, api.url, tmp_path):
        wait_for(lambda: state.ready, what="first sync")
        assert [p.name for p in state.colocation_profiles()] == ["colo-typo", "colocation-profile-example"]
        assert {p.name: p.error for p in state.colocation_profiles() if p.error} == {"colo-typo": TYPO_MESSAGE}
        decision, patched = mutate(pod("p", "colo-demo", labels={"app": "web"}), state)
        assert decision.allowed and patched is not None
        assert "koordinator.sh/qosClass" not in labels_of(patched)  # the typo did not make every pod BE
        assert decision.warnings == [f"colocation profile colo-typo ignored: {TYPO_MESSAGE}"]
    assert live_warnings(caplog) == [
        ("WARNING", f"ClusterColocationProfile colo-typo: {TYPO_MESSAGE}; not applied until it is fixed")]


def test_watched_profile_with_unknown_field_is_marked_and_logged_once(api: ReplayAPIServer, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="webhook.cluster.live")
    api.add_exchange("clustercolocationprofiles-list", path=CCP)
    events = [  # derived watch events after the recorded list (resourceVersion 283)
        {"type": "ADDED", "object": ccp_item("colo-typo", "284", **TYPO)},
        {"type": "MODIFIED", "object": ccp_item("colo-typo", "285", **TYPO, qosClass="LS")},
        {"type": "MODIFIED", "object": ccp_item("colo-typo", "286", selecter=None,
                                                selector={"matchLabels": {"app": "batch"}})},
        {"type": "MODIFIED", "object": ccp_item("colo-typo", "287", priorityClassNmae="koord-batch")},
        {"type": "DELETED", "object": ccp_item("colo-typo", "288", priorityClassNmae="koord-batch")},
    ]
    api.add_watch(CCP, events, query={"resourceVersion": "283"})
    state = MarkingState(("ClusterColocationProfile",))
    with live(state, api.url, tmp_path) as src:
        wait_for(lambda: src.status()["ClusterColocationProfile"].resource_version == "288", what="every event")
    assert state.marks == [
        ("replace", {}),
        ("colo-typo", TYPO_MESSAGE),
        ("colo-typo", TYPO_MESSAGE),
        ("colo-typo", None),
        ("colo-typo", 'unknown field "spec.priorityClassNmae"'),
    ]
    assert [p.error for p in state.colocation_profiles()] == [None]  # deleted: the mark went with the object
    assert live_warnings(caplog) == [  # once per object and reason, not on every event
        ("WARNING", f"ClusterColocationProfile colo-typo: {TYPO_MESSAGE}; not applied until it is fixed"),
        ("INFO", "ClusterColocationProfile colo-typo: fixed, applied again"),
        ("WARNING", ('ClusterColocationProfile colo-typo: unknown field "spec.priorityClassNmae"; '
                     "not applied until it is fixed")),
    ]


# -- lifecycle and set-up errors ------------------------------------------------------------------
def test_stop_ends_every_reflector_while_watches_are_open(api: ReplayAPIServer, tmp_path: Path) -> None:
    serve_webhook_kinds(api)
    state = ClusterState(WEBHOOK_KINDS)
    src = LiveSource(state, kubeconfig=str(write_kubeconfig(tmp_path, api.url)), timing=Timing(watch_timeout=300))
    src.start()
    wait_for(lambda: state.ready and all(watches(api, p) for _, p in WEBHOOK_LISTS.values()), what="watching")
    src.stop(timeout=3)
    assert [t.name for t in threading.enumerate() if t.name.startswith("live-")] == []


@pytest.mark.parametrize("name, kwargs, message", [
    ("missing kubeconfig", {"kubeconfig": "/nonexistent/kubeconfig"}, "cannot load kubeconfig /nonexistent/kubeconfig"),
    ("no in-cluster config", {}, "cannot load in-cluster config"),
    ("field selector on ConfigMap", {"api_client": object(), "field_selectors": {"ConfigMap": "x=y"}},
     "field selectors are supported for Pod and Node, not 'ConfigMap'"),
    ("unknown kind", {"api_client": object(), "kinds": ["Deployment"]}, "unknown kind 'Deployment'"),
])
def test_setup_errors_are_clear(monkeypatch: pytest.MonkeyPatch, name: str, kwargs: dict[str, Any],
                                message: str) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(LiveSourceError, match="^" + message.replace("(", r"\(")):
        LiveSource(ClusterState(WEBHOOK_KINDS), **kwargs)


def test_serve_with_a_bad_kubeconfig_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from webhook.cli.webhook import main

    assert main(["serve", "--kubeconfig", str(tmp_path / "missing.yaml"), "--port", str(free_port())]) == 2
    assert f"cannot load kubeconfig {tmp_path / 'missing.yaml'}" in capsys.readouterr().err


def test_a_kubeconfig_that_is_not_yaml_names_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nclusters: [\n")
    with pytest.raises(LiveSourceError) as exc:
        LiveSource(ClusterState(WEBHOOK_KINDS), kubeconfig=str(bad))
    assert str(exc.value).startswith(f"cannot load kubeconfig {bad}:3: invalid YAML: ")


# -- resuming after a reset, reconnecting fast, nothing answered from a partial state ---------------------------
def test_a_reset_mid_watch_resumes_from_the_last_event_without_a_relist(api: ReplayAPIServer, tmp_path: Path) -> None:
    """The apiserver dies mid-watch (RST, no end of stream) after three events: the next watch starts from the
    last one applied (347), not from where the broken watch began (345), and nothing is listed again."""
    api.add_exchange("priorityclasses-list")
    recorded = load_exchange("priorityclasses-watch-bookmarks")["response"]
    api.add(Route(method="GET", path=PC, status=200, body_lines=recorded["body_lines"][:2], reset=True,
                  query={"resourceVersion": "345"}, times=1))
    api.add_watch(PC, [], query={"resourceVersion": "347"})
    state = RecordingState(("PriorityClass",))
    with live(state, api.url, tmp_path) as src:
        wait_for(lambda: len(watches(api, PC)) >= 2, what="the watch again after the reset")
        assert [q["resourceVersion"] for q in watches(api, PC)] == ["345", "347"]
        assert len(lists(api, PC)) == 1
        assert src.status()["PriorityClass"].relists_after_410 == 0
        assert state.priority_class("koord-watch-demo") is not None    # the events before the reset stay applied
        assert src.status()["PriorityClass"].errors == 1


def test_an_unreachable_api_server_is_tried_again_within_a_second(tmp_path: Path) -> None:
    """A restart or failover refuses or resets connections for a while: however long it lasts, the next try is at
    most a second away, so the watch is back within about a second of the server answering. An API server that
    answers with errors still backs off to the 30 s cap."""
    timing = Timing()
    waits = [timing.delay(n, True, u / 20) for n in range(1, 40) for u in range(20)]
    assert max(waits) <= 1.0 and min(waits) > 0
    answered = [timing.delay(n, False, 0.999) for n in range(1, 40)]
    assert max(answered) > 20 and max(answered) <= 36


def test_a_restarted_api_server_is_watched_again_from_where_it_was(tmp_path: Path) -> None:
    port = free_port()
    state = RecordingState(("PriorityClass",))
    srv = ReplayAPIServer(port=port).start()
    srv.add_exchange("priorityclasses-list")
    srv.add_watch(PC, [])
    # The shipped backoff, not the tests' short one: it is what brings the watch back.
    with live(state, srv.url, tmp_path, timing=Timing(watch_timeout=5)) as src:
        wait_for(lambda: state.ready, what="sync")
        srv.stop()
        wait_for(lambda: src.status()["PriorityClass"].errors >= 4, timeout=20, what="several failed reconnects")
        with ReplayAPIServer(port=port) as again:
            again.add_watch(PC, [])
            wait_for(lambda: watches(again, PC), timeout=5, what="the watch after the restart")
            assert watches(again, PC)[0]["resourceVersion"] == "345"
            assert lists(again, PC) == []


def test_a_review_before_the_first_sync_is_a_failed_call_not_a_partial_answer(tmp_path: Path, cert_dir: Path) -> None:
    """Until every kind is listed the apiserver gets a 503 naming what is missing, and applies the webhook's
    failurePolicy; never an answer from a state that lacks a namespace's labels or a PriorityClass."""
    port = free_port()
    state = ClusterState(WEBHOOK_KINDS)
    review = load_fixture("admission/v1-mutate-create-plain.json")
    with live(state, f"http://127.0.0.1:{port}", tmp_path), run_server(state, cert_dir) as web, \
            web.client() as http:
        with ReplayAPIServer(port=port) as srv:
            for kind, (name, path) in WEBHOOK_LISTS.items():   # every kind but one lists
                if kind != "ClusterColocationProfile":
                    srv.add_exchange(name, path=path)
                    srv.add_watch(path, [])
            wait_for(lambda: state.synced_kinds() == set(WEBHOOK_KINDS) - {"ClusterColocationProfile"},
                     what="all kinds but the profiles")
            r = http.post("/mutate", json=review)
            assert r.status_code == 503
            assert r.json()["error"].startswith("cluster state not synced yet: ClusterColocationProfile")
            name, path = WEBHOOK_LISTS["ClusterColocationProfile"]
            srv.add_exchange(name, path=path)
            srv.add_watch(path, [])
            wait_for(lambda: state.ready, what="the profiles too")
            answered = http.post("/mutate", json=review)
            assert answered.status_code == 200 and answered.json()["response"]["uid"] == review["request"]["uid"]
        metrics = web.metrics()
        assert 'outcome="not_ready"' in metrics
