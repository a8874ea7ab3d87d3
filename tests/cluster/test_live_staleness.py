"""The live source when the network or the API server misbehaves (issue 34 §1), through a TCP proxy
(harness/tcp_proxy.py) between the source and the replay server (harness/apiserver.py) that passes, resets, or drops
silently. Time is compressed ten times (``Timing().scaled(0.1)``): a minute of trouble lasts 6 s, the watch's
server-side timeout is 4-5 s and its read deadline at most 6.5 s. bench/live_staleness.py measures the same on a
real kube-apiserver at full scale (docs/benchmarks.md).

- A silent partition (a blackhole that answers for the peer) is said within the read deadline, per kind, as "no
  data", the cache's age grows, /readyz goes 503 past --max-cache-age, and once the link is back the kinds relist
  and pick up what changed meanwhile, each saying for how long it had no data.
- A minute of resets, or of blackhole, is at most ten lines: one per kind, one summary; no urllib3 warning, no
  traceback.
- A reset storm does not grow the open files.
- After an outage, a 429 with Retry-After 1 is asked again a second later, not after the outage's backoff.
- A quiet kind's watch is never cut: the replay server, as kube-apiserver, ends it at its timeoutSeconds.
"""

from __future__ import annotations

import copy
import gc
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import urllib3

from harness.apiserver import ReplayAPIServer, Route, load_exchange
from harness.tcp_proxy import Mode, TCPProxy
from tests.cluster.test_live import (
    NS,
    PC,
    WEBHOOK_LISTS,
    lists,
    serve_webhook_kinds,
    wait_for,
    watches,
    write_kubeconfig,
)
from tests.serving import free_port, run_server
from webhook.cluster.freshness import NO_DATA, STALE, Timing
from webhook.cluster.live import LiveSource, _failure
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.tls.certs import ensure_localhost

FAST = Timing().scaled(0.1)    # a minute in 6 s
MINUTE = 60 * 0.1
LOGGER = "webhook.cluster.live"


