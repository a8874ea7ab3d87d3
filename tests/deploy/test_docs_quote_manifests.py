"""An object the docs quote from manifests/ is the manifest's (issue 41: docs/cluster-state.md's RBAC lacked
``limitranges`` and ``get``, which manifests/base/webhook-rbac.yaml grants). A quote is a document of a ```yaml block
in docs/ with the kind and name of a manifest object; it may leave out the labels and annotations, and write a role's
rules in any order and form, but grant what the manifest grants, no more and no less."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.M | re.S)
ROLES = {"ClusterRole", "Role"}

Obj = dict[str, Any]


def _objects(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict) and "kind" in d
            and isinstance(d.get("metadata"), dict)]


def _key(obj: Obj) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"].get("name", "")


def manifests() -> dict[tuple[str, str, str], list[tuple[str, Obj]]]:
    found: dict[tuple[str, str, str], list[tuple[str, Obj]]] = {}
    for path in sorted((ROOT / "manifests").rglob("*.yaml")):
        for obj in _objects(path.read_text()):
            found.setdefault(_key(obj), []).append((str(path.relative_to(ROOT)), obj))
    return found


def quotes() -> list[tuple[str, Obj]]:
    return [(f"{md.relative_to(ROOT)}:{md.read_text()[:m.start()].count(chr(10)) + 1}", obj)
            for md in sorted((ROOT / "docs").glob("*.md")) for m in BLOCK.finditer(md.read_text())
            for obj in _objects(m.group(1))]


def grants(role: Obj) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {(group, resource, verb, tuple(sorted(rule.get("resourceNames") or ())))
            for rule in role.get("rules") or [] for group in rule["apiGroups"] for resource in rule["resources"]
            for verb in rule["verbs"]}


def differences(quote: Obj, manifest: Obj) -> list[str]:
    """What ``quote`` says that ``manifest`` does not (labels and annotations left out)."""
    if quote["kind"] in ROLES:
        said, granted = grants(quote), grants(manifest)
        return ([f"grants {g} the manifest does not" for g in sorted(said - granted)]
                + [f"leaves out {g}" for g in sorted(granted - said)])
    meta = {k: v for k, v in manifest["metadata"].items() if k not in ("labels", "annotations")}
    return [] if quote == {**manifest, "metadata": {**meta, **quote["metadata"]}} else ["another object"]


def test_docs_quote_manifests_as_they_are() -> None:
    by_key = manifests()
    checked, wrong = 0, []
    for where, quote in quotes():
        candidates = by_key.get(_key(quote))
        if not candidates:
            continue   # an example of the docs' own, no manifest's
        checked += 1
        found = [(path, differences(quote, obj)) for path, obj in candidates]
        if all(problems for _, problems in found):
            wrong += [f"{where}: {quote['kind']} {quote['metadata']['name']} ({path}): {'; '.join(problems)}"
                      for path, problems in found]
    assert checked >= 3, "the docs quote the webhook's ClusterRole, its Role and the example profile"
    assert wrong == []


def test_a_quote_that_leaves_out_a_grant_is_found() -> None:
    role = {"kind": "ClusterRole", "metadata": {"name": "r"},
            "rules": [{"apiGroups": [""], "resources": ["namespaces", "limitranges"], "verbs": ["get", "list"]}]}
    quote = {**role, "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]}
    assert differences(quote, role) == ["leaves out ('', 'limitranges', 'get', ())",
                                        "leaves out ('', 'limitranges', 'list', ())",
                                        "leaves out ('', 'namespaces', 'get', ())"]
    assert differences(role, role) == []
