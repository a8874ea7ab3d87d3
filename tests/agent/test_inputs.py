"""A cycle's cluster inputs: each pod object seen once through its view, the config in force for the node."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from webhook.agent.inputs import ClusterInputs, pod_view
from webhook.agent.metrics import AgentMetrics
from webhook.agent.options import AgentOptions
from webhook.cluster.state import AGENT_KINDS, SLO_CONFIG_NAME, SLO_CONFIG_NAMESPACE, ClusterState

NODE = "n1"


def _pod(name: str, qos: str | None = None, cpu: str = "500m") -> dict[str, Any]:
    labels = {"koordinator.sh/qosClass": qos} if qos else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}}


def _state(pods: list[dict[str, Any]], cm_data: dict[str, str] | None = None) -> ClusterState:
    state = ClusterState(AGENT_KINDS)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {}}, "status": {}}
    cms = [] if cm_data is None else [{"apiVersion": "v1", "kind": "ConfigMap", "data": cm_data,
                                       "metadata": {"name": SLO_CONFIG_NAME, "namespace": SLO_CONFIG_NAMESPACE}}]
    state.replace_all({"Pod": pods, "Node": [node], "ConfigMap": cms})
    return state


def test_a_pod_view_says_what_the_cycle_needs() -> None:
    view = pod_view(_pod("be", "BE"))
    assert (view.uid, view.be, view.besteffort, view.finished, view.cpu_request_milli) == (
        "uid-be", True, True, False, 500)
    ls = pod_view(_pod("ls", "LS"))
    assert (ls.be, ls.besteffort, ls.cpu_request_milli) == (False, False, 500)


def test_views_are_kept_while_the_objects_are_the_same() -> None:
    state = _state([_pod("a"), _pod("b", "BE")])
    inputs = ClusterInputs(AgentOptions(NODE), state, None, AgentMetrics())
    first = inputs.read().pods
    assert inputs.read().pods is first
    a, b = state.objects("Pod")
    changed = copy.deepcopy(b)
    changed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    state.replace_all({"Pod": [a, changed], "Node": state.objects("Node"), "ConfigMap": []})
    again = inputs.read().pods
    by_uid = {v.uid: v for v in again}
    assert by_uid["uid-a"] is next(v for v in first if v.uid == "uid-a")
    assert by_uid["uid-b"].cpu_request_milli == 2000


def test_no_state_is_no_node_no_pods_and_the_default_config() -> None:
    read = ClusterInputs(AgentOptions(NODE), None, None, AgentMetrics()).read()
    assert (read.node, read.pods, read.config_found, read.status) == (None, [], False, {})
    assert not read.colocation.enable and read.cpu_suppress.cpuSuppressPolicy == "cpuset"


def test_a_bad_config_is_counted_once_and_the_last_good_one_kept() -> None:
    metrics = AgentMetrics()
    good = {"colocation-config": '{"enable": true}'}
    state = _state([], good)
    inputs = ClusterInputs(AgentOptions(NODE), state, None, metrics)
    assert inputs.read().colocation.enable and inputs.read().config_found
    bad = {"colocation-config": "{not json"}
    state.replace_all({"Pod": [], "Node": state.objects("Node"), "ConfigMap": [
        {**state.objects("ConfigMap")[0], "data": bad}]})
    assert inputs.read().colocation.enable
    inputs.read()
    assert metrics.registry.get_sample_value("colocation_agent_config_errors_total") == 1


def test_key_notices_are_logged_once_and_unknown_keys_counted(caplog: pytest.LogCaptureFixture) -> None:
    metrics = AgentMetrics()
    state = _state([], {"colocation-config": '{"enable": true, "enabel": false, "batchCPUThresholdPercent": 50}'})
    inputs = ClusterInputs(AgentOptions(NODE), state, None, metrics)
    with caplog.at_level(logging.INFO, "colocation-agent"):
        for _ in range(3):
            read = inputs.read()
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, 'slo-controller-config: colocation-config: unknown key "enabel" is ignored, did you mean '
                          '"enable"?'),
        (logging.INFO, 'slo-controller-config: colocation-config: key "batchCPUThresholdPercent" is Koordinator\'s '
                       'but this agent does not act on it')]
    assert read.colocation.enable and [n.key for n in read.config_notices] == ["enabel", "batchCPUThresholdPercent"]
    assert metrics.registry.get_sample_value("colocation_agent_config_unknown_keys",
                                             {"section": "colocation-config"}) == 1
