"""The one YAML reader of every file a user gives both programs (manifests, reviews, ``--cluster-state``,
``audit -f``, ``policies --check``, the quota configuration, kubeconfigs), bounded as kube-apiserver bounds YAML.

A YAML alias bomb ("billion laughs", CVE-2019-11253: a few hundred bytes of nested anchors that expand to
billions of values) is refused as go-yaml refuses it, which is what decodes every manifest, request body and
kubeconfig of Kubernetes (sigs.k8s.io/yaml over go.yaml.in/yaml/v2): ``yaml: document contains excessive
aliasing``, with the file and the line of the alias where the budget ran out. The budget is go-yaml's own
(go.yaml.in/yaml/v2/decode.go, ``allowedAliasRatio`` and ``unmarshal``): every node decoded is counted, an
alias's whole expansion included, and a document is refused once more than 100 of over 1000 nodes came through
aliases and their share exceeds 99 %, a share that tightens from 99 % at 400 000 nodes to 10 % at 4 000 000.
What the apiserver accepts is accepted and what it refuses is refused (docs/cluster-state.md, "YAML aliases").

PyYAML shares an anchored node between its aliases: loading a bomb is fast and small, and the blow-up comes when
the object is walked or serialized (a size check, a copy). So the count is of the expanded size, computed without
expanding: as the nodes are composed from the parser's events, each anchored node's expanded size is kept, and an
alias adds it in one step. A document without an anchor (no ``&`` anywhere in the text) can hold no alias and is
composed by PyYAML's C composer as before (docs/benchmarks.md, "bench/yaml_bomb.py").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from yaml import events, nodes

LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C parser: safe, far faster

# go.yaml.in/yaml/v2/decode.go: alias_ratio_range_low, alias_ratio_range_high, and unmarshal's check.
_RATIO_LOW = 400_000
_RATIO_HIGH = 4_000_000
_RATIO_RANGE = float(_RATIO_HIGH - _RATIO_LOW)
_MIN_ALIASED = 100
_MIN_DECODED = 1000
EXCESSIVE = "yaml: document contains excessive aliasing"  # go-yaml's words, with the prefix its errors carry
MERGE_TAG = "tag:yaml.org,2002:merge"
_TAGS_KEPT = 4096  # the first values' tags, kept: keys repeat, and the rest (uids, names) would only grow it


class Refused(yaml.MarkedYAMLError):
    """YAML that parses but that kube-apiserver refuses to decode; ``problem`` in go-yaml's words."""


def allowed_ratio(decoded: int) -> float:
    """The share of ``decoded`` nodes that may come through aliases (go-yaml's ``allowedAliasRatio``)."""
    if decoded <= _RATIO_LOW:
        return 0.99
    if decoded >= _RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (float(decoded - _RATIO_LOW) / _RATIO_RANGE)


def _over(aliased: int, decoded: int) -> bool:
    return aliased > _MIN_ALIASED and decoded > _MIN_DECODED and aliased / decoded > allowed_ratio(decoded)


