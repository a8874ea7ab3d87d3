"""`audit --migrate`: the patch that moves an object off the legacy ack-slo-manager protocol.

The legacy protocol names a pod's QoS in the ``alibabacloud.com/qosClass`` annotation and its batch resources
``alibabacloud.com/reclaimed-cpu``/``reclaimed-memory``; Koordinator's uses the ``koordinator.sh/qosClass`` label
and ``kubernetes.io/batch-cpu``/``batch-memory`` (same units: milli-cores, bytes). For a workload the patch goes
to its pod template, where it lasts (a JSONPatch ready for ``kubectl patch --type=json``); a pod's resources
cannot be changed in place, so a pod without a controller is named with the patch to re-create it from, and a
pod with one points at its controller. Where both protocols name the same thing with different values (a
``reclaimed-cpu`` beside a ``batch-cpu``, a ``qosClass`` annotation beside a label that says otherwise), which one
is meant is the user's to say: that part is left as it is and named as a conflict, both values quoted. Pure:
plain dicts in, plain dicts out.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from webhook.audit.subjects import PLURALS, TEMPLATES
from webhook.core.qos import LEGACY_QOS_ANNOTATION, QOS_LABEL
from webhook.core.quantity import QuantityError, parse_quantity
from webhook.core.resources import LEGACY_BATCH, shown


@dataclass(slots=True, frozen=True)
class Migration:
    kind: str
    namespace: str
    name: str
    ops: list[dict[str, Any]]
    note: str = ""           # why the patch cannot be applied as it is (a pod), or "" for a workload
    conflicts: tuple[str, ...] = ()  # what the patch leaves as it is: the two protocols disagree there

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name, "patch": self.ops,
                "note": self.note, "conflicts": list(self.conflicts)}

    def command(self) -> str:
        """``kubectl patch`` with the patch, quoted for a POSIX shell."""
        patch = json.dumps(self.ops, separators=(",", ":"))
        return (f"kubectl patch {PLURALS.get(self.kind, self.kind.lower())} {self.name} -n {self.namespace} "
                f"--type=json -p {shlex.quote(patch)}")


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _same(a: Any, b: Any) -> bool:
    """Two quantities of one resource are the same amount ("1k" and 1000), or the same text where one does not
    parse."""
    try:
        return parse_quantity(a) == parse_quantity(b)
    except QuantityError:
        return shown(a) == shown(b)


def _renamed(values: Any, where: str, conflicts: list[str]) -> dict[str, Any] | None:
    """A ResourceList with the legacy names renamed (order kept), or None when it has none or when a legacy name
    and its Koordinator name hold different amounts: then the list stays as it is and ``conflicts`` says why."""
    if not isinstance(values, dict) or not any(k in LEGACY_BATCH for k in values):
        return None
    differ = [f'{old} "{shown(values[old])}" and {new} "{shown(values[new])}"'
              for old, new in LEGACY_BATCH.items()
              if old in values and new in values and not _same(values[old], values[new])]
    if differ:
        conflicts.append(f"{where}: {'; '.join(differ)} differ: left as it is, keep the one meant")
        return None
    # the same amount under both names: the Koordinator name stays as written, the legacy one goes
    return {str(LEGACY_BATCH.get(k, k)): v for k, v in values.items() if LEGACY_BATCH.get(k) not in values}


def template_ops(template: dict[str, Any], base: str, conflicts: list[str]) -> list[dict[str, Any]]:
    """The ops that move the pod (template) at JSON pointer ``base`` to Koordinator's protocol; what they leave
    as it is, because the two protocols disagree there, is added to ``conflicts``."""
    ops: list[dict[str, Any]] = []
    meta = template.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else None
    legacy_qos = annotations.get(LEGACY_QOS_ANNOTATION) if annotations else None
    label = labels.get(QOS_LABEL) if labels is not None else None
    if isinstance(legacy_qos, str) and legacy_qos and label is not None and label != legacy_qos:
        conflicts.append(f'annotation {LEGACY_QOS_ANNOTATION} "{legacy_qos}" and label {QOS_LABEL} "{label}" '
                         "differ: left as they are, keep the one meant")
    elif isinstance(legacy_qos, str) and legacy_qos:
        if labels is None:
            ops.append({"op": "add", "path": f"{base}/metadata/labels", "value": {QOS_LABEL: legacy_qos}})
        elif QOS_LABEL not in labels:
            ops.append({"op": "add", "path": f"{base}/metadata/labels/{_escape(QOS_LABEL)}", "value": legacy_qos})
        ops.append({"op": "remove", "path": f"{base}/metadata/annotations/{_escape(LEGACY_QOS_ANNOTATION)}"})
    spec = template.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or ()):
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            who = f'{"init container" if field == "initContainers" else "container"} "{c.get("name", "")}"'
            for kind in ("requests", "limits"):
                renamed = _renamed(res.get(kind), f"{who} {kind}", conflicts)
                if renamed is not None:
                    ops.append({"op": "replace", "path": f"{base}/spec/{field}/{i}/resources/{kind}", "value": renamed})
    return ops


def migration(obj: dict[str, Any], kind: str) -> Migration | None:
    """What moves ``obj`` to Koordinator's protocol, or None when it names nothing of the legacy one."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    conflicts: list[str] = []
    if kind == "Pod":
        ops = template_ops(obj, "", conflicts)
        if not ops and not conflicts:
            return None
        owner = next((r for r in meta.get("ownerReferences") or () if isinstance(r, dict) and r.get("controller")),
                     None)
        note = (f"made by {owner.get('kind')}/{owner.get('name')}: migrate that, then the pod is made again"
                if owner else "a pod's resources cannot change: re-create it with this patch applied")
        return Migration(kind, namespace, name, ops, note, tuple(conflicts))
    where = TEMPLATES.get(kind)
    template: Any = obj
    for key in where or ():
        template = template.get(key) if isinstance(template, dict) else None
    if where is None or not isinstance(template, dict):
        return None
    ops = template_ops(template, "/" + "/".join(where), conflicts)
    return Migration(kind, namespace, name, ops, conflicts=tuple(conflicts)) if ops or conflicts else None