class Lines(logging.Handler):
    """Every record at INFO and above, of every logger, as an operator's log would show it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self.guard:
            self.records.append(record)

    def since(self, n: int) -> list[logging.LogRecord]:
        with self.guard:
            return self.records[n:]

    def mark(self) -> int:
        with self.guard:
            return len(self.records)


@pytest.fixture()
def lines() -> Iterator[Lines]:
    """Every line at INFO and above, whatever levels earlier tests of the worker left (``audit`` quiets
    ``webhook.admission``)."""
    handler = Lines()
    root = logging.getLogger()
    loggers = [root, logging.getLogger("webhook.admission"), logging.getLogger(LOGGER)]
    levels = [lg.level for lg in loggers]
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    for lg in loggers[1:]:
        lg.setLevel(logging.NOTSET)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def settled(state: ClusterState) -> None:
    """Every kind synced, and its line logged (the state is marked synced a moment before the line)."""
    wait_for(lambda: state.ready, what="first sync")
    time.sleep(0.3)


@contextmanager
def behind_proxy(api: ReplayAPIServer, state: ClusterState, folder: Path, timing: Timing = FAST,
                 ca: Path | None = None) -> Iterator[tuple[LiveSource, TCPProxy]]:
    scheme = api.url.split(":", 1)[0]
    with TCPProxy(("127.0.0.1", int(api.url.rsplit(":", 1)[1]))) as proxy:
        kubeconfig = write_kubeconfig(folder, f"{scheme}://127.0.0.1:{proxy.port}", ca)
        src = LiveSource(state, kubeconfig=str(kubeconfig), timing=timing)
        src.start()
        try:
            yield src, proxy
        finally:
            proxy.mode = "pass"
            src.stop(timeout=3)


def messages(records: list[logging.LogRecord]) -> list[str]:
    return [f"{r.levelname} {r.getMessage()}" for r in records]


def labelled_namespaces(label: dict[str, str]) -> dict[str, Any]:
    """The recorded namespace list with a label added to colo-demo, as a change made during the fault (derived)."""
    body: dict[str, Any] = copy.deepcopy(load_exchange("namespaces-list")["response"]["body"])
    for ns in body["items"]:
        if ns["metadata"]["name"] == "colo-demo":
            ns["metadata"].setdefault("labels", {}).update(label)
    body["metadata"]["resourceVersion"] = "400"
    return body


# -- a silent partition ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("partition", [MINUTE, 2.0], ids=["a-minute", "shorter-than-the-deadline"])
def test_a_silent_partition_is_said_measured_and_mended(tmp_path: Path, lines: Lines, partition: float) -> None:
    """The link blackholed (no FIN, no RST, the proxy answering for the API server): every kind says "no data"
    within its read deadline, its age grows past --max-cache-age and /readyz goes 503. The connections frozen by
    the fault stay frozen after it (a flow the network forgot): the kinds relist on new ones and pick up the label
    set on colo-demo during the fault (or, after a partition shorter than the deadline, once the link is back),
    each in one line saying for how long it had no data."""
    with ReplayAPIServer(speed=20) as api:
        serve_webhook_kinds(api)
        state = ClusterState(WEBHOOK_KINDS)
        state.max_age = 3 * FAST.watch_timeout
        with behind_proxy(api, state, tmp_path) as (src, proxy):
            wait_for(lambda: state.ready, what="first sync")
            time.sleep(0.5)
            assert state.not_ready_reason() is None and max(state.ages(time.monotonic()).values()) < 1
            mark, before = lines.mark(), {k: s.lists for k, s in src.status().items()}
            proxy.mode = "drop"
            dropped = time.monotonic()
            label = {"colo.example/changed": "true"}
            labelled = Route(method="GET", path=NS, status=200, body=labelled_namespaces(label), watch=False)
            if partition < FAST.longest_silence:
                time.sleep(partition)
                proxy.mode = "pass"
                api.routes.insert(0, labelled)   # changed once the link is back
            else:
                time.sleep(0.3 * MINUTE)
                api.routes.insert(0, labelled)   # changed 18 s (scaled: 1.8 s) into the fault
            def said_now() -> list[str]:
                return [m for m in messages(lines.since(mark)) if " no data from the API server " in m]

            # Each kind says it once its own (jittered) deadline passes: wait for every line, not the first state.
            wait_for(lambda: len({m.split(":")[0] for m in said_now()}) == len(WEBHOOK_KINDS),
                     timeout=FAST.longest_silence + 1.5, what="every kind to notice its silent watch")
            noticed = time.monotonic() - dropped
            assert noticed <= FAST.longest_silence + 0.5
            assert all(s.silent or s.lists > before[k] for k, s in src.status().items())
            said = said_now()
            assert sorted(m.split(":")[0] for m in said) == sorted(f"WARNING {k}" for k in WEBHOOK_KINDS)
            assert all(m.endswith("and relisting") for m in said)
            if partition >= FAST.longest_silence:
                wait_for(lambda: (state.not_ready_reason() or "").startswith(STALE), timeout=state.max_age,
                         what="/readyz 503 past --max-cache-age")
                assert min(state.ages(time.monotonic()).values()) > state.max_age
                time.sleep(max(0.0, dropped + partition - time.monotonic()))
                proxy.mode = "pass"
            back = time.monotonic()
            wait_for(lambda: (state.namespace_labels("colo-demo") or {}).get("colo.example/changed"),
                     timeout=FAST.list_read_timeout + 3, what="the change made during the fault")
            assert time.monotonic() - back <= FAST.list_read_timeout + FAST.connect_timeout + 1.5
            wait_for(lambda: state.not_ready_reason() is None, what="ready again")
            wait_for(lambda: all(s.failing is None for s in src.status().values()), what="every kind current")
            time.sleep(0.3)
        out = messages(lines.since(mark))
        for kind in WEBHOOK_KINDS:
            current = [m for m in out if m.startswith(f"INFO {kind}: current again after ")]
            assert len(current) == 1, out
            assert " without data: relisted " in current[0]
        assert not [m for m in out if "cannot reach" in m]   # silence is not "cannot reach"
        assert len(out) <= 2 * len(WEBHOOK_KINDS) + 2, out


# -- a minute of trouble: the log -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["reset", "drop"])
def test_a_minute_of_trouble_is_at_most_ten_lines(tmp_path: Path, lines: Lines, mode: Mode) -> None:
    """While the API server resets every connection (or the link is a blackhole), each kind says so once and the
    source sums up once a minute; urllib3 says nothing (no retries of its own), nothing logs a traceback. When it
    answers again, each kind says so once."""
    with ReplayAPIServer(speed=20) as api:
        serve_webhook_kinds(api)
        state = ClusterState(WEBHOOK_KINDS)
        with behind_proxy(api, state, tmp_path) as (src, proxy):
            settled(state)
            mark = lines.mark()
            errors_before = sum(s.errors for s in src.status().values())
            proxy.mode = mode
            # A minute from when the fault shows: at once for resets, a read deadline later for a blackhole.
            time.sleep(MINUTE + 0.8 + (FAST.longest_silence if mode == "drop" else 0.0))
            minute = lines.since(mark)
            attempts = sum(s.errors for s in src.status().values()) - errors_before
            proxy.mode = "pass"
            wait_for(lambda: all(s.failing is None for s in src.status().values()),
                     timeout=FAST.list_read_timeout + 3, what="every kind back")
            time.sleep(0.3)
            after = lines.since(mark + len(minute))
    said = messages(minute)
    assert len(said) <= 10, said
    assert attempts >= (50 if mode == "reset" else len(WEBHOOK_KINDS)), attempts   # many failures, few lines
    assert not [r for r in minute if r.name.startswith("urllib3") or r.exc_info]
    summaries = [m for m in said if m.startswith("WARNING API server at ")]
    assert len(summaries) == 1 and f"{len(WEBHOOK_KINDS)} of {len(WEBHOOK_KINDS)} kinds failing now" in summaries[0]
    reason = "connection reset" if mode == "reset" else NO_DATA
    assert f"({reason} " in summaries[0]
    for kind in WEBHOOK_KINDS:
        mine = [m for m in said if m.startswith(f"WARNING {kind}: ")]
        assert len(mine) == 1, said
        assert (" no data " in mine[0]) == (mode == "drop") and ("cannot reach" in mine[0]) == (mode == "reset")
    assert len(said) == len(WEBHOOK_KINDS) + 1   # nothing else
    back = [m for m in messages(after) if not m.startswith("WARNING API server at ")]   # a summary may come yet
    for kind in WEBHOOK_KINDS:
        assert len([m for m in back if m.startswith(f"INFO {kind}: ")]) == 1, back
    assert len(back) == len(WEBHOOK_KINDS), back


def test_a_reset_storm_does_not_grow_the_open_files(tmp_path: Path, cert_dir: Path) -> None:
    """Every failed attempt's connection is closed as it fails, not left to the cyclic garbage collector: with the
    collector off (as between its rare full runs in a quiet process), a storm of some hundred resets of TLS
    connections leaves the open files where they were. (Before: urllib3's frames held each TLS socket whose
    handshake was reset in a reference cycle, and the open files grew by one a failure.)"""
    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    certs, _ = ensure_localhost(cert_dir)
    with ReplayAPIServer(speed=20, tls=(certs.cert, certs.key)) as api:
        serve_webhook_kinds(api)
        state = ClusterState(WEBHOOK_KINDS)
        with behind_proxy(api, state, tmp_path, ca=certs.ca_cert) as (src, proxy):
            wait_for(lambda: state.ready, what="first sync")
            time.sleep(0.3)
            gc.collect()
            gc.disable()
            try:
                before = open_files()
                errors = sum(s.errors for s in src.status().values())
                proxy.mode = "reset"
                most = before
                deadline = time.monotonic() + 3.0
                while time.monotonic() < deadline:
                    most = max(most, open_files())
                    time.sleep(0.02)
                failed = sum(s.errors for s in src.status().values()) - errors
            finally:
                gc.enable()
    assert failed >= 100
    assert most <= before + 2, (before, most)


# -- the comeback --------------------------------------------------------------------------------------------------
def storage_initializing() -> dict[str, Any]:
    """The Status of a 429 while the watch cache initializes (k8s.io/apiserver/pkg/storage/cacher: NewTooManyRequests
    ("storage is (re)initializing", 1)), derived from the recorded eviction 429's shape."""
    body: dict[str, Any] = copy.deepcopy(load_exchange("eviction-pdb-blocked-429")["response"]["body"])
    body.update(message="storage is (re)initializing", reason="TooManyRequests",
                details={"retryAfterSeconds": 1}, code=429)
    return body


