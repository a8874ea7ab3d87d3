"""The ``files`` source: a folder of YAML/JSON manifests, the same files one would ``kubectl apply``.

Loading is all-or-nothing: a folder or file that cannot be read, a file that does not parse, an object with a field
its kind does not have (kubectl's strict field validation, ``webhook/cluster/strict.py``), one the apiserver would
refuse (the one judgement of what enters the state, ``webhook/cluster/intake.py``: a PriorityClass ``value:
"high"``; two ``globalDefault`` classes, two objects of one name) or a kind that can only be a mistake
(``kind_verdict``) is reported with its path and line and the previous state stays in place: never an empty or
partial state. A ClusterColocationProfile the apiserver stores but no rule can apply is held marked, as the live
source holds it, and named once with its path and line. What is no object of the state (another kind,
another tool's file: kustomize's, an AdmissionConfiguration) is skipped and named in one note per load. Only what is
read of each object is kept (``kept``, as the live source keeps it). ``FilesSource.watch`` reloads on change
(watchfiles).
"""

from __future__ import annotations

import logging
import os
import pickle
import stat
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import yaml

from webhook.cluster.intake import judge
from webhook.cluster.state import KINDS, WEBHOOK_KINDS, ClusterState, Key, kept, object_key
from webhook.cluster.strict import describe_unknown, kind_verdict, prepare, unknown_fields
from webhook.cluster.validation import already_exists, second_default
from webhook.cluster.yaml_input import compose_all, documents, yaml_problem
from webhook.heap import collector_paused, malloc_trim

log = logging.getLogger(__name__)

SUFFIXES = (".yaml", ".yml", ".json")
_REWATCH_SECONDS = 5.0
KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml")  # the names kustomize reads in a folder


class StateFileError(ValueError):
    """A manifest that cannot be loaded; the message starts with ``path:line:``."""


def found(doc: object) -> str:
    """What a YAML document is, in a user's words, for an error that says what was expected instead."""
    if isinstance(doc, list):
        return f"a list of {len(doc)} item{'s' if len(doc) != 1 else ''}"
    if isinstance(doc, str):
        return f"a string ({doc[:40]!r}{'...' if len(doc) > 40 else ''})"
    if isinstance(doc, bool):
        return "a boolean"
    if isinstance(doc, int | float):
        return "a number"
    return "nothing" if doc is None else type(doc).__name__


