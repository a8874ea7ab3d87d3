"""A ClusterColocationProfile as it enters the cluster state: every field checked once and compiled (pure).

``compile_profile`` is the judgement of a profile whichever source brings it (``webhook/cluster/intake.py``): a
profile the apiserver stores (our CRD's schema takes it) but no rule could apply, such as a selector
``{key: tier, operator: In, values: []}`` or a label the apiserver would refuse on the pod, compiles with ``error``
set; the state holds it marked, and it never matches (docs/cluster-state.md, "A profile no rule can apply").
The rules (``webhook/admission/domain/colocation_profile.py``) and the generated policies receive compiled profiles
and never check one again.

Semantics follow Koordinator (``apis/config/v1alpha1/cluster_colocation_profile_types.go``) with our deliberate
deviations (docs/admission-rules-mutating.md, "Where we differ from Koordinator on purpose"): ``probability: 150``
is refused, never clamped.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.fielderrors import invalid
from webhook.core.names import (
    LABEL_MAX,
    dns1123_subdomain,
    label_value,
    max_len_error,
    qualified_name,
    regex_error,
)
from webhook.core.qos import KOORD_QOS_CLASSES
from webhook.core.resources import as_object
from webhook.core.selectors import CompiledSelector, SelectorError, compile_selector

SKIP_UPDATE_RESOURCES = "config.koordinator.sh/skip-update-resources"
_PERCENT = re.compile(r"^([0-9]+)%$")
# A profile patch may not rename or move the pod: the draw and the apiserver depend on them.
IDENTITY_FIELDS = ("name", "generateName", "namespace")


class ProfileError(ValueError):
    """A profile field that makes the profile unusable (it then never matches)."""


def parse_probability(value: Any) -> int:
    """Percent (0..100) from ``probability``: unset = 100, an integer, or "NN%". Anything else, 150 included, is a
    bad value: the profile is refused, as our CRD refuses it, never clamped to 100 (Koordinator applies it)."""
    if value is None:
        return 100
    if isinstance(value, int) and not isinstance(value, bool):
        percent = value
    elif isinstance(value, str):
        if not _PERCENT.match(value):  # upstream's IsValidPercent
            raise ProfileError(invalid("spec.probability", value, regex_error(
                "a valid percent string must be a numeric string followed by an ending '%'", "[0-9]+%", "1%", "93%")))
        percent = int(value[:-1])
    else:  # the apps validation's text for an IntOrString that is neither; the value as JSON shows it (true, 0.5)
        raise ProfileError(f"spec.probability: Invalid value: {json.dumps(value)}: must be an integer or percentage "
                           "(e.g '5%')")
    if not 0 <= percent <= 100:
        raise ProfileError(invalid("spec.probability", value, "must be between 0 and 100, inclusive"))
    return percent


def _check(path: str, value: Any, errors: list[str]) -> None:
    """The first of apimachinery's messages about ``value``, as the apiserver would word it for ``path``."""
    if errors:
        raise ProfileError(invalid(path, value, errors[0]))


def _check_labels(path: str, labels: Mapping[str, Any]) -> None:
    """Label keys and values the apiserver would refuse on the pod (``ValidateLabels``); None deletes (a patch)."""
    for key, value in labels.items():
        _check(f"{path}[{key}]", key, qualified_name(key))
        if isinstance(value, str):
            _check(f"{path}[{key}]", value, label_value(value))


def _check_annotation_keys(path: str, keys: Iterable[str]) -> None:
    """``ValidateAnnotations``: each key, lower-cased, is a qualified name."""
    for key in keys:
        _check(f"{path}[{key}]", key, qualified_name(key.lower()))


def _check_suffixes(path: str, suffixes: Mapping[str, str]) -> None:
    """A suffix appended to any valid value must leave a valid one: its own characters and end decide that."""
    for key, suffix in suffixes.items():
        if len(suffix.encode()) >= LABEL_MAX:  # appended to a value of one character at least
            raise ProfileError(invalid(f"{path}[{key}]", suffix, max_len_error(LABEL_MAX)))
        if suffix:
            _check(f"{path}[{key}]", suffix, label_value("0" + suffix))


def _check_patch(patch: dict[str, Any]) -> None:
    """What the patch writes where the apiserver checks names: labels, annotation keys, the scheduler and class."""
    meta = patch.get("metadata")
    if isinstance(meta, dict):
        if isinstance(meta.get("labels"), dict):
            _check_labels("spec.patch.metadata.labels", {k: v for k, v in meta["labels"].items() if k != "$patch"})
        if isinstance(meta.get("annotations"), dict):
            _check_annotation_keys("spec.patch.metadata.annotations",
                                   [k for k in meta["annotations"] if k != "$patch"])
    pspec = patch.get("spec")
    if isinstance(pspec, dict):
        for fname in ("schedulerName", "priorityClassName"):
            v = pspec.get(fname)
            if isinstance(v, str) and v:
                _check(f"spec.patch.spec.{fname}", v, dns1123_subdomain(v))


def _string_map(spec: Mapping[str, Any], name: str) -> dict[str, str]:
    value = spec.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ProfileError(f"{name}: must be a map of strings")
    return dict(value)