def yaml_problem(path: object, exc: yaml.YAMLError) -> str:
    """``path:line: invalid YAML: problem`` for any YAML file a user gives (state, review, quota config,
    kubeconfig); ``path:line: problem`` for YAML kube-apiserver refuses though it parses (``Refused``)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else 1
    problem = getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, Refused):
        return f"{path}:{line}: {problem}"
    context, cmark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and cmark is not None and cmark.line + 1 != line:
        problem += f" ({context} at line {cmark.line + 1})"
    return f"{path}:{line}: invalid YAML: {problem}"


class Composer:
    """Nodes from a loader's events, as PyYAML's composer makes them, with go-yaml's decode count kept.

    go-yaml counts in document order, a node before its children, a mapping's key before its value, with two
    exceptions, both of merge keys (``<<``; decode.go ``mapping`` and ``merge``): the key is not decoded, nor a
    sequence of maps to merge, whose maps are decoded last to first. The count follows it: the steps inside
    such a sequence are recorded and replayed in that order."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self._next = loader.get_event
        self._resolve = loader.resolve
        self._tags: dict[tuple[str, Any], str] = {}  # a plain scalar's tag, by value (keys repeat: "name", "image")
        self._anchors: dict[str, nodes.Node | None] = {}  # None: open()'s, which no alias may name
        self._sizes: dict[str, int] = {}       # anchor -> expanded size, once its node is composed
        self._decoded = self._aliased = 0
        self._log: list[tuple[int, Any]] | None = None  # steps to replay, inside a merged sequence

    def begin(self) -> None:
        """The next document's start: its anchors and go-yaml's count anew (a decoder per document)."""
        self._next()
        self._anchors, self._sizes, self._log = {}, {}, None
        self._decoded, self._aliased = 1, 0  # go-yaml decodes the document node itself first

    def document(self) -> nodes.Node:
        """The next document's node (its start and end events read)."""
        self.begin()
        node = self.node()
        self._next()
        return node

    def node(self) -> nodes.Node:
        """The next node, counted."""
        return self._compose(self._next(), False)[0]

    def open(self) -> Any:
        """The start event of a collection whose content the caller composes (``audit -f``'s streamed List),
        counted. An alias of it inside would make it contain itself."""
        event = self._next()
        self._register(event.anchor, None, event.start_mark)
        self._step(event.start_mark)
        return event

    def key(self) -> nodes.Node:
        """The next key of a mapping the caller composes; a merge key is not counted."""
        return self._key(self._next())[0]

    def value(self, key: nodes.Node) -> nodes.Node:
        """The value under ``key`` (a merge key's: as go-yaml merges it)."""
        return self._compose(self._next(), key.tag == MERGE_TAG and key.value == "<<")[0]

    def construct(self, node: nodes.Node) -> Any:
        return self.loader.construct_document(node)

    # -- the count -----------------------------------------------------------------------------------------------------
    def _step(self, mark: Any) -> None:
        """One node decoded where no alias is being expanded."""
        if self._log is not None:
            self._log.append((0, mark))
            return
        self._decoded += 1
        if self._aliased > _MIN_ALIASED and _over(self._aliased, self._decoded):
            self._refuse(self._aliased, self._decoded, mark)

    def _expand(self, size: int, mark: Any) -> None:
        """An alias's expansion of ``size`` nodes, every one of them aliased, in one step: their share only grows
        through an expansion while the allowed share only falls, so the check at its end finds what go-yaml's at
        each of its nodes would (and then where, ``_refuse``)."""
        if self._log is not None:
            self._log.append((size, mark))
            return
        self._decoded += size
        self._aliased += size
        if _over(self._aliased, self._decoded):
            self._refuse(self._aliased - size, self._decoded - size, mark, size)

    def _replay(self, step: tuple[int, Any]) -> None:
        size, mark = step
        if size:
            self._expand(size, mark)
        else:
            self._step(mark)

    def _refuse(self, aliased: int, decoded: int, mark: Any, size: int = 0) -> None:
        """``Refused`` at the node go-yaml stops at: the ``k``-th of an expansion of ``size`` begun after
        ``aliased`` of ``decoded`` (found by bisection; with ``size`` 0, the node just counted)."""
        if size:
            low, high = 1, size  # the first k at which the check fails: it holds from there on
            while low < high:
                k = (low + high) // 2
                if _over(aliased + k, decoded + k):
                    high = k
                else:
                    low = k + 1
            aliased, decoded = aliased + low, decoded + low
        raise Refused(None, None, f"{EXCESSIVE} ({aliased:,} of the first {decoded:,} nodes decoded come from "
                                  f"aliases; kube-apiserver refuses more than {allowed_ratio(decoded):.1%})", mark)

    # -- composing, as yaml/composer.py does -------------------------------------------------------------------------
    def _register(self, anchor: str | None, node: nodes.Node | None, mark: Any) -> None:
        if anchor is None:
            return
        if anchor in self._anchors:
            first = self._anchors[anchor]
            raise yaml.composer.ComposerError(f"found duplicate anchor {anchor!r}; first occurrence",
                                              first.start_mark if first is not None else None,
                                              "second occurrence", mark)
        self._anchors[anchor] = node

    def _compose(self, event: Any, merged: bool) -> tuple[nodes.Node, int]:
        """The node that starts with ``event``, and its size as go-yaml decodes it, aliases expanded."""
        kind = type(event)
        if kind is events.AliasEvent:
            return self._alias(event)
        if kind is events.ScalarEvent:
            self._step(event.start_mark)
            return self._scalar(event), 1
        if kind is events.SequenceStartEvent:
            return self._sequence(event, merged)
        if kind is events.MappingStartEvent:
            return self._mapping(event)
        raise yaml.composer.ComposerError(None, None, f"expected a node, found {event!r}", event.start_mark)

    def _alias(self, event: Any) -> tuple[nodes.Node, int]:
        anchor = event.anchor
        if anchor not in self._anchors:
            raise yaml.composer.ComposerError(None, None, f"found undefined alias {anchor!r}", event.start_mark)
        node, size = self._anchors[anchor], self._sizes.get(anchor)
        if node is None or size is None:  # inside its own anchor: PyYAML would make a cycle, go-yaml refuses it
            raise Refused(None, None, f"yaml: anchor '{anchor}' value contains itself", event.start_mark)
        self._step(event.start_mark)
        self._expand(size, event.start_mark)
        return node, 1 + size

    def _scalar(self, event: Any) -> nodes.ScalarNode:
        tag = event.tag
        if tag is None or tag == "!":  # resolved from the value alone: SafeLoader has no path resolvers
            tag = self._tags.get((event.value, event.implicit))
            if tag is None:
                tag = self._resolve(nodes.ScalarNode, event.value, event.implicit)
                if len(self._tags) < _TAGS_KEPT:
                    self._tags[event.value, event.implicit] = tag
        node = nodes.ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        if event.anchor is not None:
            self._register(event.anchor, node, event.start_mark)
            self._sizes[event.anchor] = 1
        return node

    def _sequence(self, start: Any, merged: bool) -> tuple[nodes.Node, int]:
        tag = start.tag
        if tag is None or tag == "!":
            tag = self._resolve(nodes.SequenceNode, None, start.implicit)
        node = nodes.SequenceNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        self._register(start.anchor, node, start.start_mark)
        size = 1
        append = node.value.append
        if not merged:
            self._step(start.start_mark)
            while type(event := self._next()) is not events.SequenceEndEvent:
                child, n = self._compose(event, False)
                append(child)
                size += n
        else:  # maps to merge: the sequence is not decoded, its maps are, last to first (decode.go, merge)
            outer, logs = self._log, []
            while type(event := self._next()) is not events.SequenceEndEvent:
                self._log = []
                child, n = self._compose(event, False)
                logs.append(self._log)
                append(child)
                size += n
            self._log = outer
            for log in reversed(logs):
                for step in log:
                    self._replay(step)
        node.end_mark = event.end_mark
        if start.anchor is not None:
            self._sizes[start.anchor] = size
        return node, size

    def _key(self, event: Any) -> tuple[nodes.Node, int]:
        if type(event) is events.ScalarEvent and event.value == "<<":
            node = self._scalar(event)
            if node.tag == MERGE_TAG:  # go-yaml's isMerge: not decoded
                return node, 0
            self._step(event.start_mark)
            return node, 1
        return self._compose(event, False)

    def _mapping(self, start: Any) -> tuple[nodes.Node, int]:
        tag = start.tag
        if tag is None or tag == "!":
            tag = self._resolve(nodes.MappingNode, None, start.implicit)
        node = nodes.MappingNode(tag, [], start.start_mark, None, flow_style=start.flow_style)
        self._register(start.anchor, node, start.start_mark)
        self._step(start.start_mark)
        size = 1
        append = node.value.append
        scalar = events.ScalarEvent
        key: nodes.Node
        value: nodes.Node
        while (kind := type(event := self._next())) is not events.MappingEndEvent:
            if kind is scalar and event.value != "<<":  # the usual key, without the dispatch
                self._step(event.start_mark)
                key, n = self._scalar(event), 1
            else:
                key, n = self._key(event)
            if type(event := self._next()) is scalar:
                self._step(event.start_mark)
                value, m = self._scalar(event), 1
            else:
                value, m = self._compose(event, n == 0)
            append((key, value))
            size += n + m
        node.end_mark = event.end_mark
        if start.anchor is not None:
            self._sizes[start.anchor] = size
        return node, size