def utf8(data: bytes) -> str:
    """``data`` as text; ValueError ``not UTF-8 text (byte N)`` for a file in another encoding or none."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte {exc.start})") from None


def _yaml_error(path: Path, exc: yaml.YAMLError) -> StateFileError:
    return StateFileError(yaml_problem(path, exc))


# Where an object is: its file, its document's line and YAML node (None for JSON), and the path from the
# document to the object (``("items", 3)`` in a List). Only an error turns this into a line number.
Origin = tuple[Path, int, Any, tuple[str | int, ...]]


def _documents(path: Path) -> Iterable[tuple[int, Any, Any]]:
    """(line, document, YAML node or None) for every document in the file."""
    try:
        text = utf8(path.read_bytes())
    except OSError as exc:
        raise StateFileError(f"{path}:1: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise StateFileError(f"{path}:1: {exc}") from exc
    if path.suffix == ".json":
        try:
            yield 1, orjson.loads(text), None
        except orjson.JSONDecodeError as exc:
            raise StateFileError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
        return
    try:
        for node, doc in documents(text):  # aliases bounded as kube-apiserver bounds them (yaml_input)
            yield node.start_mark.line + 1, doc, node
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from exc


def child_node(node: Any, part: str | int) -> tuple[int, Any] | None:
    """(line, node) of what is under a mapping key (the key's line) or a sequence index, or None."""
    if isinstance(node, yaml.MappingNode) and isinstance(part, str):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == part:
                return key.start_mark.line + 1, value
    elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        return node.value[part].start_mark.line + 1, node.value[part]
    return None


def _node_of(path: Path, line: int) -> Any:
    """The YAML node of the document starting at ``line`` of ``path``, composed again (orjson keeps no positions,
    and a YAML document's nodes are not kept past its load); None if the file no longer reads."""
    try:
        text = path.read_text(encoding="utf-8")
        for node in compose_all(text):
            # JSON is YAML, of one document: composed only to point at a field
            if path.suffix == ".json" or node.start_mark.line + 1 == line:
                return node
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        pass
    return None


def _line_of(origin: Origin, field_path: tuple[str | int, ...] = ()) -> int:
    """The line of the field at ``field_path`` in the object (or of the nearest part of the path found)."""
    path, line, node, prefix = origin
    if node is None:
        node = _node_of(path, line)
    return line_at(node, (*prefix, *field_path), line)


def line_at(node: Any, field_path: tuple[str | int, ...], line: int = 1) -> int:
    """The line of the field at ``field_path`` under the YAML ``node`` (``line``: the node's own), or of the
    nearest part of the path found."""
    for part in field_path:
        found = child_node(node, part)
        if found is None:
            break
        line, node = found
    return line


def _flatten(origin: Origin, doc: Any) -> Iterable[tuple[dict[str, Any], Origin]]:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise StateFileError(f"{origin[0]}:{_line_of(origin)}: a manifest must be an object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        path, line, node, prefix = origin
        for i, item in enumerate(doc["items"]):
            yield from _flatten((path, line, node, (*prefix, "items", i)), item)
        return
    yield doc, origin


def _describe(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    kind = obj["kind"]
    return f"{kind} {meta['namespace']}/{meta['name']}" if KINDS[kind].namespaced else f"{kind} {meta['name']}"


def _no_object(doc: dict[str, Any]) -> bool:
    """A mapping with none of an object's fields (a Grafana dashboard, a kustomization without a header)."""
    return not any(k in doc for k in ("apiVersion", "kind", "metadata"))


def _read(obj: dict[str, Any], origin: Origin, read: tuple[str, ...]) -> bool:
    """Whether ``obj`` is one the state reads (else it is skipped); StateFileError when it must be refused."""
    kind = obj.get("kind")
    if not isinstance(kind, str) or not kind:
        if _no_object(obj):
            return False
        raise _refused(origin, "manifest has no kind")
    try:
        if not kind_verdict(obj, read):
            return False
    except ValueError as exc:
        raise _refused(origin, str(exc)) from None
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise _refused(origin, f"{kind} has no metadata.name")
    return True


def _refused(origin: Origin, why: str) -> StateFileError:
    # the line only now: finding it can take parsing the file again (JSON)
    return StateFileError(f"{origin[0]}:{_line_of(origin)}: {why}")


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def manifest_files(folder: Path) -> list[Path]:
    """Every ``*.yaml``, ``*.yml`` and ``*.json`` file under ``folder``, sorted; StateFileError naming the first
    folder that cannot be listed, or entry that cannot be looked at (a symlink to nothing, no permission): a part of
    the folder left unread would be a state without its objects.

    Symlinks are followed, to files and folders (a folder reached twice is read once). Hidden entries (a name
    starting with ``.``: ``.git``, the ``..data`` link and ``..2024_...`` folder of a mounted ConfigMap, whose files
    the folder also holds as links) are not read."""
    try:
        info = folder.stat()
    except FileNotFoundError:
        raise StateFileError(f"{folder}: cluster state folder does not exist") from None
    except OSError as exc:
        raise StateFileError(f"{folder}: cannot read: {_why(exc)}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise StateFileError(f"{folder}: is a file, not a folder; the cluster state is a folder of manifests")
    found: list[Path] = []
    seen: set[str] = set()
    todo = [folder]
    while todo:
        here = todo.pop()
        real = os.path.realpath(here)
        if real in seen:
            continue
        seen.add(real)
        try:
            with os.scandir(here) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as exc:
            raise StateFileError(f"{here}: cannot list the folder: {_why(exc)}") from None
        for entry in listed:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            try:
                mode = os.stat(path).st_mode  # through a symlink
            except FileNotFoundError:
                if not entry.is_symlink():
                    continue  # removed since it was listed: the reload it causes reads the folder again
                raise StateFileError(f"{path}: cannot read: a symlink to {os.readlink(path)}, which does not "
                                     "exist") from None
            except OSError as exc:
                raise StateFileError(f"{path}: cannot read: {_why(exc)}") from None
            if stat.S_ISDIR(mode):
                todo.append(path)
            elif stat.S_ISREG(mode) and path.suffix in SUFFIXES:
                found.append(path)
    return sorted(found)


class _Loaded(NamedTuple):
    by_kind: dict[str, list[dict[str, Any]]]
    located: dict[Key, str]             # ``path:line`` of the ConfigMaps named ``locate``
    skipped: list[tuple[str, str]]      # (file, what) of each document skipped
    unusable: dict[str, dict[Key, str]]  # per kind, the objects held marked (``intake.judge``) and why
    unusable_at: list[str]              # each of them, where: ``path:line: kind name: why``


def _load(folder: Path, locate: str | None = None, read: Iterable[str] = tuple(KINDS)) -> _Loaded:
    """Every object of the ``read`` kinds under ``folder`` by kind (only what is read of each: ``kept``), where
    the ConfigMaps named ``locate`` are, and what was skipped (other kinds, other tools' files).

    What is kept leaves the parse as one pickle and is unpickled once everything the parse made is gone. Kept as
    parsed, the objects would sit scattered among the parser's freed nodes, dicts and strings, and the allocator
    only gives an area of memory back to the system once nothing in it is used: a folder of 10 000 namespaces
    stayed resident at many times the objects' size (bench/state_memory.py --source files). Unpickled after, they
    fill memory of their own, side by side, and what they share (the strings ``kept`` interns) stays shared.
    """
    read = tuple(read)
    # The types of the webhook's kinds (a cluster has thousands of those objects) looked up before the parse; a
    # node's pods and the node are few, and their types many (many modules of the client, memory for nothing:
    # docs/benchmarks.md).
    prepare(k for k in read if k in WEBHOOK_KINDS)
    with collector_paused():
        frozen = pickle.dumps(_parse(folder, locate, read), protocol=pickle.HIGHEST_PROTOCOL)
        loaded: _Loaded = pickle.loads(frozen)
    del frozen
    # The file texts, the parser's larger blocks and the pickle were C heap: give its free pages back too.
    if (trim := malloc_trim()) is not None:
        trim(0)
    return loaded


def _resource(kind: str) -> str:
    """``priorityclasses.scheduling.k8s.io``, ``namespaces``: how the apiserver names a kind's resource."""
    k = KINDS[kind]
    return f"{k.plural}.{k.group}" if k.group else k.plural


def _where(origin: Origin) -> str:
    return f"{origin[0]}:{_line_of(origin)}"


def _parse(folder: Path, locate: str | None, read: tuple[str, ...]) -> _Loaded:
    """Parse every file. YAML nodes are only looked at while their document is loaded: kept for every object,
    they would cost many times the objects' own memory (an object's origin is kept without its node, and found
    again only for an error)."""
    loaded = _Loaded({k: [] for k in read}, {}, [], {}, [])
    first: dict[tuple[str, str, str], Origin] = {}     # where each object was, to name both of two
    default: tuple[str, Origin] | None = None          # the globalDefault PriorityClass, and where
    files = manifest_files(folder)
    # A kustomize overlay's patch looks like the object it patches: a second object of that name.
    overlay = ("; a kustomize overlay's patch is no object of its own: give the state kustomize builds "
               "(kubectl kustomize DIR > FILE)" if any(f.name in KUSTOMIZATIONS for f in files) else "")
    for path in files:
        for line, doc, node in _documents(path):
            for obj, origin in _flatten((path, line, node, ()), doc):
                # Every kind a state holds is checked, whichever program reads the folder: one verdict for both.
                if not _read(obj, origin, tuple(KINDS)):
                    kind = obj.get("kind")
                    loaded.skipped.append((str(path.relative_to(folder)),
                                           str(kind) if kind else "no kind: not a Kubernetes object"))
                    continue
                kind = obj["kind"]
                meta = obj["metadata"]
                # The apiserver puts a namespaced object without one in the request's namespace (kubectl's:
                # default) and drops the namespace of a cluster-scoped one (rest.BeforeCreate).
                if KINDS[kind].namespaced and not meta.get("namespace"):
                    meta["namespace"] = "default"
                elif not KINDS[kind].namespaced:
                    meta.pop("namespace", None)
                # kubectl's strict field validation: a misspelled field is an error, never a default
                unknown = unknown_fields(obj)
                if unknown:
                    raise StateFileError(f"{path}:{_line_of(origin, unknown[0])}: {_describe(obj)}: "
                                         f"{describe_unknown(unknown)}")
                # The one judgement of what enters the state (the live source's too): what the apiserver would
                # refuse, in its words (the first error's line, every error), fails the load; a profile it stores
                # but no rule can apply is held marked, as the live source holds it.
                verdict = judge(obj)
                if verdict.refused:
                    raise StateFileError(f"{path}:{_line_of(origin, verdict.refused[0][0])}: {_describe(obj)}: "
                                         f"{verdict.reason}")
                key = (kind, meta.get("namespace") or "", meta["name"])
                if key in first:
                    raise StateFileError(f"{path}:{_line_of(origin)}: {_describe(obj)}: "
                                         f"{already_exists(_resource(kind), meta['name'])}; it is also at "
                                         f"{_where(first[key])}, and a state holds each object once{overlay}")
                first[key] = (path, line, None, origin[3])  # no node kept: found again for an error
                if kind == "PriorityClass" and obj.get("globalDefault") is True:
                    if default is not None:
                        raise StateFileError(f"{path}:{_line_of(origin, ('globalDefault',))}: {_describe(obj)}: "
                                             f"{second_default(default[0])} (at {_where(default[1])})")
                    default = (meta["name"], (path, line, None, origin[3]))
                if kind not in read:  # the other program's (the agent's Pods, the webhook's profiles)
                    loaded.skipped.append((str(path.relative_to(folder)), kind))
                    continue
                if kind == "ConfigMap" and meta["name"] == locate:
                    loaded.located[object_key(obj)] = f"{path}:{_line_of(origin)}"
                if verdict.unusable is not None:
                    loaded.unusable.setdefault(kind, {})[object_key(obj)] = verdict.unusable[1]
                    loaded.unusable_at.append(f"{path}:{_line_of(origin, verdict.unusable[0])}: {_describe(obj)}: "
                                              f"{verdict.unusable[1]}")
                # only what is read of it, as the live source keeps it (the same function)
                loaded.by_kind[kind].append(kept(kind, obj))
    return loaded


def skipped_note(folder: Path, skipped: list[tuple[str, str]]) -> str | None:
    """One line naming every file and kind a load skipped, or None: ``cluster state from DIR: skipped what it
    does not read: kustomization.yaml (Component); base/webhook.yaml (Deployment, Service)``."""
    if not skipped:
        return None
    by_file: dict[str, list[str]] = {}
    for file, what in skipped:
        by_file.setdefault(file, []).append(what)
    parts = []
    for file, whats in by_file.items():
        counted = {w: whats.count(w) for w in whats}
        parts.append(f"{file} ({', '.join(w if n == 1 else f'{w} x{n}' for w, n in counted.items())})")
    n = len(skipped)
    return (f"cluster state from {folder}: skipped {n} document{'s' if n != 1 else ''} it does not read: "
            + "; ".join(parts))


def load_folder(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Every object of a kind the state holds under ``folder`` (only what is read of it), by kind; raises
    StateFileError naming path and line."""
    return _load(folder).by_kind


class FilesSource:
    """Keeps a ClusterState equal to a folder of manifests.

    ``config_map`` is the (namespace, name) of the slo-controller-config its reader uses (the agent's
    ``--config-namespace``/``--config-name``); a ConfigMap of that name in another namespace is warned about.
    """

    def __init__(self, folder: Path, state: ClusterState, config_map: tuple[str, str] | None = None) -> None:
        self.folder = Path(folder)
        self.state = state
        self.config_map = config_map
        self.last_error: str | None = None
        self.reloads = 0
        self._misplaced: list[str] = []
        self._skipped: str | None = None
        self._unusable: list[str] = []   # the objects the last load held marked, as logged
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def load(self) -> None:
        """Load once; raises StateFileError (used at start-up, where it is fatal)."""
        loaded = _load(self.folder, self.config_map[1] if self.config_map else None,
                       [k for k in self.state.kinds if k in KINDS])
        self.state.replace_all(loaded.by_kind, loaded.unusable)
        self.last_error = None
        self.reloads += 1
        self._check_config_map(loaded.located)
        if loaded.unusable_at != self._unusable:  # each once, and again only when what is held marked changes
            for where in loaded.unusable_at:
                if where not in self._unusable:
                    log.warning("%s; not applied until it is fixed", where)
            self._unusable = loaded.unusable_at
        note = skipped_note(self.folder, loaded.skipped)
        if note != self._skipped:  # once, and again only when what is skipped changes
            if note is not None:
                log.warning("%s", note)
            self._skipped = note

    def reload(self) -> bool:
        """Reload after a change; on error keep the last good state and report it (each new error once), in the
        state too (``ClusterState.reload_failed``: the metrics say it)."""
        previous = self.last_error
        try:
            self.load()
        except Exception as exc:  # whatever it is, the last good state stays and it is said
            self.last_error = str(exc) if isinstance(exc, StateFileError) else f"{type(exc).__name__}: {exc}"
            self.state.reload_failed(self.last_error)
            if self.last_error != previous:
                log.error("cluster state reload failed, keeping the last good state: %s", self.last_error)
            return False
        self.state.reload_failed(None)
        if previous is not None:
            log.info("cluster state recovered: reloaded from %s: %s", self.folder, self.state.counts())
        else:
            log.info("cluster state reloaded from %s: %s", self.folder, self.state.counts())
        return True

    def _check_config_map(self, located: dict[Key, str]) -> None:
        """Warn (once per change) about an slo-controller-config that sits where it is not read."""
        if self.config_map is None:
            return
        namespace, name = self.config_map
        misplaced = []
        for (ns, _), where in sorted(located.items()):
            if ns != namespace:
                misplaced.append(f"{where}: ConfigMap {name} is in namespace {ns}, "
                                 f"not in the configured namespace {namespace}, and is not read: move it to "
                                 f"{namespace}, or set --config-namespace {ns}")
        if misplaced != self._misplaced:
            for message in misplaced:
                log.warning("%s", message)
        self._misplaced = misplaced

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="files-source", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        """Reload on every change until stopped. A watch that fails (the folder removed, or made unreadable) is
        said once, and the folder read again and watched anew every few seconds, the last good state served."""
        from watchfiles import watch

        while not self._stop.is_set():
            try:
                for _changes in watch(self.folder, stop_event=self._stop, debounce=200, rust_timeout=500,
                                      yield_on_timeout=False, raise_interrupt=False):
                    self.reload()
            except Exception as exc:  # a thread that dies would stop every reload, unsaid
                if self.last_error is None:
                    log.error("cannot watch the cluster state folder %s (%s: %s); reading it again every %g s",
                              self.folder, type(exc).__name__, exc, _REWATCH_SECONDS)
                if not self._stop.wait(_REWATCH_SECONDS):
                    self.reload()
