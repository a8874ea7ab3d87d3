"""The Helm chart (charts/colocation-webhook) next to the kustomize install it must equal (docs/helm.md).

Helm's own engine renders the chart here, through ``helm-python-sdk`` (the Helm v4 Go SDK bound with ctypes). That
package is one maintainer's alpha: it is a test extra only (pyproject.toml, ``[project.optional-dependencies]
test``), pinned in requirements-test.lock, and nothing the project runs or ships imports it: only this module, for
tests/deploy/test_chart.py and tests/e2e/test_real_apiserver_chart.py.

What it offers:

- ``render(values, upgrade=)``: the chart's objects, as ``helm install`` (or ``helm upgrade``) would send them.
- ``kustomize_setup(resources, components)``: the kustomize output of the same set-up, built from manifests/ in a
  throw-away overlay (``kubectl kustomize``).
- ``values_table(schema, defaults)``: the chart README's table of values, generated from values.schema.json.
- ``kubernetes_definitions(version)``: the strict Kubernetes schemas values.schema.json embeds, from
  kubernetes-validate.

``python -m harness.chart`` rewrites the generated parts (the README's table, the schema's definitions);
``python -m harness.chart --check`` exits 1 naming what is stale.
"""

from __future__ import annotations

import copy
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "colocation-webhook"
MANIFESTS = ROOT / "manifests"
README = CHART / "README.md"
SCHEMA = CHART / "values.schema.json"
RELEASE = "colocation-webhook"          # the release name docs/helm.md installs with
RELEASE_NAMESPACE = "default"           # where Helm keeps the release's records (docs/helm.md)
TABLE_START = "<!-- values table: generated from values.schema.json by `python -m harness.chart` -->"
TABLE_END = "<!-- end of the values table -->"
# The Kubernetes types values.schema.json takes whole, as the newest supported Kubernetes defines them (strict:
# an unknown field is refused), so a typo inside an affinity is refused too.
KUBERNETES_TYPES = ("io.k8s.api.core.v1.Affinity", "io.k8s.api.core.v1.Toleration",
                    "io.k8s.api.core.v1.TopologySpreadConstraint", "io.k8s.api.core.v1.PodSecurityContext",
                    "io.k8s.api.core.v1.SecurityContext", "io.k8s.api.core.v1.ResourceRequirements")
SCHEMA_KUBERNETES = "1.36.0"

Obj = dict[str, Any]


def _helm() -> Any:
    """helm_python, imported here only: a missing test extra fails the test that needs it, loudly."""
    import helm_python
    return helm_python


