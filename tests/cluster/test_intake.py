"""One judgement of what enters the state (webhook/cluster/intake.py), whichever source brings it: the same objects
through a folder and through list+watch give the same state, the same marks, the same log line and the same
answers to a review."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.apiserver import ReplayAPIServer
from tests.cluster.test_live import CCP, CM, LR, NS, PC, RQ, live, wait_for
from tests.mutating import labels_of, mutate, namespace, pod, priority_class, profile
from webhook.cluster.files import FilesSource
from webhook.cluster.intake import Judgement, judge
from webhook.cluster.state import KINDS, WEBHOOK_KINDS, ClusterState, object_key

EMPTY_IN = ("selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or "
            "'NotIn'")
BAD_LABEL = ("spec.labels[team]: Invalid value: \"a b\": a valid label must be an empty string or consist of "
             "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
             "(e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
             "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def _objects() -> list[dict[str, Any]]:
    """A cluster's worth: classes, namespaces, a profile that applies and two the apiserver stores but no rule
    can apply (an In without values passes our CRD's schema; so does a label value the pod could not carry)."""
    return [
        priority_class("koord-batch", 5000),
        priority_class("koord-prod", 9000),
        namespace("colo-demo", **{"koordinator.sh/enable-colocation": "true"}),
        namespace("default"),
        profile("colo-be", namespaceSelector={"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                selector={"matchLabels": {"app": "batch"}}, qosClass="BE", priorityClassName="koord-batch"),
        profile("colo-empty-in", selector={"matchExpressions": [{"key": "tier", "operator": "In", "values": []}]},
                qosClass="BE"),
        profile("colo-bad-label", labels={"team": "a b"}),
    ]


def test_judge_says_what_the_apiserver_refuses_and_what_no_rule_can_apply() -> None:
    assert judge(priority_class("koord-batch", 5000)) == Judgement()
    refused = judge({**priority_class("koord-batch", 5000), "value": "high"})
    assert refused.unusable is None and refused.reason == (
        "json: cannot unmarshal string into Go struct field PriorityClass.value of type int32")
    empty_in, bad_label = (judge(o) for o in _objects()[-2:])
    assert empty_in == Judgement(unusable=(("spec", "selector", "matchExpressions", 0, "values"), EMPTY_IN))
    assert bad_label.unusable == (("spec", "labels", "team"), BAD_LABEL) and bad_label.reason == BAD_LABEL


def _from_files(folder: Path, caplog: pytest.LogCaptureFixture) -> tuple[ClusterState, list[str]]:
    (folder / "state.yaml").write_text(yaml.safe_dump_all(_objects(), sort_keys=False))
    state = ClusterState(WEBHOOK_KINDS)
    caplog.clear()
    FilesSource(folder, state).load()
    return state, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _from_the_api(folder: Path, caplog: pytest.LogCaptureFixture) -> tuple[ClusterState, list[str]]:
    paths = {"PriorityClass": PC, "Namespace": NS, "ResourceQuota": RQ, "LimitRange": LR,
             "ClusterColocationProfile": CCP, "ConfigMap": CM}
    state = ClusterState(WEBHOOK_KINDS)
    caplog.clear()
    with ReplayAPIServer(speed=20) as api:
        for kind, path in paths.items():
            # in name order, as the apiserver lists
            items = sorted((o for o in _objects() if o["kind"] == kind), key=lambda o: o["metadata"]["name"])
            api.add_json("GET", path, {"kind": f"{kind}List", "apiVersion": KINDS[kind].api_version,
                                       "metadata": {"resourceVersion": "1"}, "items": items})
            api.add_watch(path, [])
        with live(state, api.url, folder):
            wait_for(lambda: state.ready, what="first sync")
    return state, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_same_objects_through_both_sources_give_one_state(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    (tmp_path / "files").mkdir()
    files, files_said = _from_files(tmp_path / "files", caplog)
    api, api_said = _from_the_api(tmp_path, caplog)
    for kind in WEBHOOK_KINDS:
        assert sorted(files.objects(kind), key=object_key) == sorted(api.objects(kind), key=object_key), kind
        assert files.invalid(kind) == api.invalid(kind), kind
    compiled = [(p.name, p.error) for p in files.colocation_profiles()]
    assert compiled == [(p.name, p.error) for p in api.colocation_profiles()]
    assert compiled == [("colo-bad-label", BAD_LABEL), ("colo-be", None), ("colo-empty-in", EMPTY_IN)]
    assert files.invalid_counts() == api.invalid_counts() and files.invalid_counts()["ClusterColocationProfile"] == 2
    # Named once by each source: where it is (a file's line; the API's kind and name), then the same words.
    state_yaml = tmp_path / "files" / "state.yaml"
    assert [s for s in files_said if "colo-" in s] == [
        f"{state_yaml}:55: ClusterColocationProfile colo-empty-in: {EMPTY_IN}; not applied until it is fixed",
        f"{state_yaml}:64: ClusterColocationProfile colo-bad-label: {BAD_LABEL}; not applied until it is fixed"]
    assert [s for s in api_said if "colo-" in s] == [
        f"ClusterColocationProfile colo-bad-label: {BAD_LABEL}; not applied until it is fixed",
        f"ClusterColocationProfile colo-empty-in: {EMPTY_IN}; not applied until it is fixed"]
    # A review gets one answer from either state: the good profile applied, each unusable one warned about.
    for labels in ({"app": "batch"}, {"app": "web", "tier": "x"}):
        answers = [mutate(pod("p", "colo-demo", labels=labels), s) for s in (files, api)]
        assert answers[0][0].warnings == answers[1][0].warnings and answers[0][1] == answers[1][1]
        warned, patched = answers[0][0].warnings, answers[0][1]
        assert patched is not None
        assert (labels_of(patched).get("koordinator.sh/qosClass") == "BE") is (labels == {"app": "batch"})
        # (a warning is cut to the length the apiserver takes)
        assert warned[0].startswith("colocation profile colo-bad-label ignored: spec.labels[team]: Invalid value")
        assert warned[1].startswith("colocation profile colo-empty-in ignored: selector.matchExpressions[0]")


def test_a_folder_reloaded_unchanged_names_an_unusable_profile_once(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="webhook.cluster.files")
    (tmp_path / "state.yaml").write_text(yaml.safe_dump_all(_objects(), sort_keys=False))
    source = FilesSource(tmp_path, ClusterState(WEBHOOK_KINDS))
    source.load()
    assert source.reload() and source.reload()
    said = [r.getMessage() for r in caplog.records if "not applied" in r.getMessage()]
    assert len(said) == 2 and "colo-empty-in" in said[0] and "colo-bad-label" in said[1]
    fixed = [o for o in _objects() if o["metadata"]["name"] != "colo-bad-label"]
    (tmp_path / "state.yaml").write_text(yaml.safe_dump_all(fixed, sort_keys=False))
    assert source.reload()
    assert [p.error for p in source.state.colocation_profiles()] == [None, EMPTY_IN]
    assert len([r for r in caplog.records if "not applied" in r.getMessage()]) == 2   # nothing new to name
