"""``--quota-config``: the apiserver's AdmissionConfiguration (plugin ResourceQuota, inline or by
path) or a bare ResourceQuota Configuration, reduced to its ``limitedResources`` list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

CONFIG_KINDS = {
    ("apiserver.config.k8s.io/v1", "ResourceQuotaConfiguration"),
    ("resourcequota.admission.k8s.io/v1beta1", "Configuration"),
    ("resourcequota.admission.k8s.io/v1alpha1", "Configuration"),
    ("resourcequota.admission.k8s.io/v1", "Configuration"),
}
ADMISSION_CONFIG_VERSIONS = ("apiserver.config.k8s.io/v1", "apiserver.k8s.io/v1alpha1")
SCOPE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class QuotaConfigError(ValueError):
    """An unusable quota configuration; the message names the file and field."""


def _read(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise QuotaConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise QuotaConfigError(f"{path}{line}: invalid YAML: {getattr(exc, 'problem', exc)}") from None


def _limited_resources(doc: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict) or (doc.get("apiVersion"), doc.get("kind")) not in CONFIG_KINDS:
        raise QuotaConfigError(f"{where}: expected a ResourceQuota configuration "
                               "(resourcequota.admission.k8s.io/v1beta1 Configuration or "
                               "apiserver.config.k8s.io/v1 ResourceQuotaConfiguration)")
    items = doc.get("limitedResources") or []
    if not isinstance(items, list):
        raise QuotaConfigError(f"{where}: limitedResources must be a list")
    for i, item in enumerate(items):
        at = f"{where}: limitedResources[{i}]"
        if not isinstance(item, dict):
            raise QuotaConfigError(f"{at}: must be an object")
        if not item.get("resource"):
            raise QuotaConfigError(f"{at}.resource: Required value")
        for j, scope in enumerate(item.get("matchScopes") or []):
            sat = f"{at}.matchScopes[{j}]"
            if not isinstance(scope, dict) or not scope.get("scopeName"):
                raise QuotaConfigError(f"{sat}.scopeName: Required value")
            op, values = scope.get("operator"), scope.get("values") or []
            if op not in SCOPE_OPERATORS:
                raise QuotaConfigError(f"{sat}.operator: not a valid selector operator: {op!r}")
            if op in ("In", "NotIn") and not values:
                raise QuotaConfigError(f"{sat}.values: must be at least one value when `operator` is 'In' or "
                                       "'NotIn' for scope selector")
            if op in ("Exists", "DoesNotExist") and values:
                raise QuotaConfigError(f"{sat}.values: must be no value when `operator` is 'Exist' or "
                                       "'DoesNotExist' for scope selector")
        contains = item.get("matchContains") or []
        if not isinstance(contains, list) or not all(isinstance(c, str) for c in contains):
            raise QuotaConfigError(f"{at}.matchContains: must be a list of strings")
    return items


def load_quota_config(path: Path) -> list[dict[str, Any]]:
    """The ``limitedResources`` entries of the file at ``path``."""
    doc = _read(path)
    if isinstance(doc, dict) and doc.get("kind") == "AdmissionConfiguration":
        for i, plugin in enumerate(doc.get("plugins") or []):
            if not isinstance(plugin, dict) or plugin.get("name") != "ResourceQuota":
                continue
            if plugin.get("configuration") is not None:
                return _limited_resources(plugin["configuration"], f"{path}: plugins[{i}].configuration")
            if plugin.get("path"):
                inner = (path.parent / plugin["path"]).resolve()
                return _limited_resources(_read(inner), str(inner))
            raise QuotaConfigError(f"{path}: plugins[{i}] (ResourceQuota) has neither configuration nor path")
        raise QuotaConfigError(f"{path}: AdmissionConfiguration has no ResourceQuota plugin entry")
    return _limited_resources(doc, str(path))
