"""Objects from files, one at a time: `kubectl get ... -o yaml|json` output, manifests, folders of them.

A cluster's `kubectl get pods -A -o json` is one List document holding every pod; loading it whole would make
the audit's memory grow with the cluster. So a List's ``items`` are read one item at a time, and only one item
(and a read buffer) is held:

- JSON: the document is walked one value at a time over a buffer refilled from the file; an indented object
  (kubectl's layout) is cut at its closing line and decoded by orjson, anything else by the standard library's
  ``json.JSONDecoder.raw_decode``. Hand-written because no parser we can depend on does it as fast (ijson
  and ``raw_decode`` against orjson on the cut-out text: docs/benchmarks.md, "Figures behind the code's comments").
- YAML: PyYAML's event stream (its C parser reads the file in blocks) is composed into nodes one top-level value
  at a time, and each ``items`` entry is constructed on its own, by the YAML reader of every input
  (``webhook.cluster.yaml_input``: aliases bounded as kube-apiserver bounds them, counted over the whole
  document). YAML is much slower to parse than JSON; for large clusters, use `-o json` (docs/audit.md).

A document that is not a List is one object. Any other top-level value is an error naming the file and where.

A folder is read as the cluster state's is (``manifest_files``: every part of it readable, or an error naming the
part). kustomize's own files are no objects and are skipped, each named: a kustomization (``kustomization.yaml``,
``kustomization.yml``, ``Kustomization``) and what one names that is no whole object, its patches
(``patches``, ``patchesStrategicMerge``, ``patchesJson6902``) and its generators' input files. A patch of a
Deployment looks like a Deployment, and audited as one it would be a Deployment that exists nowhere. What kustomize
builds is audited from its output: ``kubectl kustomize DIR | colocation-webhook audit -f -``.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import yaml
from yaml import events, nodes

from webhook.cluster import yaml_input
from webhook.cluster.files import KUSTOMIZATIONS as STATE_KUSTOMIZATIONS
from webhook.cluster.files import StateFileError, found, manifest_files
from webhook.cluster.yaml_input import Composer, yaml_problem

_CHUNK = 1 << 20
_SPACE = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder()


@functools.lru_cache(maxsize=16)
def _closing_line(indentation: str) -> re.Pattern[str]:
    """A line break, ``indentation`` and a closing brace (a regular expression finds it faster than
    ``str.find`` among lines that all begin with the same spaces: docs/benchmarks.md)."""
    return re.compile(re.escape(indentation + "}"))


class ObjectsError(ValueError):
    """A file the audit cannot read: the message names the file and where."""


KUSTOMIZATIONS = (*STATE_KUSTOMIZATIONS, "Kustomization")  # the names kustomize reads
KUSTOMIZE_GROUP = "kustomize.config.k8s.io/"


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def kustomize_inputs(kustomization: Path) -> dict[Path, str]:
    """The files a kustomization names that are no whole object (its patches and its generators' inputs), by
    resolved path, each with what it is. A kustomization that does not read is kustomize's to report: nothing."""
    try:
        doc = yaml_input.load(kustomization.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    if not isinstance(doc, dict):
        return {}
    here = kustomization.parent
    named: list[tuple[Any, str]] = []
    for key in ("patches", "patchesJson6902", "replacements"):
        named += [(p.get("path"), "a patch") for p in _listed(doc.get(key)) if isinstance(p, dict)]
    named += [(p, "a patch") for p in _listed(doc.get("patchesStrategicMerge"))]
    for key in ("configMapGenerator", "secretGenerator"):
        for gen in _listed(doc.get(key)):
            if isinstance(gen, dict):
                named += [(str(f).rpartition("=")[2], "an input of a generator")
                          for f in _listed(gen.get("files")) + _listed(gen.get("envs")) if isinstance(f, str)]
    out: dict[Path, str] = {}
    for name, what in named:
        if isinstance(name, str) and name and "\n" not in name:  # an inline patch is no file
            out[(here / name).resolve()] = f"{what} of {_shown(kustomization)}"
    return out


def _shown(path: Path) -> str:
    """``path`` relative to the working folder when it is under it (as a folder given names its files)."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else relative


def _kustomizations_above(path: Path) -> list[Path]:
    """The kustomizations in the folders that hold ``path``, nearest first."""
    out = []
    for folder in path.resolve().parents:
        out += [folder / n for n in KUSTOMIZATIONS if (folder / n).is_file()]
    return out


def paths_of(given: Iterable[str], skipped: list[tuple[str, str]] | None = None) -> Iterator[str]:
    """Each file named, and each manifest under a folder named (sorted); ``-`` is stdin. kustomize's files are left
    out, each added to ``skipped`` as (file, what it is)."""
    for name in given:
        path = Path(name)
        if name == "-":
            yield name
            continue
        if not path.is_dir():
            files, kustomizations = [path], _kustomizations_above(path)
        else:
            try:
                files = manifest_files(path)
            except StateFileError as exc:
                raise ObjectsError(str(exc)) from None
            kustomizations = [f for f in files if f.name in KUSTOMIZATIONS]
        inputs: dict[Path, str] = {}
        for k in kustomizations:
            inputs.update(kustomize_inputs(k))
        for f in files:
            what = "a kustomization" if f.name in KUSTOMIZATIONS else inputs.get(f.resolve())
            if what is None:
                yield str(f)
            elif skipped is not None:
                skipped.append((str(f), what))


def objects(given: Iterable[str], skipped: list[tuple[str, str]] | None = None) -> Iterator[tuple[str, Any]]:
    """(where, object) for every object in the files, in file order; ``where`` is ``path`` or ``path[item N]``.
    kustomize's files are not read: added to ``skipped``."""
    for name in paths_of(given, skipped):
        yield from _objects_of(name)


def _objects_of(name: str) -> Iterator[tuple[str, Any]]:
    shown = "stdin" if name == "-" else name
    try:
        raw: IO[bytes] = sys.stdin.buffer if name == "-" else open(name, "rb")  # noqa: SIM115  # closed below
    except OSError as exc:
        raise ObjectsError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    text = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
    try:
        opening = _opening(text)
        json_text = opening[-1:] in ("{", "[")
        yield from (_json_values if json_text else _yaml_values)(text, shown, opening)
    except UnicodeDecodeError as exc:
        raise ObjectsError(f"{shown}: is not UTF-8 text (byte {exc.start} of a block)") from None
    except OSError as exc:
        raise ObjectsError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    except RecursionError:  # the decoders recurse per level of nesting
        raise ObjectsError(f"{shown}: nests too deeply to read") from None
    finally:
        if name == "-":
            text.detach()  # closing the wrapper would close stdin for a second `-f -`
        else:
            text.close()


def _opening(text: IO[str]) -> str:
    """What the file starts with, up to and including its first character that is not white space: "{" or "["
    there is JSON, anything else YAML. Returned to be read again (stdin cannot seek back)."""
    read = []
    while True:
        c = text.read(1)
        read.append(c)
        if not c or not c.isspace():
            return "".join(read)


# -- JSON --------------------------------------------------------------------------------------------------------------
class _Buffer:
    """Text from a file, read in blocks; ``pos`` is the next character; ``base`` the file offset of ``buf[0]``."""

    def __init__(self, text: IO[str], start: str = "") -> None:
        self.text, self.buf, self.pos, self.base, self.eof = text, start, 0, 0, False

    def more(self) -> bool:
        if self.eof:
            return False
        chunk = self.text.read(_CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.base += self.pos
        self.buf, self.pos = self.buf[self.pos:] + chunk, 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end)."""
        while True:
            self.pos = _SPACE.match(self.buf, self.pos).end()  # type: ignore[union-attr]  # always matches
            if self.pos < len(self.buf) or not self.more():
                return self.buf[self.pos:self.pos + 1]

    def value(self, where: str) -> Any:
        """The JSON value that starts at the next character that is not white space."""
        self.peek()
        while True:
            if (found_end := self._closing()) is not None:
                try:
                    obj = orjson.loads(self.buf[self.pos:found_end])
                except orjson.JSONDecodeError:
                    pass  # not laid out as assumed: the general decoder below
                else:
                    self.pos = found_end
                    return obj
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.more():
                    continue  # the value goes on past what was read
                raise ObjectsError(f"{where}: not valid JSON at character {self.base + exc.pos}: {exc.msg}") from None
            if end == len(self.buf) and self.more():
                continue  # a number may go on in the next block
            self.pos = end
            return obj

    def _closing(self) -> int | None:
        """Where the object at ``pos`` ends if the file is indented, as kubectl's is: an object that opens a line
        closes on a line of the same indentation. No JSON string holds a raw line break, so that line is the
        first such line after the opening, and orjson (faster than ``raw_decode``) checks the rest: text
        that parses whole from an opening brace is exactly that object."""
        buf, pos = self.buf, self.pos
        if buf[pos:pos + 1] != "{":
            return None
        line = buf.rfind("\n", 0, pos)
        if line < 0 or buf[line + 1:pos].strip(" \t"):
            return None
        closing = _closing_line(buf[line:pos])
        while (found := closing.search(buf, pos)) is None:
            if not self.more():
                return None
            buf, pos = self.buf, self.pos
        return found.end()

    def expect(self, chars: str, where: str) -> str:
        c = self.peek()
        if not c or c not in chars:
            got = repr(c) if c else "the end of the file"
            raise ObjectsError(f"{where}: not valid JSON at character {self.base + self.pos}: expected "
                               f"{' or '.join(repr(x) for x in chars)}, found {got}")
        self.pos += 1
        return c


def _json_values(text: IO[str], name: str, first: str) -> Iterator[tuple[str, Any]]:
    """Every top-level value (a JSON sequence or JSON lines is many), a List's items one by one."""
    buf = _Buffer(text, first)
    count = 0
    while buf.peek():
        if buf.peek() != "{":
            value = buf.value(name)
            raise ObjectsError(f"{name}: holds {found(value)} at the top level; expected objects or a List")
        buf.pos += 1
        head: dict[str, Any] = {}
        streamed = False
        if buf.peek() == "}":
            buf.pos += 1
        else:
            while True:
                key = buf.value(name)
                buf.expect(":", name)
                if key == "items" and buf.peek() == "[":
                    buf.pos += 1
                    streamed = True
                    i = 0
                    if buf.peek() == "]":
                        buf.pos += 1
                    else:
                        while True:
                            yield f"{name}[item {i}]", buf.value(name)
                            i += 1
                            if buf.expect(",]", name) == "]":
                                break
                else:
                    head[key] = buf.value(name)
                if buf.expect(",}", name) == "}":
                    break
        count += 1
        if not streamed:
            yield (name if count == 1 else f"{name}[document {count}]"), head


# -- YAML --------------------------------------------------------------------------------------------------------------
def _yaml_values(text: IO[str], name: str, first: str) -> Iterator[tuple[str, Any]]:
    """Every document's value, a List's items one by one: PyYAML composes a whole document before anything is
    constructed; this composes top-level values and List items separately, each constructed by the loader's own
    constructor (same tags, same types)."""
    loader: Any = yaml_input.LOADER(_Prefixed(first, text))
    comp = Composer(loader)
    try:
        loader.get_event()  # stream start
        document = 0
        while not loader.check_event(events.StreamEndEvent):
            comp.begin()
            document += 1
            where = name if document == 1 else f"{name}[document {document}]"
            if loader.check_event(events.MappingStartEvent):
                start = comp.open()
                head: list[tuple[nodes.Node, nodes.Node]] = []
                streamed = False
                while not loader.check_event(events.MappingEndEvent):
                    key = comp.key()
                    if (isinstance(key, nodes.ScalarNode) and key.value == "items"
                            and loader.check_event(events.SequenceStartEvent)):
                        comp.open()
                        streamed = True
                        i = 0
                        while not loader.check_event(events.SequenceEndEvent):
                            yield f"{where}[item {i}]", comp.construct(comp.node())
                            i += 1
                        loader.get_event()
                    else:
                        head.append((key, comp.value(key)))
                end = loader.get_event()
                if not streamed:
                    tag = start.tag if start.tag not in (None, "!") else loader.resolve(
                        nodes.MappingNode, None, start.implicit)
                    yield where, comp.construct(nodes.MappingNode(tag, head, start.start_mark, end.end_mark))
            else:
                value = comp.construct(comp.node())
                if value is not None:   # an empty document (a trailing ---) holds nothing
                    raise ObjectsError(f"{where}: holds {found(value)} at the top level; expected objects or a List")
            loader.get_event()  # document end
    except yaml.YAMLError as exc:
        raise ObjectsError(yaml_problem(name, exc)) from None
    finally:
        loader.dispose()


class _Prefixed(io.TextIOBase):
    """A text stream with a character already read put back in front."""

    def __init__(self, first: str, rest: IO[str]) -> None:
        self.first, self.rest = first, rest

    def read(self, size: int | None = -1) -> str:
        head, self.first = self.first, ""
        if size is None or size < 0:
            return head + self.rest.read()
        return head + self.rest.read(max(0, size - len(head)))

    def readable(self) -> bool:
        return True
