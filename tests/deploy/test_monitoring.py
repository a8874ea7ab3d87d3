"""manifests/components/monitoring: the PodMonitors, the alerts and the Grafana dashboard against what the programs
really export.

The metric names come from the programs themselves: a real webhook server scraped over HTTP on its metrics port
(tests/serving.py), the certificate watcher's metrics (webhook/tls/watch.py), and a real agent metrics server
scraped over HTTP. Every metric and label an alert or a dashboard query names must be among them. The alerts are
checked by ``promtool check rules`` and proved to fire on the right series by ``promtool test rules``
(tests/promtool/alerts.test.yaml); each alert's unit test is shown to fail when the alert cannot fire.
"""

from __future__ import annotations

import json
import re
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from tests.serving import run_server
from webhook.agent.edges.metrics_server import Health, serve
from webhook.agent.metrics import AgentMetrics
from webhook.cli import webhook as webhook_cli
from webhook.cluster.state import AGENT_KINDS, ClusterState
from webhook.server.metrics import Metrics, ReviewFamily, RuleDurations
from webhook.tls.watch import CertWatcher

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "components" / "monitoring"
RULES_FILE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboards" / "colocation.json"
UNIT_TESTS = ROOT / "tests" / "promtool" / "alerts.test.yaml"
PROMTOOL = shutil.which("promtool")
KUBECTL = shutil.which("kubectl")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package prometheus)")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (Debian package kubernetes-client)")
# Labels Prometheus adds to every series of a PodMonitor target.
TARGET_LABELS = {"namespace", "pod", "container", "endpoint", "job", "instance"}
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("", "_sum", "_count", "_created"), "gauge": ("",), "info": ("_info",), "unknown": ("",)}


