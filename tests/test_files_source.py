"""The files source: manifests like `kubectl apply` takes them, errors with path and line, reload."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from webhook.cluster.files import FilesSource, StateFileError, load_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

PC = """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: {name}}}
value: {value}
"""


def _state(folder: Path) -> tuple[ClusterState, FilesSource]:
    state = ClusterState(WEBHOOK_KINDS)
    src = FilesSource(folder, state)
    src.load()
    return state, src


def test_multi_document_yaml_json_and_lists(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(PC.format(name="a", value=1) + "---\n" + PC.format(name="b", value=2)
                                     + "---\n# only a comment\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ns.json").write_text(
        '{"apiVersion": "v1", "kind": "NamespaceList", "items": ['
        '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n1", "labels": {"team": "x"}}}]}')
    (tmp_path / "deploy.yaml").write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: ignored}\n")
    (tmp_path / "notes.txt").write_text("not a manifest")
    state, _ = _state(tmp_path)
    assert state.ready
    assert {p["metadata"]["name"] for p in state.objects("PriorityClass")} == {"a", "b"}
    assert state.namespace_labels("n1") == {"team": "x", "kubernetes.io/metadata.name": "n1"}
    assert state.namespace_labels("missing") is None


@pytest.mark.parametrize("text,needle", [
    ("kind: PriorityClass\nmetadata: {name: x\n", ":3: invalid YAML: did not find expected ',' or '}' "
     "(while parsing a flow mapping at line 2)"),
    ("kind: Other\nmetadata: {name: a}\n---\n- just\n- a list\n", ":4: a manifest must be an object"),
    ("metadata: {name: x}\n", ":1: manifest has no kind"),
    ("apiVersion: v1\nkind: Namespace\nmetadata: {}\n", ":1: Namespace has no metadata.name"),
])
def test_errors_name_the_file_and_line(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "f.yaml").write_text(text)
    with pytest.raises(StateFileError) as exc:
        load_folder(tmp_path)
    assert str(exc.value).startswith(str(tmp_path / "f.yaml"))
    assert needle in str(exc.value)


def test_broken_json_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text('{\n"kind": "Namespace",\n"metadata": {\n}}}')
    with pytest.raises(StateFileError, match=r"f\.json:4: invalid JSON"):
        load_folder(tmp_path)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(StateFileError, match="does not exist"):
        load_folder(tmp_path / "nope")


def _wait(cond, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_reload_on_change_keeps_last_good_state_on_error(tmp_path: Path) -> None:
    f = tmp_path / "pcs.yaml"
    f.write_text(PC.format(name="a", value=1))
    state, src = _state(tmp_path)
    src.start()
    try:
        f.write_text(PC.format(name="a", value=1) + "---\n" + PC.format(name="b", value=2))
        assert _wait(lambda: state.priority_class("b") is not None)
        f.write_text("kind: PriorityClass\nmetadata: {name: broken\n")
        assert _wait(lambda: src.last_error is not None)
        assert "pcs.yaml:" in (src.last_error or "")
        assert state.priority_class("b") is not None and state.ready
        f.write_text(PC.format(name="c", value=3))
        assert _wait(lambda: state.priority_class("c") is not None)
        assert state.priority_class("b") is None and src.last_error is None
    finally:
        src.stop()
