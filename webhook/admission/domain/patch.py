"""Explicit RFC 6902 patch building.

Rules change the object through a ``PatchBuilder``, which applies each change and records the
operation that makes it, so the patch is exactly what the rules did: no diff library (slow, and it
emits surprising ``move`` ops), missing parent maps added, keys escaped.

Copy on write: the builder never changes a map or list it did not copy itself. A write copies
(shallowly) each container on its path the first time, so the caller's object stays as it came and
a request costs a few small copies instead of a deep copy of the whole pod.
"""

from __future__ import annotations

from functools import lru_cache
from operator import is_not
from typing import Any

from webhook.core.strategic_merge import clone

Path = tuple[str | int, ...]
_MISSING = object()


@lru_cache(maxsize=8192)  # rules write the same few paths on every request
def pointer(path: Path) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _snapshot(value: Any) -> Any:
    """What an op records: its own copy of a map or list the caller gave, so nothing the caller does
    later, and no container of the document the value may share, can rewrite a recorded op.
    (The builder itself never changes a value it was given: it copies on write.)"""
    return clone(value) if isinstance(value, (dict, list)) else value


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


class PatchBuilder:
    """Applies changes to ``doc`` (copy on write: the object passed in is never changed) and records
    the JSON Patch operations. ``doc`` is the current document."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = dict(doc)
        self.ops: list[dict[str, Any]] = []
        # id -> container for the copies this builder made: only these may change in place. Holding
        # them keeps each id unique while the builder lives.
        self._own: dict[int, Any] = {id(self.doc): self.doc}
        # (parent path, parent) of the last set(): rules write several keys of one map in a row
        # (requests then limits), and those skip both walks. Any other change clears it.
        self._last: tuple[Path, Any] | None = None

    def get(self, path: Path, default: Any = None) -> Any:
        value = _get(self.doc, path)
        return default if value is _MISSING else value

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
        cur = self.doc
        for k in keys:  # _child inlined: this runs for every op
            child = cur[k]
            if id(child) not in own:
                child = child.copy()
                cur[k] = child
                own[id(child)] = child
            cur = child
        return cur

    def set(self, path: Path, value: Any, fresh: bool = False) -> bool:
        """Set ``path`` to ``value``, creating missing parent maps; False when already equal.

        ``fresh``: the caller built ``value`` for this call (no map or list in it comes from the
        document) and will not change it later, so the op records it as is instead of a copy.
        """
        parent_path = path[:-1]
        last_set = self._last
        ours = last_set is not None and last_set[0] == parent_path
        if ours:
            cur: Any = last_set[1]  # type: ignore[index]
        else:
            cur = _look(self.doc, parent_path)  # look first: an equal value costs no copy
            if not isinstance(cur, (dict, list)):
                self._parents(path, value, fresh)
                return True
        last = path[-1]
        if isinstance(cur, dict) and last not in cur:
            op = "add"
        elif isinstance(cur, dict) and cur[last] == value and type(cur[last]) is type(value):
            return False
        else:
            op = "replace"
        if not ours:
            cur = self._writable(parent_path)
            self._last = (parent_path, cur)
        cur[last] = value
        self.ops.append({"op": op, "path": pointer(path), "value": value if fresh else _snapshot(value)})
        return True

    def set_keys(self, path: Path, values: dict[str, Any], keys: tuple[str, ...], fresh: bool = False) -> None:
        """``set(path + (key,), values[key], fresh)`` for each of ``keys`` that ``values`` has, in that
        order: the same ops, with one walk to the map at ``path`` instead of one per key (rules write
        a container's requests and limits together)."""
        parent = _look(self.doc, path)
        if not isinstance(parent, dict):  # missing or not a map: set() knows every case
            for key in keys:
                if key in values:
                    self.set(path + (key,), values[key], fresh)
            return
        own = None
        for key in keys:
            if key not in values:
                continue
            value = values[key]
            if key not in parent:
                op = "add"
            elif parent[key] == value and type(parent[key]) is type(value):
                continue
            else:
                op = "replace"
            if own is None:
                own = parent = self._writable(path)
                self._last = (path, own)
            parent[key] = value
            self.ops.append({"op": op, "path": pointer(path + (key,)), "value": value if fresh else _snapshot(value)})

    def _parents(self, path: Path, value: Any, fresh: bool) -> None:
        """A parent of ``path`` is missing: write the rest of the path as one value instead (an "add"
        below a missing parent fails upstream)."""
        self._last = None
        cur: Any = self.doc
        for i, p in enumerate(path[:-1]):
            nxt = cur.get(p) if isinstance(cur, dict) else (cur[p] if isinstance(cur, list) else None)
            if not isinstance(nxt, (dict, list)):
                nested: Any = value
                for q in reversed(path[i + 1:]):
                    nested = {q: nested}
                op = "replace" if isinstance(cur, dict) and p in cur else "add"
                cur[p] = nested
                # The maps around ``value`` are new, made here: only the caller's value may need a copy.
                if isinstance(value, (dict, list)) and not fresh:
                    nested = _snapshot(nested)
                self.ops.append({"op": op, "path": pointer(path[: i + 1]), "value": nested})
                return
            cur = self._child(cur, p)

    def remove(self, path: Path) -> bool:
        parent = _get(self.doc, path[:-1])
        last = path[-1]
        if not (isinstance(parent, dict) and last in parent
                or isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent)):
            return False
        self._last = None
        del self._writable(path[:-1])[last]
        self.ops.append({"op": "remove", "path": pointer(path)})
        return True

    def update(self, path: Path, new: Any) -> None:
        """Make ``path`` equal to ``new`` with the fewest explicit ops (maps merged key by key,
        lists of equal length element by element, anything else replaced whole)."""
        parent = _get(self.doc, path[:-1])
        last = path[-1]
        if isinstance(parent, dict) and last in parent or (
                isinstance(parent, list) and isinstance(last, int) and 0 <= last < len(parent)):
            if parent[last] is not new:
                self._last = None
                self._merge_into(self._writable(path[:-1]), last, path, new)
        else:
            self.set(path, new)

    def _merge_into(self, parent: Any, key: str | int, path: Path, new: Any) -> None:
        """``parent`` is our own; ``parent[key]`` is copied only once something below it changes."""
        old = parent[key]
        if old is new:  # shared, untouched subtree of a copy-on-write result
            return
        if isinstance(old, dict) and isinstance(new, dict):
            removed = [k for k in old if k not in new]
            # ``is not`` inline first: most values of a copy-on-write result are the very same objects
            changed = [k for k, v in new.items() if (o := old.get(k, _MISSING)) is not v and _differs(o, v)]
            if not removed and not changed:
                return  # a fresh map holding equal values: nothing to write, nothing to copy
            old = self._child(parent, key)
            for k in removed:
                del old[k]
                self.ops.append({"op": "remove", "path": pointer(path + (k,))})
            for k in changed:
                v = new[k]
                if k in old:
                    self._merge_into(old, k, path + (k,), v)
                else:
                    old[k] = v
                    self.ops.append({"op": "add", "path": pointer(path + (k,)), "value": _snapshot(v)})
            return
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            if not any(map(is_not, old, new)):
                return
            old = self._child(parent, key)
            for i, v in enumerate(new):
                self._merge_into(old, i, path + (i,), v)
            return
        if old != new or type(old) is not type(new):
            parent[key] = new
            self.ops.append({"op": "replace", "path": pointer(path), "value": _snapshot(new)})


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_ops(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """Apply add/replace/remove ops (the only ones PatchBuilder emits) to ``doc`` in place."""
    for op in ops:
        tokens = [_unescape(t) for t in op["path"].split("/")[1:]]
        if not tokens:
            doc = op["value"]
            continue
        parent = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
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