def test_after_an_outage_retry_after_is_honoured(tmp_path: Path, lines: Lines) -> None:
    """The API server away long enough for the backoff to count a dozen failures, then back saying "429 storage
    is (re)initializing, Retry-After: 1" twice: the kind is listed about two seconds later, not after the 30 s the
    outage's count would have made it wait. With the shipped timing."""
    port = free_port()
    state = ClusterState(("PriorityClass",))
    src = LiveSource(state, kubeconfig=str(write_kubeconfig(tmp_path, f"http://127.0.0.1:{port}")))
    src.start()
    try:
        wait_for(lambda: src.status()["PriorityClass"].errors >= 12, timeout=20, what="an outage's failures")
        with ReplayAPIServer(port=port) as api:
            api.add(Route(method="GET", path=PC, status=429, body=storage_initializing(), watch=False, times=2,
                          headers={"Retry-After": "1"}))
            api.add_exchange("priorityclasses-list")
            api.add_watch(PC, [])
            wait_for(lambda: state.ready, timeout=10, what="the list after the 429s")
            first_429, listed = lists(api, PC)[0], api.requests_to("GET", PC)
            took = [r.at for r in listed]
            assert [r.query.get("watch") for r in listed[:3]] == [None, None, None]
            assert 1.0 <= took[1] - took[0] <= 1.5 and 1.0 <= took[2] - took[1] <= 1.5
            assert first_429["limit"] == "100"
    finally:
        src.stop(timeout=3)
    said = [m for m in messages(lines.records) if m.startswith(("WARNING PriorityClass", "INFO PriorityClass"))]
    assert said[0].startswith("WARNING PriorityClass: not synced: cannot reach the API server at http://127.0.0.1:")
    assert "Connection refused; retrying" in said[0]
    assert said[1] == ("WARNING PriorityClass: not synced: HTTP 429 Too Many Requests: storage is (re)initializing; "
                       "retrying")
    assert said[2].startswith("INFO PriorityClass: synced 6 objects (resourceVersion 345) after ")
    assert len(said) == 3


