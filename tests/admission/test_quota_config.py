"""--quota-config in both forms (AdmissionConfiguration inline / by path, bare Configuration) and bad files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.validating_helpers import KOORD_PROD_CONFIG
from webhook.admission.quota_config import QuotaConfigError, load_quota_config

LIMITED = [{"resource": "pods", "matchScopes": [{"scopeName": "PriorityClass", "operator": "In", "values": ["koord-prod"]}]}]

BARE = KOORD_PROD_CONFIG

# The older layout: apiserver.k8s.io/v1alpha1 with the Configuration inline
# (staging/src/k8s.io/apiserver/pkg/apis/apiserver/v1alpha1/types.go).
INLINE = ("apiVersion: apiserver.k8s.io/v1alpha1\nkind: AdmissionConfiguration\nplugins:\n"
          '- name: "ResourceQuota"\n  configuration:\n' + textwrap.indent(BARE, "    "))

BY_PATH = """\
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration: {apiVersion: pod-security.admission.config.k8s.io/v1, kind: PodSecurityConfiguration}
- name: ResourceQuota
  path: quota/resourcequota.yaml
"""

NEW_KIND = """\
apiVersion: apiserver.config.k8s.io/v1
kind: ResourceQuotaConfiguration
limitedResources:
- resource: pods
  matchContains: ["requests.cpu"]
"""


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_bare_configuration(tmp_path: Path) -> None:
    assert load_quota_config(write(tmp_path, "q.yaml", BARE)) == LIMITED


def test_admission_configuration_inline(tmp_path: Path) -> None:
    assert load_quota_config(write(tmp_path, "admission.yaml", INLINE)) == LIMITED


def test_admission_configuration_by_relative_path(tmp_path: Path) -> None:
    write(tmp_path, "quota/resourcequota.yaml", BARE)
    assert load_quota_config(write(tmp_path, "admission.yaml", BY_PATH)) == LIMITED


def test_resource_quota_configuration_kind(tmp_path: Path) -> None:
    assert load_quota_config(write(tmp_path, "q.yaml", NEW_KIND)) == [{"resource": "pods",
                                                                       "matchContains": ["requests.cpu"]}]


def test_json_file(tmp_path: Path) -> None:
    import json

    import yaml

    assert load_quota_config(write(tmp_path, "q.json", json.dumps(yaml.safe_load(BARE)))) == LIMITED


BAD = [
    ("missing file", None, "cannot read"),
    ("empty file", "", "expected a ResourceQuota configuration (resourcequota.admission.k8s.io/v1beta1 "
                       "Configuration or apiserver.config.k8s.io/v1 ResourceQuotaConfiguration), got an empty document"),
    ("not YAML", "a: [b", ":1: invalid YAML"),
    ("wrong kind", "apiVersion: v1\nkind: ConfigMap\n", "got apiVersion 'v1' kind 'ConfigMap'"),
    ("no ResourceQuota plugin",
     "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: x\n",
     "AdmissionConfiguration has no ResourceQuota plugin entry"),
    ("plugin without configuration or path",
     "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: ResourceQuota\n",
     "plugins[0] (ResourceQuota) has neither configuration nor path"),
    ("plugins not a list",
     "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins: {name: ResourceQuota}\n",
     "plugins must be a list"),
    ("unknown AdmissionConfiguration version",
     "apiVersion: apiserver.config.k8s.io/v9\nkind: AdmissionConfiguration\nplugins: []\n",
     "AdmissionConfiguration apiVersion must be one of"),
    ("path to missing file",
     "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: ResourceQuota\n  path: nope.yaml\n",
     "nope.yaml: cannot read"),
    ("resource missing", BARE.replace("- resource: pods\n", "- apiGroup: ''\n"),
     "limitedResources[0].resource: Required value"),
    ("In without values", BARE.replace(", values: [koord-prod]", ""),
     "limitedResources[0].matchScopes[0].values: Invalid value: []: must be at least one value when `operator` is "
     "'In' or 'NotIn' for scope selector"),
    ("Exists with values", BARE.replace("operator: In", "operator: Exists"),
     "limitedResources[0].matchScopes[0].values: Invalid value: [\"koord-prod\"]: must be no value when `operator` is "
     "'Exist' or 'DoesNotExist' for scope selector"),
    ("bad operator", BARE.replace("operator: In", "operator: Equals"),
     "limitedResources[0].matchScopes[0].operator: Invalid value: \"Equals\": not a valid selector operator"),
    ("unknown scope", BARE.replace("scopeName: PriorityClass", "scopeName: Priority"),
     "limitedResources[0].matchScopes[0].scopeName: Unsupported value: \"Priority\""),
    ("BestEffort with In", BARE.replace("scopeName: PriorityClass", "scopeName: BestEffort"),
     "limitedResources[0].matchScopes[0].operator: Invalid value: \"In\": must be 'Exists' when scope is BestEffort"),
    ("matchContains not strings", BARE + "  matchContains: [1]\n", "limitedResources[0].matchContains: must be a list of strings"),
    ("limitedResources not a list", BARE.split("limitedResources:")[0] + "limitedResources: pods\n",
     "limitedResources must be a list"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD, ids=[c[0] for c in BAD])
def test_bad_config(tmp_path: Path, name: str, text: str | None, message: str) -> None:
    path = tmp_path / "q.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(QuotaConfigError) as err:
        load_quota_config(path)
    assert message in str(err.value)
    assert str(path) in str(err.value) or "nope.yaml" in str(err.value)


def test_inline_error_names_plugin_entry(tmp_path: Path) -> None:
    path = write(tmp_path, "a.yaml", INLINE.replace("operator: In", "operator: in"))
    with pytest.raises(QuotaConfigError, match=r"plugins\[0\]\.configuration: limitedResources\[0\]\.matchScopes\[0\]"):
        load_quota_config(path)