def _documents(text: str, construct: bool) -> Iterator[tuple[nodes.Node, Any]]:
    try:
        yield from _read(text, construct)
    except yaml.MarkedYAMLError as exc:
        # libyaml ends a text without a final line break on a line after it, where PyYAML's own parser ends it
        # on its last line, as the user sees the file
        last = text.count("\n")
        for name in ("problem_mark", "context_mark"):
            mark = getattr(exc, name)
            if mark is not None and mark.line > last and not text.endswith("\n"):
                setattr(exc, name, yaml.Mark(mark.name, mark.index, last, mark.column, None, 0))
        raise


def _read(text: str, construct: bool) -> Iterator[tuple[nodes.Node, Any]]:
    loader: Any = LOADER(text)  # the C loader's methods have no annotations
    try:
        if "&" not in text:  # no anchor, so no alias: nothing to count (go-yaml counts only aliased nodes)
            while loader.check_node():
                node = loader.get_node()
                yield node, loader.construct_document(node) if construct else None
            return
        composer = Composer(loader)
        loader.get_event()  # the stream's start
        while not loader.check_event(events.StreamEndEvent):
            node = composer.document()
            yield node, loader.construct_document(node) if construct else None
    finally:
        loader.dispose()


def documents(text: str) -> Iterator[tuple[nodes.Node, Any]]:
    """(node, value) of each document of ``text``; ``yaml.YAMLError`` (``Refused`` for what kube-apiserver
    refuses) where it is not YAML both read."""
    return _documents(text, True)


