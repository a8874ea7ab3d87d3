"""The ``files`` source: a folder of YAML/JSON manifests, the same files one would ``kubectl apply``.

Loading is all-or-nothing: a file that does not parse is reported with its path and line and the
previous state stays in place. ``FilesSource.watch`` reloads on change (watchfiles).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook.cluster.state import KINDS, ClusterState

log = logging.getLogger(__name__)

SUFFIXES = (".yaml", ".yml", ".json")


class StateFileError(ValueError):
    """A manifest that cannot be loaded; the message starts with ``path:line:``."""


def _yaml_error(path: Path, exc: yaml.YAMLError) -> StateFileError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else 1
    problem = getattr(exc, "problem", None) or str(exc)
    context, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and cmark is not None and cmark.line + 1 != line:
        problem += f" ({context} at line {cmark.line + 1})"
    return StateFileError(f"{path}:{line}: invalid YAML: {problem}")


def _documents(path: Path) -> Iterable[tuple[int, Any]]:
    """(line, document) for every document in the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StateFileError(f"{path}:1: cannot read: {exc}") from exc
    if path.suffix == ".json":
        try:
            yield 1, orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise StateFileError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
        return
    loader_cls = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_cls(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            yield node.start_mark.line + 1, loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from exc
    finally:
        loader.dispose()


def _flatten(path: Path, line: int, doc: Any) -> Iterable[dict[str, Any]]:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise StateFileError(f"{path}:{line}: a manifest must be an object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from _flatten(path, line, item)
        return
    if not isinstance(kind, str) or not kind:
        raise StateFileError(f"{path}:{line}: manifest has no kind")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise StateFileError(f"{path}:{line}: {kind} has no metadata.name")
    yield doc


def load_folder(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every known object under ``folder`` by kind; raises StateFileError naming path and line."""
    if not folder.is_dir():
        raise StateFileError(f"{folder}: cluster state folder does not exist or is not a folder")
    by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    for path in sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
        for line, doc in _documents(path):
            for obj in _flatten(path, line, doc):
                kind = obj["kind"]
                if kind not in KINDS:
                    continue  # other manifests (Deployments, ...) may share the folder
                meta = obj["metadata"]
                if KINDS[kind].namespaced and not meta.get("namespace"):
                    meta["namespace"] = "default"
                by_kind[kind].append(obj)
    return by_kind


class FilesSource:
    """Keeps a ClusterState equal to a folder of manifests."""

    def __init__(self, folder: Path, state: ClusterState) -> None:
        self.folder = Path(folder)
        self.state = state
        self.last_error: str | None = None
        self.reloads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def load(self) -> None:
        """Load once; raises StateFileError (used at start-up, where it is fatal)."""
        self.state.replace_all(load_folder(self.folder))
        self.last_error = None
        self.reloads += 1

    def reload(self) -> bool:
        """Reload after a change; on error keep the last good state and report it."""
        try:
            self.load()
        except StateFileError as exc:
            self.last_error = str(exc)
            log.error("cluster state reload failed, keeping the last good state: %s", exc)
            return False
        log.info("cluster state reloaded from %s: %s", self.folder, self.state.counts())
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="files-source", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        from watchfiles import watch

        for _changes in watch(self.folder, stop_event=self._stop, debounce=200, rust_timeout=500,
                              yield_on_timeout=False, raise_interrupt=False):
            self.reload()