# -- quiet kinds ------------------------------------------------------------------------------------------------------
def test_a_quiet_kind_is_never_cut(tmp_path: Path, lines: Lines) -> None:
    """No event, no bookmark for three watch timeouts: the server ends each watch at its timeoutSeconds, the next
    one resumes from the same resourceVersion, nothing is relisted or said, and the age stays under the
    deadline."""
    with ReplayAPIServer(speed=20) as api:
        serve_webhook_kinds(api)
        state = ClusterState(WEBHOOK_KINDS)
        timing = Timing(watch_timeout=1, read_margin=0.5, list_read_timeout=1)
        with behind_proxy(api, state, tmp_path, timing) as (src, _):
            settled(state)
            mark = lines.mark()
            oldest = 0.0
            deadline = time.monotonic() + 4.5
            while time.monotonic() < deadline:
                oldest = max(oldest, *state.ages(time.monotonic()).values())
                time.sleep(0.05)
            assert oldest < timing.longest_silence
            for _, path in WEBHOOK_LISTS.values():
                assert len(lists(api, path)) == 1
                assert len(watches(api, path)) >= 3
                assert len({q["resourceVersion"] for q in watches(api, path)}) == 1
                assert {q["timeoutSeconds"] for q in watches(api, path)} <= {"1"}
            assert all(s.errors == 0 for s in src.status().values())
        assert lines.since(mark) == []


# -- one reason however it is worded --------------------------------------------------------------------------
def _reset(errno_: int, text: str) -> ConnectionError:
    return ConnectionResetError(errno_, text)


@pytest.mark.parametrize("exc", [
    urllib3.exceptions.ProtocolError("Connection aborted.", _reset(104, "Connection reset by peer")),
    urllib3.exceptions.ProtocolError("Connection broken: ConnectionResetError(104, 'Connection reset by peer')",
                                     _reset(104, "Connection reset by peer")),
    urllib3.exceptions.ProtocolError("Response ended prematurely"),
    urllib3.exceptions.ProtocolError("Connection aborted.", BrokenPipeError(32, "Broken pipe")),
    urllib3.exceptions.MaxRetryError(None, "/api/v1/namespaces?watch=true&resourceVersion=381",  # type: ignore[arg-type]  # urllib3 wants a pool; none here
                                     urllib3.exceptions.ProtocolError("Connection aborted.",
                                                                      _reset(104, "Connection reset by peer"))),
], ids=["aborted", "broken", "ended-prematurely", "broken-pipe", "wrapped-with-its-url"])
def test_every_wording_of_a_reset_is_one_reason(exc: BaseException) -> None:
    failure = _failure(exc, "https://10.96.0.1:443", 3.0)
    assert failure.reason == "connection reset" and not failure.answered
    assert failure.text.startswith("cannot reach the API server at https://10.96.0.1:443: ")
    assert "resourceVersion" not in failure.text