def compose_all(text: str) -> Iterator[nodes.Node]:
    """The node of each document of ``text``, nothing constructed (to find a field's line)."""
    return (node for node, _ in _documents(text, False))


def load_all(text: str) -> list[Any]:
    """Every document of ``text``, as ``yaml.safe_load_all`` reads them (an empty document is None)."""
    return [value for _, value in documents(text)]


def load(text: str) -> Any:
    """The one document of ``text`` (None for none), as ``yaml.safe_load`` reads it."""
    found = documents(text)
    first = next(found, None)
    if first is None:
        return None
    second = next(found, None)
    if second is not None:
        raise yaml.composer.ComposerError("expected a single document in the stream", first[0].start_mark,
                                          "but found another document", second[0].start_mark)
    return first[1]


_KeyPath = tuple[str | int, ...]


def duplicate_keys(node: nodes.Node | None, path: _KeyPath = ()) -> list[tuple[_KeyPath, int]]:
    """(path, line) of each mapping key that repeats an earlier one of its mapping, in document order: PyYAML (and
    JSON decoders) keep the last silently, where the apiserver's strict decoding refuses it (``sigs.k8s.io/json``,
    ``duplicate field "spec.containers[0].image"``)."""
    out: list[tuple[_KeyPath, int]] = []
    if isinstance(node, nodes.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = key.value if isinstance(key, nodes.ScalarNode) else None
            if name is None:
                continue
            if name in seen:
                out.append(((*path, name), key.start_mark.line + 1))
            seen.add(name)
            out.extend(duplicate_keys(value, (*path, name)))
    elif isinstance(node, nodes.SequenceNode):
        for i, item in enumerate(node.value):
            out.extend(duplicate_keys(item, (*path, i)))
    return out
