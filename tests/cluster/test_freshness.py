"""webhook/cluster/freshness.py, the live source's decisions as plain data: the watch's deadline, the backoff, which
failures are one reason, which lines a kind logs, the outage summary and readiness after --max-cache-age."""

from __future__ import annotations

import calendar

import pytest

from webhook.cluster.freshness import (
    NO_DATA,
    Backoff,
    Failure,
    KindReport,
    Outage,
    Summary,
    Timing,
    failed_line,
    recovered_line,
    seconds,
    stale_reason,
    summary_line,
)

RESET = Failure("connection reset", "cannot reach the API server at https://10.96.0.1:443: [Errno 104] Connection "
                "reset by peer", answered=False)
REFUSED = Failure("connection refused", "cannot reach the API server at https://10.96.0.1:443: [Errno 111] "
                  "Connection refused", answered=False)
SILENT = Failure(NO_DATA, "no data from the API server at https://10.96.0.1:443 for 76 s", answered=False)
BUSY = Failure("HTTP 429", "HTTP 429 Too Many Requests: storage is (re)initializing", answered=True, retry_after=1.0)
FORBIDDEN = Failure("HTTP 403", "HTTP 403 Forbidden: priorityclasses is forbidden", answered=True)


# -- the watch's deadline ------------------------------------------------------------------------------------
def test_a_dead_watch_is_noticed_within_90_s_of_its_last_byte() -> None:
    """The read deadline is the server's timeoutSeconds plus a margin: at most 75 s with the defaults."""
    timing = Timing()
    timeouts = {timing.watch_seconds(u / 100) for u in range(100)}
    assert min(timeouts) == 45 and max(timeouts) == 59   # jittered, so the kinds' watches end apart
    assert max(timing.watch_deadline(t) for t in timeouts) <= timing.longest_silence == 75.0 <= 90
    assert timing.list_read_timeout + timing.connect_timeout <= 90


def test_a_scaled_timing_keeps_whole_seconds_for_the_server() -> None:
    fast = Timing().scaled(0.02)
    assert fast.watch_timeout == 1 and fast.read_margin == pytest.approx(0.3)
    assert fast.summary_every == pytest.approx(1.2) and fast.reconnect_max == pytest.approx(0.016)


# -- backoff -------------------------------------------------------------------------------------------------
def test_an_unreachable_server_is_tried_again_within_a_second_and_an_erring_one_backs_off() -> None:
    timing = Timing()
    assert [round(timing.delay(n, True, 0.5), 2) for n in (1, 2, 3, 10, 60)] == [0.5, 0.8, 0.8, 0.8, 0.8]
    assert [round(timing.delay(n, False, 0.5), 2) for n in (1, 2, 3, 6, 7, 100)] == [0.5, 1, 2, 16, 30, 30]
    assert timing.delay(3, False, 0.0) == pytest.approx(1.6) and timing.delay(3, False, 0.999) < 2.4


def test_retry_after_is_honoured_whatever_the_count() -> None:
    """An outage's failures do not make the comeback wait: the 429 that says Retry-After 1 is asked again after
    1 s (to 1.2 s: jitter only upwards), not after the 30 s the count had grown to."""
    backoff = Backoff(Timing())
    for _ in range(40):
        backoff.failed(REFUSED, 0.5)
    assert backoff.failed(BUSY, 0.0) == 1.0 and backoff.failed(BUSY, 0.999) <= 1.2
    far = Failure("HTTP 503", "HTTP 503", answered=True, retry_after=3600)
    assert backoff.failed(far, 0.0) == 30.0   # never parked longer than any failure would


def test_the_count_starts_over_when_the_failure_changes_kind() -> None:
    backoff = Backoff(Timing())
    for _ in range(10):
        backoff.failed(RESET, 0.5)
    assert backoff.failed(FORBIDDEN, 0.5) == 0.5          # unreachable -> answered: from the start
    assert backoff.failed(FORBIDDEN, 0.5) == 1.0
    assert backoff.failed(RESET, 0.5) == 0.5              # and back
    backoff.succeeded()
    assert backoff.failed(FORBIDDEN, 0.5) == 0.5


# -- which lines a kind logs ------------------------------------------------------------------------------------
def _said(report: KindReport, events: list[tuple[float, Failure | None]]) -> list[object]:
    """Feed (time, failure or None for a success); what was logged: True/False per failure, the recovery's
    (lasted, silent) or None."""
    out: list[object] = []
    for now, failure in events:
        out.append(report.failed(failure, now) if failure is not None else report.recovered(now))
    return out