def docs(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(values: Obj | None = None, *, upgrade: bool = False, name: str = RELEASE) -> list[Obj]:
    """The chart's objects with these values, as Helm's engine renders them for an install (or an upgrade)."""
    helm = _helm()
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema(values or {})
        out: dict[str, str] = chart.render(values or {}, name=name, namespace=RELEASE_NAMESPACE,
                                           is_install=not upgrade, is_upgrade=upgrade)
    return [obj for path in sorted(out) if path.endswith((".yaml", ".yml")) for obj in docs(out[path])]


def notes(values: Obj | None = None) -> str:
    helm = _helm()
    with helm.Chart.load(str(CHART)) as chart:
        out: dict[str, str] = chart.render(values or {}, name=RELEASE, namespace=RELEASE_NAMESPACE, is_install=True)
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


def kubectl() -> str:
    found = shutil.which("kubectl")
    assert found is not None, "kubectl is not installed (Debian package kubernetes-client)"
    return found


def kustomize(path: Path) -> list[Obj]:
    out = subprocess.run([kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return docs(out.stdout)


def kustomize_setup(resources: list[str], components: tuple[str, ...] | list[str] = (),
                    edit: dict[str, str] | None = None) -> list[Obj]:
    """``kubectl kustomize`` of an overlay of manifests/ with these resources and components (paths relative to
    manifests/), as a user's own overlay would list them; ``edit`` writes files of the copy first (relative path:
    text), as the documented steps do (the certificates of overlays/generated-certs)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy_ = Path(tmp) / "manifests"
        shutil.copytree(MANIFESTS, copy_, ignore=shutil.ignore_patterns("certs"))
        for rel, text in (edit or {}).items():
            (copy_ / rel).parent.mkdir(parents=True, exist_ok=True)
            (copy_ / rel).write_text(text)
        overlay = Path(tmp) / "setup"         # beside the copy: kustomize refuses an overlay inside its base
        overlay.mkdir()
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"../manifests/{r}" for r in resources],
            "components": [f"../manifests/{c}" for c in components]}))
        return kustomize(overlay)


def key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{obj['apiVersion']} {obj['kind']} {meta.get('namespace', '')}/{meta['name']}"


def by_key(objs: list[Obj]) -> dict[str, Obj]:
    out: dict[str, Obj] = {}
    for obj in objs:
        assert key(obj) not in out, f"{key(obj)} twice"
        out[key(obj)] = obj
    return out


# -- the generated parts ----------------------------------------------------------------------------------------
def kubernetes_definitions(version: str = SCHEMA_KUBERNETES) -> Obj:
    """The strict schemas of KUBERNETES_TYPES and every type they reach, from kubernetes-validate's copy of
    Kubernetes' OpenAPI, without their descriptions (the size of a chart matters: Helm stores it in a Secret)."""
    kubernetes_validate = importlib.import_module("kubernetes_validate")    # untyped: no stubs
    folder = Path(str(kubernetes_validate.__file__)).parent / "kubernetes-json-schema" / f"v{version}-local-strict"
    defs: Obj = json.loads((folder / "_definitions.json").read_text())["$defs"]
    out: Obj = {}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            result: Obj = {}
            for k, v in node.items():
                if k == "description":
                    continue
                if k == "$ref":
                    name = v.rsplit("/", 1)[-1]
                    take(name)
                    result[k] = f"#/definitions/{name}"
                elif k == "properties":      # property names, any of which may be called "description"
                    result[k] = {p: walk(s) for p, s in v.items()}
                else:
                    result[k] = walk(v)
            return result
        if isinstance(node, list):
            return [walk(x) for x in node]
        return node

    def take(name: str) -> None:
        if name not in out:
            out[name] = {}
            out[name] = walk(defs[name])

    for name in KUBERNETES_TYPES:
        take(name)
    return dict(sorted(out.items()))


def _type(node: Obj) -> str:
    if "$ref" in node:
        return str(node["$ref"]).rsplit(".", 1)[-1]
    kind = node.get("type", "")
    if kind == "array":
        return f"list of {_type(node['items'])}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return "map of string"
    if "enum" in node:
        return " \\| ".join(f"`{e}`" for e in node["enum"])
    return str(kind)


def values_table(schema: Obj, defaults: Obj) -> str:
    """One row per value a user sets (the leaves of the schema's own objects), with its type, default and
    description."""
    rows = ["| value | type | default | description |", "|---|---|---|---|"]

    def leaves(node: Obj, where: str, default: Any) -> None:
        props = node.get("properties")
        if node.get("type") == "object" and props:
            for name, sub in props.items():
                leaves(sub, f"{where}.{name}" if where else name, (default or {}).get(name))
            return
        if node.get("type") == "object" and props == {}:
            return                   # global: Helm's, not ours
        shown = json.dumps(default, separators=(",", ":")) if default not in ("", None) else '`""`'
        if default not in ("", None):
            shown = f"`{shown}`" if len(shown) <= 60 else "see values.yaml"
        description = node.get("description", "").replace("|", "\\|")
        rows.append(f"| `{where}` | {_type(node)} | {shown} | {description} |")

    leaves(schema, "", defaults)
    return "\n".join(rows) + "\n"


def generated_schema() -> str:
    schema = json.loads(SCHEMA.read_text())
    schema["definitions"] = kubernetes_definitions()
    return json.dumps(schema, indent=2) + "\n"


def generated_readme() -> str:
    text = README.read_text()
    before, rest = text.split(TABLE_START + "\n", 1)
    _, after = rest.split(TABLE_END, 1)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    table = values_table(json.loads(SCHEMA.read_text()), defaults)
    return f"{before}{TABLE_START}\n{table}{TABLE_END}{after}"


def main(argv: list[str]) -> int:
    check = argv == ["--check"]
    if argv and not check:
        print("usage: python -m harness.chart [--check]", file=sys.stderr)
        return 2
    stale = []
    for path, make in ((SCHEMA, generated_schema), (README, generated_readme)):
        fresh = make()
        if path.read_text() != fresh:
            stale.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(fresh)
    if check and stale:
        print(f"stale (run python -m harness.chart): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


def without(obj: Obj, *paths: tuple[str, ...]) -> Obj:
    """A deep copy of obj without the fields at these paths (gone when they empty their parent)."""
    out = copy.deepcopy(obj)
    for path in paths:
        node = out
        parents = []
        for part in path[:-1]:
            if not isinstance(node, dict) or part not in node:
                break
            parents.append((node, part))
            node = node[part]
        else:
            if isinstance(node, dict):
                node.pop(path[-1], None)
            for parent, part in reversed(parents):
                if parent[part] == {}:
                    del parent[part]
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
