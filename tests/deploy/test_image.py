"""One image setting: the image set once, in manifests/components/image, is the image of every container of every
path we ship, as the docs apply it (docs/install.md, "The image").

The setting is changed in a copy of manifests/ as an operator would (the `newName`/`newTag` of the one `images:`
entry, what `kustomize edit set image` writes there), then each path is rendered with ``kubectl kustomize``: the
default install, each overlay, each component on its own and on top of the default install in an overlay of your
own, and Koordinator's objects. Every container and initContainer must run exactly the image that was set.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli import webhook as webhook_cli

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
KUBECTL = shutil.which("kubectl")
SETTING = Path("components") / "image" / "kustomization.yaml"   # relative to manifests/: the one place
WANT = "registry.example/colocation-webhook:9.9.9"
# The workloads that run the project's image: every one must be seen on some path, so a path that stops rendering
# one cannot pass by rendering nothing.
WORKLOADS = {"Deployment colocation-webhook", "DaemonSet colocation-agent", "Job colocation-webhook-certs",
             "CronJob colocation-audit"}

needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (Debian package kubernetes-client)")

Obj = dict[str, Any]


def set_image(manifests: Path, image: str) -> None:
    """What an operator does: the one `images:` entry's newName and newTag (as `kustomize edit set image`)."""
    name, tag = image.rsplit(":", 1)
    path = manifests / SETTING
    text = path.read_text()
    text, names = re.subn(r"(?m)^(\s+newName:\s*)\S+$", rf"\g<1>{name}", text)
    text, tags = re.subn(r"(?m)^(\s+newTag:\s*)\S+$", rf"\g<1>{tag}", text)
    assert (names, tags) == (1, 1), f"{path}: one images entry with newName and newTag"
    path.write_text(text)


def render(path: Path) -> list[Obj]:
    assert KUBECTL is not None
    out = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{path}: {out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _pod_specs(obj: Obj) -> Iterator[Obj]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        yield spec
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
    if isinstance(template, dict):
        yield template.get("spec") or {}


def containers(objs: list[Obj]) -> Iterator[tuple[str, str, str]]:
    """(workload, container, image) of every container and initContainer."""
    for obj in objs:
        ref = f"{obj['kind']} {obj['metadata']['name']}"
        for spec in _pod_specs(obj):
            for field in ("initContainers", "containers", "ephemeralContainers"):
                for c in spec.get(field) or []:
                    yield ref, f"{field}/{c['name']}", c.get("image", "")


def off_image(objs: list[Obj], want: str) -> list[str]:
    return [f"{ref} {name}: {image}" for ref, name, image in containers(objs) if image != want]


def _overlay(tmp: Path, name: str, resources: list[str], components: list[str]) -> Path:
    """An overlay of an operator's own, beside the copy of manifests/."""
    folder = tmp / "overlays-of-yours" / name
    folder.mkdir(parents=True)
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": resources, "components": components}))
    return folder


def shipped_paths(manifests: Path) -> dict[str, Path]:
    """Every path the docs apply: the install, the overlays, Koordinator's objects, each component on its own
    (`kubectl apply -k manifests/components/NAME`) and on top of the install and of each overlay (`components:` of an
    overlay of your own)."""
    paths = {"manifests": manifests, "manifests/koordinator": manifests / "koordinator"}
    installs = {"manifests": manifests}
    for overlay in sorted((manifests / "overlays").iterdir()):
        paths[f"manifests/overlays/{overlay.name}"] = installs[f"manifests/overlays/{overlay.name}"] = overlay
    for component in sorted((manifests / "components").iterdir()):
        if not (component / "kustomization.yaml").is_file():
            continue
        paths[f"manifests/components/{component.name}"] = component
        for install_name, install in installs.items():
            paths[f"{install_name} + components/{component.name}"] = _overlay(
                manifests.parent, f"{install_name.replace('/', '-')}-{component.name}",
                [str(Path("..", "..", install.relative_to(manifests.parent)))],
                [str(Path("..", "..", component.relative_to(manifests.parent)))])
    return paths


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Obj]]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (Debian package kubernetes-client)")
    manifests = tmp_path_factory.mktemp("image") / "manifests"
    shutil.copytree(MANIFESTS, manifests, ignore=shutil.ignore_patterns("certs"))
    set_image(manifests, WANT)
    # the documented step before the generated-certs overlay renders
    assert webhook_cli.main(["certs", "generate", "--service", "colocation-webhook", "--namespace",
                             "colocation-system", "--out", str(manifests / "overlays" / "generated-certs" / "certs")]) == 0
    return {name: render(path) for name, path in shipped_paths(manifests).items()}


@needs_kubectl
def test_every_container_of_every_path_runs_the_image_set_once(rendered: dict[str, list[Obj]]) -> None:
    off = {name: found for name, objs in rendered.items() if (found := off_image(objs, WANT))}
    assert off == {}, f"set in manifests/{SETTING}, not reached"


@needs_kubectl
def test_every_workload_of_the_image_is_rendered_somewhere(rendered: dict[str, list[Obj]]) -> None:
    seen = {ref for objs in rendered.values() for ref, _, _ in containers(objs)}
    assert seen == WORKLOADS
    assert {"manifests/components/audit", "manifests + components/audit",
            "manifests/overlays/cert-manager + components/audit"} <= set(rendered)


def test_the_image_is_named_in_one_place_only() -> None:
    """No other kustomization names the image: a second `images:` entry is one an operator forgets to change."""
    named = [str(p.relative_to(MANIFESTS)) for p in sorted(MANIFESTS.rglob("kustomization.yaml"))
             if any(i.get("name") == "colocation-webhook" for i in yaml.safe_load(p.read_text()).get("images") or [])]
    assert named == [str(SETTING)]
    workloads = [str(p.relative_to(MANIFESTS)) for p in sorted(MANIFESTS.rglob("*.yaml"))
                 if re.search(r"(?m)^\s+image:\s*colocation-webhook\S", p.read_text())]
    assert workloads == [], "a workload names a tag of its own: the one setting sets it"


def test_the_check_finds_a_container_left_behind() -> None:
    """The check is not a no-op: a CronJob's container or a Job's initContainer on another image is named."""
    cron = {"kind": "CronJob", "metadata": {"name": "colocation-audit"}, "spec": {"jobTemplate": {"spec": {
        "template": {"spec": {"containers": [{"name": "audit", "image": "colocation-webhook:0.1.0"}]}}}}}}
    job = {"kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "initContainers": [{"name": "init", "image": "busybox"}], "containers": [{"name": "c", "image": WANT}]}}}}
    assert off_image([cron, job], WANT) == ["CronJob colocation-audit containers/audit: colocation-webhook:0.1.0",
                                            "Job j initContainers/init: busybox"]


@needs_kubectl
def test_an_image_set_in_a_second_place_is_not_needed(tmp_path: Path) -> None:
    """The audit component inside an overlay of your own that sets no image still runs the image set once (the
    CronJob once kept the 0.1.0 of its own `images:`)."""
    manifests = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, manifests, ignore=shutil.ignore_patterns("certs"))
    set_image(manifests, "elsewhere.example/c:1.2.3")
    overlay = _overlay(tmp_path, "prod", ["../../manifests"], ["../../manifests/components/audit"])
    images = {image for _, _, image in containers(render(overlay))}
    assert images == {"elsewhere.example/c:1.2.3"}