@pytest.mark.parametrize(("name", "events", "said"), [
    ("a dropped connection the next try mends is no line", [(0, RESET), (0.5, None)], [False, None]),
    ("a lasting reset is one line, then its recovery",
     [(0, RESET), (0.5, RESET), (1, RESET), (1.5, RESET), (60, None)], [False, True, False, False, (60, False)]),
    ("texts that differ are one reason", [(0, RESET), (1, RESET), (2, RESET)], [False, True, False]),
    ("a new reason is said", [(0, RESET), (1, RESET), (2, REFUSED), (3, REFUSED), (4, RESET)],
     [False, True, True, False, True]),
    ("silence is said at once", [(75, SILENT), (105, SILENT), (110, None)], [True, False, (35, True)]),
    ("an answered error is said at once", [(0, FORBIDDEN), (1, FORBIDDEN)], [True, False]),
    ("flapping: one pair of lines per quiet period",
     [(0, RESET), (1, RESET), (2, None), (3, RESET), (4, RESET), (5, None), (70, RESET), (71, RESET), (72, None)],
     [False, True, (2, False), False, False, None, False, True, (2, False)]),
    ("flapping for another reason is said", [(0, RESET), (1, RESET), (2, None), (3, FORBIDDEN)],
     [False, True, (2, False), True]),
])
def test_which_failures_and_recoveries_are_said(name: str, events: list[tuple[float, Failure | None]],
                                               said: list[object]) -> None:
    assert _said(KindReport(quiet=60), events) == said


def test_the_lines_a_kind_logs() -> None:
    assert failed_line("PriorityClass", SILENT, True, "345") == (
        "PriorityClass: no data from the API server at https://10.96.0.1:443 for 76 s; serving the last complete "
        "state (resourceVersion 345) and relisting")
    assert failed_line("Namespace", RESET, True, "381") == (
        "Namespace: cannot reach the API server at https://10.96.0.1:443: [Errno 104] Connection reset by peer; "
        "serving the last complete state (resourceVersion 381) and reconnecting")
    assert failed_line("ClusterColocationProfile", FORBIDDEN, False, None) == (
        "ClusterColocationProfile: not synced: HTTP 403 Forbidden: priorityclasses is forbidden; retrying")
    assert recovered_line("Namespace", 62.4, False, 63.0) == (
        "Namespace: reconnected to the API server after 62 s")
    assert recovered_line("PriorityClass", 6.2, True, 81.4, (6, "363")) == (
        "PriorityClass: current again after 81 s without data: relisted 6 objects (resourceVersion 363)")
    assert recovered_line("LimitRange", 12, False, 13, (0, "363")) == (
        "LimitRange: relisted 0 objects (resourceVersion 363); reconnected to the API server after 12 s")
    assert recovered_line("ConfigMap", 3.04, False, None, (1, "381"), first=True) == (
        "ConfigMap: synced 1 objects (resourceVersion 381) after 3.0 s of failures")
    assert [seconds(s) for s in (0.04, 9.94, 9.96, 75.4)] == ["0.0 s", "9.9 s", "10 s", "75 s"]


# -- the summary ---------------------------------------------------------------------------------------------
def test_the_outage_summary_counts_every_kind_every_period() -> None:
    kinds = ("PriorityClass", "Namespace", "LimitRange")
    outage = Outage(60, kinds)
    wall = calendar.timegm((2026, 11, 28, 12, 0, 3))
    assert outage.due(1000) is None
    for i in range(30):
        outage.failed(kinds[i % 3], "connection reset", 100 + i, wall + i)
    outage.failed("LimitRange", NO_DATA, 140, wall + 40)
    assert outage.due(159) is None
    summary = outage.due(160)
    assert summary == Summary(wall, 60, 31, (("connection reset", 30), (NO_DATA, 1)),
                              (("PriorityClass", "connection reset"), ("Namespace", "connection reset"),
                               ("LimitRange", NO_DATA)))
    assert summary_line(summary, "https://10.96.0.1:443", 3) == (
        "API server at https://10.96.0.1:443: failing for 60 s (since 2026-11-28T12:00:03Z), 31 failed attempts "
        "(connection reset 30, no data 1); 3 of 3 kinds failing now: PriorityClass, Namespace, LimitRange")
    assert outage.due(161) is None and outage.due(220) is not None    # every period while it lasts
    for kind in kinds[:2]:
        outage.recovered(kind)
    assert outage.due(280) is not None                                # one kind still failing
    outage.recovered("LimitRange")
    assert outage.due(10_000) is None                                 # over: no more summaries
    outage.failed("Namespace", "connection refused", 20_000, wall)
    assert outage.due(20_059) is None
    summary = outage.due(20_060)
    assert summary is not None and summary.failures == 1   # a new one counts from its start


# -- readiness after --max-cache-age ---------------------------------------------------------------------------
def test_stale_reason() -> None:
    assert stale_reason({"PriorityClass": 30.0, "Namespace": 179.9}, 180) is None
    assert stale_reason({"PriorityClass": 30.0, "Namespace": 200.2, "LimitRange": 181}, 180) == (
        "cluster state stale: Namespace (no data for 200 s), LimitRange (no data for 181 s); unready while older "
        "than 180 s (--max-cache-age)")
