"""``--quota-config``: the apiserver's AdmissionConfiguration (plugin ResourceQuota, inline or by
path) or a bare ResourceQuota Configuration, reduced to its ``limitedResources`` list.

Every fault is a QuotaConfigError naming the file and the field, so the webhook refuses to start
with a clear message rather than enforcing something else than the apiserver would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from webhook.admission.domain.quota import scope_requirement_error
from webhook.cluster.files import utf8
from webhook.cluster.yaml_input import load, yaml_problem

CONFIG_KINDS = {
    ("apiserver.config.k8s.io/v1", "ResourceQuotaConfiguration"),
    ("resourcequota.admission.k8s.io/v1beta1", "Configuration"),
    ("resourcequota.admission.k8s.io/v1alpha1", "Configuration"),
    ("resourcequota.admission.k8s.io/v1", "Configuration"),
}
ADMISSION_CONFIG_VERSIONS = ("apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1alpha1",
                             "apiserver.k8s.io/v1alpha1")


class QuotaConfigError(ValueError):
    """An unusable quota configuration; the message names the file and field."""


def _read(path: Path) -> Any:
    try:
        return load(utf8(path.read_bytes()))
    except OSError as exc:
        raise QuotaConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError as exc:  # not UTF-8 text (byte N)
        raise QuotaConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise QuotaConfigError(yaml_problem(path, exc)) from None


def _kind_of(doc: Any) -> str:
    if not isinstance(doc, dict):
        return "an empty document" if doc is None else f"a {type(doc).__name__}"
    return f"apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r}"


def _limited_resources(doc: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict) or (doc.get("apiVersion"), doc.get("kind")) not in CONFIG_KINDS:
        raise QuotaConfigError(f"{where}: expected a ResourceQuota configuration "
                               "(resourcequota.admission.k8s.io/v1beta1 Configuration or "
                               f"apiserver.config.k8s.io/v1 ResourceQuotaConfiguration), got {_kind_of(doc)}")
    items = doc.get("limitedResources") or []
    if not isinstance(items, list):
        raise QuotaConfigError(f"{where}: limitedResources must be a list")
    for i, item in enumerate(items):
        at = f"{where}: limitedResources[{i}]"
        if not isinstance(item, dict):
            raise QuotaConfigError(f"{at}: must be an object")
        if not item.get("resource"):
            raise QuotaConfigError(f"{at}.resource: Required value")  # upstream ValidateConfiguration
        if not isinstance(item["resource"], str) or not isinstance(item.get("apiGroup") or "", str):
            raise QuotaConfigError(f"{at}: resource and apiGroup must be strings")
        scopes = item.get("matchScopes") or []
        if not isinstance(scopes, list):
            raise QuotaConfigError(f"{at}.matchScopes: must be a list")
        for j, scope in enumerate(scopes):
            problem = scope_requirement_error(scope, f"{at}.matchScopes[{j}]")
            if problem:
                raise QuotaConfigError(problem)
        contains = item.get("matchContains") or []
        if not isinstance(contains, list) or not all(isinstance(c, str) for c in contains):
            raise QuotaConfigError(f"{at}.matchContains: must be a list of strings")
    return items


def load_quota_config(path: Path) -> list[dict[str, Any]]:
    """The ``limitedResources`` entries of the file at ``path``."""
    doc = _read(path)
    if not (isinstance(doc, dict) and doc.get("kind") == "AdmissionConfiguration"):
        return _limited_resources(doc, str(path))
    if doc.get("apiVersion") not in ADMISSION_CONFIG_VERSIONS:
        raise QuotaConfigError(f"{path}: AdmissionConfiguration apiVersion must be one of "
                               f"{', '.join(ADMISSION_CONFIG_VERSIONS)}, got {doc.get('apiVersion')!r}")
    plugins = doc.get("plugins") or []
    if not isinstance(plugins, list):
        raise QuotaConfigError(f"{path}: plugins must be a list")
    for i, plugin in enumerate(plugins):
        if not isinstance(plugin, dict) or plugin.get("name") != "ResourceQuota":
            continue
        if plugin.get("configuration") is not None:
            return _limited_resources(plugin["configuration"], f"{path}: plugins[{i}].configuration")
        if plugin.get("path"):
            if not isinstance(plugin["path"], str):
                raise QuotaConfigError(f"{path}: plugins[{i}].path must be a string")
            # The apiserver resolves a relative path against the AdmissionConfiguration's folder.
            inner = (path.parent / plugin["path"]).resolve()
            return _limited_resources(_read(inner), f"{inner} (plugins[{i}].path of {path})")
        raise QuotaConfigError(f"{path}: plugins[{i}] (ResourceQuota) has neither configuration nor path")
    raise QuotaConfigError(f"{path}: AdmissionConfiguration has no ResourceQuota plugin entry")
