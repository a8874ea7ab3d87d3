"""Explicit RFC 6902 patch building.

Rules change the object through a ``PatchBuilder``, which applies each change and records the
operation that makes it, so the patch is exactly what the rules did: no diff library (slow, and it
emits surprising ``move`` ops), missing parent maps added, keys escaped.

Copy on write: the builder never changes a map or list it did not copy itself. A write copies
(shallowly) each container on its path the first time, so the caller's object stays as it came and
a request costs a few small copies instead of a deep copy of the whole pod.

A value handed to ``set`` or ``update`` is taken, not copied: the op and the document hold that very object, and
a later write below it copies it first, so the op keeps what was written. The caller must not change a value after
handing it over (every rule builds its values fresh, or passes the pod's own untouched subtrees).
"""

from __future__ import annotations

from operator import is_not
from typing import Any

Path = tuple[str | int, ...]
_MISSING = object()


def pointer(path: Path) -> str:
    """The RFC 6901 pointer of ``path`` (``~`` and ``/`` escaped; most keys have neither, so most skip it)."""
    tokens: list[str] = []
    for p in path:
        if type(p) is str:
            if "~" in p or "/" in p:
                p = p.replace("~", "~0").replace("/", "~1")
            tokens.append(p)
        else:
            tokens.append(str(p))
    return "/" + "/".join(tokens) if tokens else ""  # one join: cheaper than a concatenation per token


def _differs(old: Any, new: Any) -> bool:
    """Whether ``_merge_into`` may write something for these values: not the same object, and a map
    or list (it looks inside) or a different value or type (its "replace" test)."""
    return old is not new and (isinstance(old, (dict, list)) or isinstance(new, (dict, list))
                               or old != new or type(old) is not type(new))


def _get(doc: Any, path: Path) -> Any:
    cur = doc
    try:
        for p in path:
            if type(cur) is str or (type(p) is int and p < 0):  # no indexing into strings or from the end
                return _MISSING
            cur = cur[p]
    except (KeyError, IndexError, TypeError):
        return _MISSING
    return cur


def _look(doc: Any, path: Path) -> Any:
    """``doc[p0][p1]...``, or None where a step fails. Maps step with ``get``: a missing key (rules
    often add one, an annotation) raising and catching KeyError would cost more than the set."""
    cur = doc
    for p in path:
        if type(cur) is dict:
            cur = cur.get(p)
            if cur is None:
                return None
        else:
            try:
                cur = cur[p]
            except (KeyError, IndexError, TypeError):
                return None
    return cur


def _holds(container: Any, key: str | int) -> bool:
    """Whether ``container[key]`` exists: a key of a map, or an index within a list."""
    if isinstance(container, dict):
        return key in container
    return isinstance(container, list) and isinstance(key, int) and 0 <= key < len(container)