@dataclass(slots=True)
class Profile:
    """A ClusterColocationProfile checked once: what it selects and what it sets."""

    name: str
    obj: dict[str, Any]
    error: str | None = None                      # set: the profile never matches
    ns_selector: CompiledSelector | None = None
    selector: CompiledSelector | None = None
    percent: int = 100
    skip_update_resources: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    label_keys_mapping: dict[str, str] = field(default_factory=dict)
    annotation_keys_mapping: dict[str, str] = field(default_factory=dict)
    label_suffixes: dict[str, str] = field(default_factory=dict)
    scheduler_name: str = ""
    qos_class: str = ""
    priority_class_name: str = ""
    koordinator_priority: int | None = None
    patch: dict[str, Any] | None = None

    @property
    def constant(self) -> bool:
        """Only sets fixed values (no mapping, suffix or patch): applying it twice equals once."""
        return not (self.label_keys_mapping or self.annotation_keys_mapping or self.label_suffixes
                    or self.patch is not None)

    @property
    def spec(self) -> dict[str, Any]:
        spec = self.obj.get("spec")
        return spec if isinstance(spec, dict) else {}


def compile_profile(obj: dict[str, Any]) -> Profile:
    """Check every field once; a bad one leaves ``error`` set and the profile never matches."""
    meta = as_object(obj.get("metadata"))
    p = Profile(name=str(meta.get("name") or ""), obj=obj)
    p.skip_update_resources = SKIP_UPDATE_RESOURCES in (meta.get("annotations") or {})
    spec = obj.get("spec", {})
    try:
        if not isinstance(spec, dict):
            raise ProfileError(f"spec: must be an object, got {type(spec).__name__}")
        try:
            p.ns_selector = compile_selector(spec.get("namespaceSelector"), "namespaceSelector")
            p.selector = compile_selector(spec.get("selector"), "selector")
        except SelectorError as bad:  # its own name: a compiled function types each name once
            raise ProfileError(str(bad)) from None
        p.percent = parse_probability(spec.get("probability"))
        p.labels = _string_map(spec, "labels")
        p.annotations = _string_map(spec, "annotations")
        p.label_keys_mapping = _string_map(spec, "labelKeysMapping")
        p.annotation_keys_mapping = _string_map(spec, "annotationKeysMapping")
        p.label_suffixes = _string_map(spec, "labelSuffixes")
        # What the profile writes must be what the apiserver accepts on a pod: refused here, once, naming the
        # field, rather than every pod it matches failing after the webhooks.
        _check_labels("spec.labels", p.labels)
        _check_annotation_keys("spec.annotations", p.annotations)
        for old_key, new_key in p.label_keys_mapping.items():
            _check(f"spec.labelKeysMapping[{old_key}]", new_key, qualified_name(new_key))
        for old_key, new_key in p.annotation_keys_mapping.items():
            _check(f"spec.annotationKeysMapping[{old_key}]", new_key, qualified_name(new_key.lower()))
        _check_suffixes("spec.labelSuffixes", p.label_suffixes)
        for fname in ("schedulerName", "qosClass", "priorityClassName"):
            v = spec.get(fname)
            if v is not None and not isinstance(v, str):
                raise ProfileError(f"{fname}: must be a string, got {v!r}")
        p.scheduler_name = spec.get("schedulerName") or ""
        for fname in ("schedulerName", "priorityClassName"):
            if spec.get(fname):
                _check(f"spec.{fname}", spec[fname], dns1123_subdomain(spec[fname]))
        p.qos_class = spec.get("qosClass") or ""
        if p.qos_class and p.qos_class not in KOORD_QOS_CLASSES:
            raise ProfileError(f"qosClass: Unsupported value: {p.qos_class!r}: supported values: "
                               + ", ".join(f'"{q}"' for q in KOORD_QOS_CLASSES))
        p.priority_class_name = spec.get("priorityClassName") or ""
        kp = spec.get("koordinatorPriority")
        if kp is not None and (not isinstance(kp, int) or isinstance(kp, bool) or not -2**31 <= kp < 2**31):
            raise ProfileError(f"koordinatorPriority: must be a 32-bit integer, got {kp!r}")
        if kp is not None:  # written as the label koordinator.sh/priority: a negative number is no label value
            _check("spec.koordinatorPriority", kp, label_value(str(kp)))
        p.koordinator_priority = kp
        patch = spec.get("patch")
        if patch is not None:
            if not isinstance(patch, dict):
                raise ProfileError(f"patch: must be an object (a strategic merge patch), got {type(patch).__name__}")
            patch = copy.deepcopy(patch)   # the compiled patch is not the object's: a merge never shares it
            pmeta = patch.get("metadata")
            if isinstance(pmeta, dict):
                for f in IDENTITY_FIELDS:
                    if f in pmeta:
                        raise ProfileError(f"patch.metadata.{f}: a profile may not change the pod's {f}")
            _check_patch(patch)
            p.patch = patch or None
    except ProfileError as exc:
        p.error = str(exc)
    return p
