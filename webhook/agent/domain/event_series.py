"""Repeated Events folded into one ``events.k8s.io/v1`` object with a series, pure.

client-go's event recorder (``k8s.io/client-go/tools/events``) keys an Event on what it is about and why
(``regarding``, ``reason``, ``action``; the note is left out, so a repeat whose text changed still joins the
series): the first occurrence creates the object, a repeat patches its ``series`` (``count``,
``lastObservedTime``) instead of creating another one, and a series nobody repeated for 6 minutes ends, so the
next occurrence starts a new object. ``SeriesBook`` makes those decisions over plain data; the agent's API edge
(``webhook.agent.edges.actions``) sends them.

Two bounds client-go also has in some form: a series is patched at most once per ``patch_interval`` (the
first repeat at once, later ones folded and sent by ``due``), and the book holds at most ``max_series``
series, forgetting the least recently seen one past that.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

FINISH_SECONDS = 6 * 60.0     # client-go's finishTime
PATCH_INTERVAL = 30.0
MAX_SERIES = 1024
NOTE_LIMIT = 1024             # bytes; the apiserver refuses a longer note


@dataclass(frozen=True, slots=True)
class Regarding:
    """The ObjectReference an Event is about."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class EventKey:
    regarding: Regarding
    reason: str
    action: str


@dataclass(frozen=True, slots=True)
class Create:
    """Create the Event ``name``; ``count`` > 1 re-creates a series whose object is gone (expired)."""

    name: str
    namespace: str
    first: float              # eventTime (Unix seconds)
    count: int
    last: float               # series.lastObservedTime when count > 1
    note: str
    type: str                 # Normal or Warning


@dataclass(frozen=True, slots=True)
class Patch:
    name: str
    namespace: str
    count: int
    last: float


@dataclass(slots=True)
class _Series:
    name: str
    namespace: str
    first: float
    count: int
    last: float
    sent: int                 # the count the apiserver has
    sent_at: float
    note: str                 # the first occurrence's, as client-go keeps it
    type: str


def truncate_note(note: str, limit: int = NOTE_LIMIT) -> str:
    """``note`` cut to ``limit`` UTF-8 bytes (on a character boundary), as the apiserver counts them."""
    raw = note.encode()
    if len(raw) <= limit:
        return note
    return raw[:limit].decode(errors="ignore")


class SeriesBook:
    """Which write each occurrence of an Event needs. Call ``observe`` for an occurrence, then report the
    outcome of the write it asked for (``created``, ``patched``, ``failed``); call ``due`` now and then for the
    folded repeats whose patch is due and the series that ended."""

    def __init__(self, finish: float = FINISH_SECONDS, patch_interval: float = PATCH_INTERVAL,
                 max_series: int = MAX_SERIES) -> None:
        self.finish = finish
        self.patch_interval = patch_interval
        self.max_series = max_series
        self._series: OrderedDict[EventKey, _Series] = OrderedDict()   # least recently seen first

    def __len__(self) -> int:
        return len(self._series)

    def observe(self, key: EventKey, now: float, new_name: str, namespace: str, note: str,
                type_: str) -> Create | Patch | None:
        """One occurrence at ``now``: a Create (first, or after the series ended), a Patch (a repeat whose patch
        is due), or None (a repeat folded into the series until ``due`` sends it)."""
        s = self._series.get(key)
        if s is not None and now - s.last > self.finish:
            del self._series[key]
            s = None
        if s is None:
            while len(self._series) >= self.max_series:
                self._series.popitem(last=False)
            note = truncate_note(note)
            self._series[key] = _Series(new_name, namespace, now, 1, now, 0, now, note, type_)
            return Create(new_name, namespace, now, 1, now, note, type_)
        self._series.move_to_end(key)
        s.count += 1
        s.last = now
        if s.sent == 0:            # the object is not there yet (its create is under way or failed)
            return None
        if s.count == 2 or now - s.sent_at >= self.patch_interval:
            return Patch(s.name, s.namespace, s.count, s.last)
        return None

    def created(self, key: EventKey, write: Create, now: float) -> None:
        s = self._series.get(key)
        if s is not None:
            s.name, s.sent, s.sent_at = write.name, write.count, now

    def patched(self, key: EventKey, write: Patch, now: float) -> None:
        s = self._series.get(key)
        if s is not None and s.name == write.name:
            s.sent, s.sent_at = max(s.sent, write.count), now

    def failed(self, key: EventKey, write: Create | Patch) -> None:
        """A write that did not happen: a failed create forgets the series (the next occurrence creates it
        again); a failed patch stays pending for ``due``."""
        if isinstance(write, Create) and key in self._series:
            del self._series[key]

    def gone(self, key: EventKey, new_name: str) -> Create | None:
        """The series' object no longer exists (its patch answered 404, the Event's TTL passed): create it
        again under ``new_name``, with the whole series, as client-go does."""
        s = self._series.get(key)
        if s is None:
            return None
        s.name, s.sent = new_name, 0
        return Create(new_name, s.namespace, s.first, s.count, s.last, s.note, s.type)

    def due(self, now: float) -> list[tuple[EventKey, Patch]]:
        """Patches of series with unsent repeats whose interval passed (a series that ended gets its final
        count), and forget ended series that have nothing left to send (or whose final patch kept failing
        for another ``finish``)."""
        out: list[tuple[EventKey, Patch]] = []
        for key, s in list(self._series.items()):
            ended = now - s.last > self.finish
            if now - s.last > 2 * self.finish:
                del self._series[key]
            elif s.sent and s.count > s.sent and (ended or now - s.sent_at >= self.patch_interval):
                out.append((key, Patch(s.name, s.namespace, s.count, s.last)))
            elif ended:
                del self._series[key]
        return out