@pytest.mark.parametrize(("exc", "reason"), [
    (urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out."), NO_DATA),  # type: ignore[arg-type]  # urllib3 wants a pool
    (urllib3.exceptions.ConnectTimeoutError(None, "timed out"), NO_DATA),
    (urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection "  # type: ignore[arg-type]  # urllib3 wants a connection
                                           "refused"), "NewConnectionError"),
])
def test_timeouts_are_silence(exc: BaseException, reason: str) -> None:
    failure = _failure(exc, "https://10.96.0.1:443", 76.2)
    assert failure.reason == reason
    if reason == NO_DATA:
        assert failure.text == "no data from the API server at https://10.96.0.1:443 for 76 s" and failure.silent


# -- /readyz and the metrics, through the real server --------------------------------------------------------------
def test_readyz_and_the_metrics_say_how_old_the_cache_is(tmp_path: Path, cert_dir: Path, lines: Lines) -> None:
    """A live state whose kinds were last current 10 s and 200 s ago: the metrics port shows each age and when
    each was listed; with --max-cache-age 180 /readyz is 503 naming the old kind (and says so once in the log),
    reviews are still answered; current again, /readyz is 200."""
    state = ClusterState(("PriorityClass", "Namespace"))
    now, wall = time.monotonic(), time.time()
    for kind, age in (("PriorityClass", 10.0), ("Namespace", 200.0)):
        state.replace(kind, [])
        state.mark_synced(kind)
        state.mark_listed(kind, now - age, wall - age)
    state.max_age = 180.0
    with run_server(state, cert_dir) as web, web.client() as http:
        metrics = web.metrics()
        ages = {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                if line.startswith("colocation_webhook_cache_age_seconds{")}
        assert ages.keys() == {"PriorityClass", "Namespace"}
        assert 10 <= ages["PriorityClass"] < 20 and 200 <= ages["Namespace"] < 210
        synced = {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                  if line.startswith("colocation_webhook_cache_last_sync_timestamp_seconds{")}
        assert synced == pytest.approx({"PriorityClass": wall - 10, "Namespace": wall - 200}, abs=0.01)
        for _ in range(3):
            r = http.get("/readyz")
            assert r.status_code == 503
        assert r.text.startswith("cluster state stale: Namespace (no data for 2")
        assert r.text.endswith("; unready while older than 180 s (--max-cache-age)")
        state.mark_current("Namespace", time.monotonic())
        assert http.get("/readyz").status_code == 200
    said = [m for m in messages(lines.records) if m.split(" ", 1)[1].startswith("/readyz: ")]
    assert len(said) == 2 and said[0].startswith("WARNING /readyz: unready: cluster state stale: Namespace")
    assert said[1] == "INFO /readyz: the cluster state is current again"


def test_a_folder_state_has_no_age(cert_dir: Path, example_state: ClusterState) -> None:
    """A folder is the truth it holds: no age, and --max-cache-age never makes it unready."""
    example_state.max_age = 0.001
    with run_server(example_state, cert_dir) as web, web.client() as http:
        assert "colocation_webhook_cache_age_seconds{" not in web.metrics()
        assert http.get("/readyz").text == "ok"


def test_a_middlebox_that_cuts_quiet_watches_leaves_the_cache_current(tmp_path: Path, lines: Lines) -> None:
    """A proxy that resets a quiet connection after a second (HAProxy's "timeout client", shorter than the
    server's timeoutSeconds): each cut is one reconnect from the same resourceVersion, which the API server answers
    with whatever came after it, so the cache stays current, /readyz stays 200 and nothing is said."""
    with ReplayAPIServer(speed=1) as api:
        api.add_exchange("priorityclasses-list")
        api.add(Route(method="GET", path=PC, status=200, body_lines=[], reset=True, close_after=1.0))
        state = ClusterState(("PriorityClass",))
        state.max_age = 2.0
        with behind_proxy(api, state, tmp_path, Timing(watch_timeout=30, read_margin=5, backoff_initial=0.1)) as (src, _):
            settled(state)
            mark = lines.mark()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                assert state.not_ready_reason() is None
                time.sleep(0.05)
            status = src.status()["PriorityClass"]
            assert status.lists == 1 and status.watches >= 4 and status.errors >= 3
            assert {q["resourceVersion"] for q in watches(api, PC)} == {"345"}
        assert lines.since(mark) == []
