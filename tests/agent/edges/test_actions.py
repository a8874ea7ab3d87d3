"""The agent's Events: events.k8s.io/v1, repeats folded into a series (client-go's recorder), against the
replay API server's events.k8s.io routes (tests/events_api.py, shaped like the apiserver's answers)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from harness.apiserver import Blackhole, ReplayAPIServer, load_exchange
from tests.events_api import EventsAPI, create_errors
from webhook.agent.domain.event_series import (
    FINISH_SECONDS,
    PATCH_INTERVAL,
    Create,
    EventKey,
    Patch,
    Regarding,
    SeriesBook,
    truncate_note,
)
from webhook.agent.domain.eviction import watermark_message
from webhook.agent.edges.actions import KubeActions

NS = "colo-demo"
NODE = "colo-node-1"
POD = {"kind": "Pod", "apiVersion": "v1", "namespace": NS, "name": "be-evict-ok",
       "uid": "0106db4a-d5ba-46cf-adb1-f133c4e76d43"}
T0 = 1_790_000_000.0      # a whole second: a MicroTime still needs its six digits

pytestmark = pytest.mark.usefixtures("restore_logging")


# -- the series book, pure ---------------------------------------------------------------------------------
def _key(name: str = "p", reason: str = "evictPodFail") -> EventKey:
    return EventKey(Regarding("v1", "Pod", NS, name, "u-" + name), reason, "Evict")


def _observe(book: SeriesBook, key: EventKey, now: float, name: str = "e") -> Create | Patch | None:
    return book.observe(key, now, name, NS, "note", "Warning")


def test_first_creates_first_repeat_patches_later_repeats_fold() -> None:
    book, key = SeriesBook(), _key()
    first = _observe(book, key, 0.0, "e1")
    assert first == Create("e1", NS, 0.0, 1, 0.0, "note", "Warning")
    assert isinstance(first, Create)
    book.created(key, first, 0.0)
    second = _observe(book, key, 1.0, "e2")
    assert second == Patch("e1", NS, 2, 1.0)            # the same object, never a new name
    assert isinstance(second, Patch)
    book.patched(key, second, 1.0)
    assert _observe(book, key, 2.0) is None            # folded: within the patch interval
    assert _observe(book, key, 3.0) is None
    assert book.due(1.0 + PATCH_INTERVAL - 0.1) == []
    ((due_key, due),) = book.due(1.0 + PATCH_INTERVAL)
    assert (due_key, due) == (key, Patch("e1", NS, 4, 3.0))
    book.patched(key, due, 1.0 + PATCH_INTERVAL)
    assert book.due(2.0 + PATCH_INTERVAL) == []         # nothing new to send


def test_a_repeat_past_the_interval_patches_at_once() -> None:
    book, key = SeriesBook(), _key()
    create = _observe(book, key, 0.0)
    assert isinstance(create, Create)
    book.created(key, create, 0.0)
    patch = _observe(book, key, 1.0)
    assert isinstance(patch, Patch)
    book.patched(key, patch, 1.0)
    assert _observe(book, key, 1.0 + PATCH_INTERVAL) == Patch("e", NS, 3, 1.0 + PATCH_INTERVAL)


def test_different_objects_reasons_and_actions_are_different_series() -> None:
    book = SeriesBook()
    keys = [_key("a"), _key("b"), _key("a", "evictPodSuccess"),
            EventKey(Regarding("v1", "Pod", NS, "a", "u-a"), "evictPodFail", "Other")]
    assert all(isinstance(_observe(book, k, 0.0), Create) for k in keys)
    assert len(book) == 4


def test_a_series_idle_for_six_minutes_ends() -> None:
    book, key = SeriesBook(), _key()
    create = _observe(book, key, 0.0, "e1")
    assert isinstance(create, Create)
    book.created(key, create, 0.0)
    patch = _observe(book, key, 10.0)
    assert isinstance(patch, Patch)
    book.patched(key, patch, 10.0)
    assert _observe(book, key, 11.0) is None            # count 3, not sent yet
    # Ended: its final count goes out, then it is forgotten; the next occurrence is a new object.
    assert book.due(11.0 + FINISH_SECONDS + 1) == [(key, Patch("e1", NS, 3, 11.0))]
    book.patched(key, Patch("e1", NS, 3, 11.0), 11.0 + FINISH_SECONDS + 1)
    assert book.due(11.0 + FINISH_SECONDS + 2) == []
    assert len(book) == 0
    assert isinstance(_observe(book, key, 12.0 + FINISH_SECONDS, "e2"), Create)


def test_the_book_is_bounded_and_forgets_the_least_recently_seen() -> None:
    book = SeriesBook(max_series=3)
    for i, name in enumerate("abc"):
        create = _observe(book, _key(name), float(i))
        assert isinstance(create, Create)
        book.created(_key(name), create, float(i))
    _observe(book, _key("a"), 5.0)                     # a is now the most recent
    assert isinstance(_observe(book, _key("d"), 6.0), Create)
    assert len(book) == 3
    assert isinstance(_observe(book, _key("b"), 7.0), Create)   # b was dropped: a new object
    assert not isinstance(_observe(book, _key("a"), 8.0), Create)          # a is still a series


def test_a_failed_create_is_forgotten_and_a_failed_patch_stays_due() -> None:
    book, key = SeriesBook(), _key()
    create = _observe(book, key, 0.0)
    assert isinstance(create, Create)
    book.failed(key, create)
    assert isinstance(_observe(book, key, 1.0), Create)   # tried again as a first occurrence
    book.created(key, Create("e", NS, 1.0, 1, 1.0, "note", "Warning"), 1.0)
    patch = _observe(book, key, 2.0)
    assert isinstance(patch, Patch)
    book.failed(key, patch)
    assert book.due(2.0 + PATCH_INTERVAL) == [(key, Patch("e", NS, 2, 2.0))]


def test_a_gone_object_is_created_again_with_the_whole_series() -> None:
    book, key = SeriesBook(), _key()
    create = _observe(book, key, 0.0, "e1")
    assert isinstance(create, Create)
    book.created(key, create, 0.0)
    _observe(book, key, 5.0)
    assert book.gone(key, "e2") == Create("e2", NS, 0.0, 2, 5.0, "note", "Warning")


@pytest.mark.parametrize(("note", "limit", "expected"), [
    ("short", 1024, "short"),
    ("x" * 1025, 1024, "x" * 1024),
    ("é" * 600, 1024, "é" * 512),          # 2 bytes each: cut on a character boundary
    ("aé", 2, "a"),
])
def test_note_is_cut_to_the_apiservers_byte_limit(note: str, limit: int, expected: str) -> None:
    assert truncate_note(note, limit) == expected


# -- the API edge, against events.k8s.io routes ------------------------------------------------------------
@pytest.fixture()
def srv() -> Iterator[ReplayAPIServer]:
    with ReplayAPIServer() as s:
        yield s


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _actions(srv: ReplayAPIServer, clock: Clock) -> KubeActions:
    from kubernetes import client

    return KubeActions(client.ApiClient(client.Configuration(host=srv.url)), NODE, wall=clock)


def test_the_routes_refuse_what_the_apiserver_refuses() -> None:
    """The synthetic routes are not a no-op: a core/v1-style body and a series of one are refused."""
    core_style = load_exchange("events-create-evictpodsuccess")["request"]["body"]
    assert {f for f, _ in create_errors(core_style)} == {"eventTime", "reportingController", "action"}
    assert ("series.count", "Invalid value: \"\": should be at least 2") in create_errors(
        {"series": {"count": 1, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}})


def test_an_eviction_event_is_events_k8s_io_with_koordlets_reason_and_note(srv: ReplayAPIServer) -> None:
    events = EventsAPI(srv, (NS,))
    actions = _actions(srv, Clock())
    note = watermark_message(NODE, 8077889699).format(name="be-evict-ok")
    assert actions.event(POD, "evictPodSuccess", note, "Evict")
    ((_, stored),) = events.stored.items()
    # What koordlet recorded for the same eviction, as a core/v1 Event (tests/fixtures/README.md).
    koordlet = load_exchange("events-create-evictpodsuccess")["request"]["body"]
    assert (stored["reason"], stored["type"], stored["note"]) == (koordlet["reason"], koordlet["type"],
                                                                  koordlet["message"])
    assert stored["regarding"] == {k: v for k, v in koordlet["involvedObject"].items() if k != "resourceVersion"}
    assert stored["apiVersion"] == "events.k8s.io/v1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000000Z", stored["eventTime"])
    assert stored["metadata"]["name"].startswith("be-evict-ok.")
    assert "series" not in stored


def test_repeats_patch_one_objects_series_instead_of_creating_more(srv: ReplayAPIServer) -> None:
    events = EventsAPI(srv, (NS,))
    clock = Clock()
    actions = _actions(srv, clock)
    for i in range(5):                               # a PDB refusing the same pod every second
        clock.now = T0 + i
        assert actions.event(POD, "evictPodFail", f"refused, try {i}", "Evict")
    assert len(events.creates()) == 1 and len(events.stored) == 1
    (patch,) = events.patches()                      # the first repeat at once; the rest folded
    assert patch.headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert patch.body == {"series": {"count": 2, "lastObservedTime": "2026-09-21T14:13:21.000000Z"}}
    clock.now = T0 + 4 + PATCH_INTERVAL
    actions.flush_events()
    ((_, stored),) = events.stored.items()
    assert stored["series"] == {"count": 5, "lastObservedTime": "2026-09-21T14:13:24.000000Z"}
    assert stored["note"] == "refused, try 0"       # the first occurrence's note, as client-go keeps it
    assert len(events.creates()) == 1


def test_an_expired_event_is_created_again_with_its_series(srv: ReplayAPIServer) -> None:
    events = EventsAPI(srv, (NS,))
    clock = Clock()
    actions = _actions(srv, clock)
    assert actions.event(POD, "evictPodFail", "refused", "Evict")
    ((ns, first_name),) = events.stored
    events.expire(ns, first_name)
    clock.now = T0 + 1
    assert actions.event(POD, "evictPodFail", "refused", "Evict")
    assert [r.path.rsplit("/", 1)[1] for r in events.patches()] == [first_name]   # 404
    ((_, name), stored), = events.stored.items()
    assert name != first_name
    assert stored["series"]["count"] == 2 and stored["eventTime"] == "2026-09-21T14:13:20.000000Z"


def test_other_pods_and_reasons_get_their_own_events(srv: ReplayAPIServer) -> None:
    events = EventsAPI(srv, (NS, "koordinator-system"))
    actions = _actions(srv, Clock())
    other = {**POD, "name": "be-batch-0", "uid": "x"}
    cm = {"kind": "ConfigMap", "apiVersion": "v1", "namespace": "koordinator-system", "name": "slo-controller-config",
          "uid": "c"}
    for regarding, reason, action in ((POD, "evictPodFail", "Evict"), (POD, "evictPodSuccess", "Evict"),
                                      (other, "evictPodSuccess", "Evict"), (cm, "ColocationCfgInvalid", "LoadConfig")):
        assert actions.event(regarding, reason, "n", action)
    assert len(events.stored) == 4 and events.patches() == []


def test_a_long_note_is_cut_and_accepted(srv: ReplayAPIServer) -> None:
    events = EventsAPI(srv, (NS,))
    assert _actions(srv, Clock()).event(POD, "evictPodFail", "ü" * 2000, "Evict")
    ((_, stored),) = events.stored.items()
    assert len(stored["note"].encode()) == 1024


def test_a_refused_event_is_logged_and_false(srv: ReplayAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    events = EventsAPI(srv, (NS,))
    assert not _actions(srv, Clock()).event(POD, "", "n", "Evict")      # reason is required
    assert events.stored == {}
    assert "cannot record event  on Pod colo-demo/be-evict-ok: HTTP 422: " in caplog.text
    assert "reason: Required value" in caplog.text


def test_an_unreachable_api_server_costs_one_call_per_cycle() -> None:
    import urllib3
    from kubernetes import client

    hole = Blackhole()                              # accepts and never answers: each call costs its timeout
    try:
        cfg = client.Configuration(host=hole.url)
        cfg.retries = urllib3.Retry(total=3, connect=0)
        actions = KubeActions(client.ApiClient(cfg), NODE, timeout=0.5, connect_timeout=0.5, wall=Clock())
        assert not actions.event(POD, "evictPodFail", "n", "Evict")
        assert actions.unreachable is not None
        assert not actions.event(POD, "evictPodSuccess", "n", "Evict")   # no second try this cycle
        assert len(hole.accepted) == 1
        actions.begin_cycle()
        assert actions.unreachable is None
        assert not actions.event(POD, "evictPodSuccess", "n", "Evict")   # the next cycle tries again, once
        assert len(hole.accepted) == 2
    finally:
        hole.close()