# -- what the programs export ------------------------------------------------------------------------------
def _families(text: str) -> dict[str, set[str]]:
    """Series name -> label names, from Prometheus text: every name a query may use for each family (a counter
    ``x`` is ``x_total`` and ``x_created``; a histogram has ``_bucket`` (with ``le``), ``_sum``, ``_count``...),
    whether or not it has samples yet."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for suffix in SUFFIXES[family.type]:
            out.setdefault(family.name + suffix, set())
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def _declared_labels(*owners: object) -> dict[str, set[str]]:
    """Family name -> label names of the prometheus_client metrics held by ``owners`` (labelled metrics show no
    sample, so no label, before their first use)."""
    out: dict[str, set[str]] = {}
    for owner in owners:
        for metric in vars(owner).values():
            if isinstance(metric, MetricWrapperBase):
                out[metric._name] = set(metric._labelnames)
            elif isinstance(metric, (ReviewFamily, RuleDurations)):
                out[metric.name] = set(metric.labelnames)
    return out


def _merge(into: dict[str, set[str]], names: dict[str, set[str]], declared: dict[str, set[str]]) -> None:
    for name, labels in names.items():
        family = next((f for f in declared if name.startswith(f) and name[len(f):] in
                       {"", "_total", "_created", "_bucket", "_sum", "_count", "_info"}), None)
        extra = declared.get(family, set()) if family else set()
        into.setdefault(name, set()).update(labels | extra | ({"le"} if name.endswith("_bucket") else set()))


def live_kept(state: ClusterState) -> ClusterState:
    """``state`` as the live source keeps it: every kind listed, so the cache's age and last sync have samples."""
    now, wall = time.monotonic(), time.time()
    for kind in state.kinds:
        state.mark_listed(kind, now, wall)
    return state


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Every series name either program exports -> its label names."""
    out: dict[str, set[str]] = {}
    # The webhook, scraped over HTTP on its metrics port, its state as the live source keeps it.
    with run_server(live_kept(ClusterState()), tmp_path_factory.mktemp("certs")) as server:
        webhook_text = server.metrics()
    _merge(out, _families(webhook_text), _declared_labels(Metrics(ClusterState())))
    # The certificate metrics the serving command adds to the same registry.
    registry = CollectorRegistry()
    certs = tmp_path_factory.mktemp("watch")
    watcher = CertWatcher(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), certs / "tls.crt", certs / "tls.key",
                          registry=registry)
    _merge(out, _families(generate_latest(registry).decode()), _declared_labels(watcher))
    # The agent, scraped over HTTP.
    agent = AgentMetrics()
    agent.watch_cache(live_kept(ClusterState(AGENT_KINDS)))
    httpd = serve(0, agent, Health(1.0), host="127.0.0.1")
    try:
        agent_text = httpx.get(f"http://127.0.0.1:{httpd.server_address[1]}/metrics", timeout=10).text
    finally:
        httpd.shutdown()
        httpd.server_close()
    _merge(out, _families(agent_text), _declared_labels(agent))
    return out


def test_the_exported_names_are_what_a_query_uses(exported: dict[str, set[str]]) -> None:
    """Counters carry _total, histograms _bucket with le; the cache and certificate families are there."""
    assert "colocation_webhook_requests_total" in exported and "colocation_webhook_requests" not in exported
    assert exported["colocation_webhook_requests_total"] >= {"endpoint", "operation", "outcome"}
    assert "le" in exported["colocation_webhook_request_duration_seconds_bucket"]
    assert exported["colocation_webhook_cache_synced"] == {"kind"}
    assert exported["colocation_webhook_cache_age_seconds"] == {"kind"}
    assert exported["colocation_webhook_cache_last_sync_timestamp_seconds"] == {"kind"}
    assert exported["colocation_agent_cache_age_seconds"] == {"kind"}
    assert "colocation_webhook_certificate_expiry_timestamp_seconds" in exported
    assert exported["colocation_agent_eviction_failures_total"] == {"reason", "outcome"}
    assert "controller_runtime_webhook_requests_in_flight" in exported
    assert exported["colocation_webhook_rule_duration_seconds_count"] == {"type", "operation", "rule"}


# -- PromQL: the metric and label names an expression uses ----------------------------------------------
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset",
                   "bool", "inf", "nan"}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
MATCHERS = re.compile(r"\{([^}]*)\}")
NAME = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*")


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) in a PromQL expression (Grafana's ``$variables`` allowed)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    labels: set[str] = set()
    for body in MATCHERS.findall(expr):
        labels |= {m.split("=")[0].split("!")[0].strip() for m in body.split(",") if m.strip()}
    for _, body in GROUPING.findall(expr):
        labels |= {label.strip() for label in body.split(",") if label.strip()}
    rest = GROUPING.sub(" ", MATCHERS.sub(" ", re.sub(r"\[[^\]]*\]", " ", expr)))
    metrics = set()
    for m in NAME.finditer(rest):
        if m.group() in PROMQL_KEYWORDS or rest[m.end():].lstrip().startswith("("):
            continue               # a keyword, or a function or aggregation being called
        metrics.add(m.group())
    return metrics, labels


@pytest.mark.parametrize(("expr", "metrics", "labels"), [
    ('sum by (rule) (rate(x_total{namespace="a", b=~"c|d"}[5m] offset 10m)) > 3 * y or vector(0)',
     {"x_total", "y"}, {"rule", "namespace", "b"}),
    ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[$__rate_interval])))", {"h_bucket"}, {"le"}),
    ("a unless on (pod) b", {"a", "b"}, {"pod"}),
    ("time() - t > 14 * 86400", {"t"}, set()),
])
def test_promql_names(expr: str, metrics: set[str], labels: set[str]) -> None:
    assert promql_names(expr) == (metrics, labels)


def _check_expr(where: str, expr: str, exported: dict[str, set[str]]) -> list[str]:
    metrics, labels = promql_names(expr)
    problems = [f"{where}: {m} is not a metric either program exports" for m in sorted(metrics - set(exported))]
    if not metrics:
        problems.append(f"{where}: names no metric")
    known = TARGET_LABELS | {label for m in metrics for label in exported.get(m, set())}
    problems += [f"{where}: label {label} is on none of {sorted(metrics)}" for label in sorted(labels - known)]
    return problems


# -- the alerts ------------------------------------------------------------------------------------------
def _rule_object() -> dict[str, Any]:
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(RULES_FILE.read_text()) if d]
    (obj,) = docs
    return obj


def _alerts() -> list[dict[str, Any]]:
    return [r for g in _rule_object()["spec"]["groups"] for r in g["rules"] if "alert" in r]


ISSUE_ALERTS = {  # what each alert is for (issue 12) -> its name
    "certificate expiry within 14 days": "ColocationWebhookCertificateExpiresSoon",
    "cache not synced": "ColocationWebhookCacheNotSynced",
    "cache older than a threshold (issue 34)": "ColocationWebhookCacheStale",
    "agent cache older than a threshold (issue 34)": "ColocationAgentCacheStale",
    "error rate": "ColocationWebhookErrors",
    "deny-rate spike": "ColocationWebhookDenialSpike",
    "p99 above 100 ms": "ColocationWebhookLatencyHigh",
    "agent cycle stale": "ColocationAgentCycleStale",
    "evictions failing": "ColocationAgentEvictionsFailing",
    "kernel refusing cgroup writes": "ColocationAgentCgroupWritesRefused",
    "another writer (issue 16)": "ColocationAgentOtherWriter",
}


def test_the_prometheus_rule_has_every_alert_and_says_what_to_do() -> None:
    obj = _rule_object()
    assert (obj["apiVersion"], obj["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    alerts = {a["alert"]: a for a in _alerts()}
    assert set(alerts) == set(ISSUE_ALERTS.values())
    for name, alert in alerts.items():
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        assert set(alert["annotations"]) >= {"summary", "description"}, name
        assert re.fullmatch(r"\d+[smh]", alert["for"]), name


RUNBOOK = ROOT / "docs" / "operations.md"


def heading_anchors(markdown: str) -> set[str]:
    """The anchors of a page's headings as GitHub makes them (lower case, punctuation dropped, spaces to hyphens),
    outside code blocks."""
    anchors, fence = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"#{1,6} (.+)", line)
        if m:
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return anchors


def runbook_findings(alerts: list[dict[str, Any]], page: str, anchors: set[str]) -> list[str]:
    """Each alert whose runbook_url is not a section of ``page`` (``page#anchor``, the anchor a heading's)."""
    found = []
    for alert in alerts:
        url = alert.get("annotations", {}).get("runbook_url", "")
        path, _, anchor = url.partition("#")
        if path != page or anchor not in anchors:
            found.append(f"{alert['alert']}: {url!r}")
    return found


def test_every_alert_has_a_runbook_section_in_the_operations_page() -> None:
    """Each alert's runbook_url is its own section of docs/operations.md, which says what to do about it."""
    anchors = heading_anchors(RUNBOOK.read_text())
    assert runbook_findings(_alerts(), "docs/operations.md", anchors) == []
    urls = [a["annotations"]["runbook_url"] for a in _alerts()]
    assert urls == [f"docs/operations.md#{a['alert'].lower()}" for a in _alerts()], "one section per alert"


def test_the_runbook_check_finds_a_missing_section() -> None:
    anchors = heading_anchors("# Ops\n## Alerts\n### ColocationX\n```sh\n# ColocationY\n```\n")
    assert anchors == {"ops", "alerts", "colocationx"}
    alerts = [{"alert": "ColocationX", "annotations": {"runbook_url": "docs/operations.md#colocationx"}},
              {"alert": "ColocationY", "annotations": {"runbook_url": "docs/operations.md#colocationy"}},
              {"alert": "ColocationZ", "annotations": {}}]
    assert runbook_findings(alerts, "docs/operations.md", anchors) == ["ColocationY: 'docs/operations.md#colocationy'",
                                                                       "ColocationZ: ''"]


def test_every_alert_names_real_metrics_and_labels(exported: dict[str, set[str]]) -> None:
    problems = [p for a in _alerts() for p in _check_expr(a["alert"], a["expr"], exported)]
    assert problems == []


def test_the_name_check_catches_a_misspelled_metric_and_label(exported: dict[str, set[str]]) -> None:
    assert _check_expr("x", "rate(colocation_webhook_requests[5m])", exported) == [
        "x: colocation_webhook_requests is not a metric either program exports"]
    assert _check_expr("x", "sum by (rul) (colocation_webhook_denials_total)", exported) == [
        "x: label rul is on none of ['colocation_webhook_denials_total']"]


@pytest.fixture()
def rule_dir(tmp_path: Path) -> Path:
    """rules.yaml (the PrometheusRule's groups, what the Prometheus Operator hands Prometheus) beside the unit tests."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": _rule_object()["spec"]["groups"]}))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return tmp_path


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None, "promtool is not installed"
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@needs_promtool
def test_promtool_check_rules(rule_dir: Path) -> None:
    run = _promtool("check", "rules", "rules.yaml", cwd=rule_dir)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in run.stdout


@needs_promtool
def test_promtool_check_rules_refuses_a_broken_rule(rule_dir: Path) -> None:
    groups = _rule_object()["spec"]["groups"]
    groups[0]["rules"][0]["expr"] = "sum by (namespace (colocation_webhook_cache_synced)"
    (rule_dir / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    run = _promtool("check", "rules", "rules.yaml", cwd=rule_dir)
    assert run.returncode != 0 and "FAILED" in run.stdout + run.stderr


@needs_promtool
def test_promtool_unit_tests_pass(rule_dir: Path) -> None:
    run = _promtool("test", "rules", UNIT_TESTS.name, cwd=rule_dir)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_every_alert_has_a_unit_test_where_it_fires_and_one_where_it_does_not() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert fires == names and quiet == names


@needs_promtool
def test_each_unit_test_fails_when_its_alert_cannot_fire(rule_dir: Path) -> None:
    """Every alert made unable to fire: promtool reports the unit test of each one as failed (one run for all)."""
    groups = _rule_object()["spec"]["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        rule["expr"] = "vector(1) > 2"
    (rule_dir / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    run = _promtool("test", "rules", UNIT_TESTS.name, cwd=rule_dir)
    assert run.returncode != 0
    failed = set(re.findall(r"alertname: (\w+), time", run.stdout + run.stderr))
    assert failed == set(ISSUE_ALERTS.values())


# -- the Grafana dashboard -------------------------------------------------------------------------------
def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def _panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _queries(dash: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and query variable; ``label_values(m, l)`` as ``m`` by ``l``."""
    for panel in _panels(dash):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query)
            assert m, f"variable {var['name']}: {query}"
            yield f"variable {var['name']}", f"sum by ({m.group(2)}) ({m.group(1)})"