class PatchBuilder:
    """Applies changes to ``doc`` (copy on write: the object passed in is never changed) and records
    the JSON Patch operations. ``doc`` is the current document."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = dict(doc)
        self.ops: list[dict[str, Any]] = []
        # id -> container for the copies this builder made: only these may change in place. Holding
        # them keeps each id unique while the builder lives.
        self._own: dict[int, Any] = {id(self.doc): self.doc}

    def get(self, path: Path, default: Any = None) -> Any:
        value = _get(self.doc, path)
        return default if value is _MISSING else value

    def _record(self, op: str, path: Path, value: Any = _MISSING) -> None:
        if value is _MISSING:
            self.ops.append({"op": op, "path": pointer(path)})
        else:
            self.ops.append({"op": op, "path": pointer(path), "value": value})

    def _child(self, parent: Any, key: str | int) -> Any:
        """``parent[key]`` (a map or list), copied into ``parent`` first unless this builder made it."""
        child = parent[key]
        if id(child) not in self._own:
            child = child.copy()
            parent[key] = child
            self._own[id(child)] = child
        return child

    def _writable(self, keys: Path) -> Any:
        """The container at ``keys`` (every step a map or list), with each one on the way our own."""
        own = self._own
        cur: Any = self.doc
        for k in keys:  # _child, written out: every op walks its path
            child = cur[k]
            if id(child) not in own:
                child = child.copy()
                cur[k] = child
                own[id(child)] = child
            cur = child
        return cur

    def set(self, path: Path, value: Any) -> bool:
        """Set ``path`` to ``value``, creating missing parent maps; False when already equal."""
        parents = path[:-1]
        parent = _look(self.doc, parents)  # look first: an equal value costs no copy
        last = path[-1]
        if isinstance(parent, dict):
            old = parent.get(last, _MISSING)
            if old is _MISSING:
                op = "add"
            elif old == value and type(old) is type(value):
                return False
            else:
                op = "replace"
        elif isinstance(parent, list):
            op = "replace"
        else:
            self._parents(path, value)
            return True
        self._writable(parents)[last] = value
        self.ops.append({"op": op, "path": pointer(path), "value": value})
        return True

    def _parents(self, path: Path, value: Any) -> None:
        """A parent of ``path`` is missing: write the rest of the path as one value instead (an "add"
        below a missing parent fails upstream)."""
        cur: Any = self.doc
        for i, p in enumerate(path[:-1]):
            nxt = cur[p] if _holds(cur, p) else None
            if not isinstance(nxt, (dict, list)):
                nested: Any = value
                for q in reversed(path[i + 1:]):
                    nested = {q: nested}
                op = "replace" if isinstance(cur, dict) and p in cur else "add"
                cur[p] = nested
                self._record(op, path[: i + 1], nested)
                return
            cur = self._child(cur, p)

    def remove(self, path: Path) -> bool:
        if not _holds(_get(self.doc, path[:-1]), path[-1]):
            return False
        last = path[-1]
        del self._writable(path[:-1])[last]
        self._record("remove", path)
        return True

    def update(self, path: Path, new: Any) -> None:
        """Make ``path`` equal to ``new`` with the fewest explicit ops (maps merged key by key,
        lists of equal length element by element, anything else replaced whole)."""
        parent = _get(self.doc, path[:-1])
        last = path[-1]
        if _holds(parent, last):
            if parent[last] is not new:
                self._merge_into(self._writable(path[:-1]), last, path, new)
        else:
            self.set(path, new)

    def _merge_into(self, parent: Any, key: str | int, path: Path, new: Any) -> None:
        """``parent`` is our own; ``parent[key]`` is copied only once something below it changes."""
        old = parent[key]
        if old is new:  # shared, untouched subtree of a copy-on-write result
            return
        if isinstance(old, dict) and isinstance(new, dict):
            self._merge_maps(parent, key, path, old, new)
        elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            if any(map(is_not, old, new)):
                mine = self._child(parent, key)
                for i, v in enumerate(new):
                    self._merge_into(mine, i, (*path, i), v)
        elif old != new or type(old) is not type(new):
            parent[key] = new
            self._record("replace", path, new)

    def _merge_maps(self, parent: Any, key: str | int, path: Path, old: dict[str, Any], new: dict[str, Any]) -> None:
        removed = [k for k in old if k not in new]
        # ``is not`` first: most values of a copy-on-write result are the very same objects
        changed = [k for k, v in new.items() if (o := old.get(k, _MISSING)) is not v and _differs(o, v)]
        if not removed and not changed:
            return  # a fresh map holding equal values: nothing to write, nothing to copy
        mine = self._child(parent, key)
        for k in removed:
            del mine[k]
            self._record("remove", (*path, k))
        for k in changed:
            if k in mine:
                self._merge_into(mine, k, (*path, k), new[k])
            else:
                mine[k] = new[k]
                self._record("add", (*path, k), new[k])


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_ops(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """``doc`` with add/replace/remove ops applied (the only ones PatchBuilder emits), ``doc`` left as it was:
    each map and list on an op's path is copied once, everything else is shared with ``doc``."""
    copied: set[int] = set()

    def own(container: Any) -> Any:
        mine = container.copy()
        copied.add(id(mine))
        return mine

    for op in ops:
        tokens = [_unescape(t) for t in op["path"].split("/")[1:]]
        if not tokens:
            doc = op["value"]
            continue
        if id(doc) not in copied:
            doc = own(doc)
        parent = doc
        for t in tokens[:-1]:
            key: Any = int(t) if isinstance(parent, list) else t
            child = parent[key]
            if id(child) not in copied:
                child = parent[key] = own(child)
            parent = child
        last: Any = tokens[-1]
        if isinstance(parent, list):
            last = len(parent) if last == "-" else int(last)
        if op["op"] == "remove":
            del parent[last]
        elif op["op"] == "add" and isinstance(parent, list):
            parent.insert(last, op["value"])
        else:
            parent[last] = op["value"]
    return doc