def test_every_dashboard_query_names_real_metrics_and_labels(exported: dict[str, set[str]]) -> None:
    problems = [p for where, expr in _queries(_dashboard()) for p in _check_expr(where, expr, exported)]
    assert problems == []


def test_the_dashboard_shows_both_programs(exported: dict[str, set[str]]) -> None:
    used = {m for _, expr in _queries(_dashboard()) for m in promql_names(expr)[0]}
    assert any(m.startswith("colocation_webhook_") for m in used)
    assert any(m.startswith("colocation_agent_") for m in used)
    # Every alert's metric has a panel: what pages an operator is on the dashboard.
    alerted = {m for a in _alerts() for m in promql_names(a["expr"])[0]}
    assert alerted <= used


def test_the_dashboard_is_a_loadable_grafana_dashboard() -> None:
    dash = _dashboard()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in _panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    boxes = []
    for panel in _panels(dash):
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, panel["title"]
        boxes.append((panel["title"], g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"]))
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            # Only variables the dashboard defines, or Grafana's own.
            for var in re.findall(r"\$\{?(\w+)", target["expr"]):
                assert var in variables or var.startswith("__"), f"{panel['title']}: ${var}"
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap = a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]
            assert not overlap, f"panels {a[0]!r} and {b[0]!r} overlap"


# -- the component ----------------------------------------------------------------------------------------
def _kustomize(path: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None, "kubectl is not installed"
    out = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@needs_kubectl
def test_the_pod_monitors_scrape_the_metrics_ports_the_programs_serve() -> None:
    install = _kustomize(ROOT / "manifests")
    monitoring = _kustomize(MONITORING)
    monitors = [o for o in monitoring if o["kind"] == "PodMonitor"]
    assert {m["metadata"]["name"] for m in monitors} == {"colocation-webhook", "colocation-agent"}
    for monitor in monitors:
        (workload,) = [o for o in install if o["kind"] in ("Deployment", "DaemonSet")
                       and o["metadata"]["name"] == monitor["metadata"]["name"]]
        template = workload["spec"]["template"]
        assert monitor["metadata"]["namespace"] == workload["metadata"]["namespace"]
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [workload["metadata"]["namespace"]]}
        labels = template["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
        (container,) = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["path"] == "/metrics" and endpoint["scheme"] == "http"
        port = ports[endpoint["port"]]
        if workload["kind"] == "Deployment":
            # The webhook's --metrics-port, as its command line sets it (or the default), not the TLS port.
            assert webhook_cli.parser().parse_args(container["args"]).metrics_port == port
        else:
            assert port == 9316


@needs_kubectl
def test_the_dashboard_config_map_carries_the_dashboard() -> None:
    (cm,) = [o for o in _kustomize(MONITORING) if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["colocation.json"]) == _dashboard()
