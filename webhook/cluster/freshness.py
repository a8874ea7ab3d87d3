"""How fresh the live source's cache is, and what to do about it: pure, no I/O and no clock of its own (callers
pass ``now``, a ``time.monotonic()`` reading, and the wall clock where a line names a time; jitter comes in as a
uniform number in [0, 1)).

- ``Timing``: the watch's server-side ``timeoutSeconds`` (jittered) and the read deadline just above it, the
  list's deadline, the backoff's figures and the summary's period. A watch that gets no byte for its deadline is
  dead: the API server ends every healthy watch at its ``timeoutSeconds`` (docs/benchmarks.md, "bench/
  live_staleness.py"), so a quiet kind is never cut, and a silent partition is seen within ``watch_timeout ×
  (1 + watch_jitter) + read_margin`` seconds of the last byte (75 s by default).
- ``Failure``: a failed attempt as a class (``reason``), which is what makes two failures "the same": an
  ECONNRESET that urllib3 words two ways is one reason.
- ``Backoff``: how long to wait before the next attempt.
- ``KindReport``: which failures and recoveries of one kind are worth a log line.
- ``Outage``: the source-wide counts behind the periodic summary line.
- ``stale_reason``: readiness after ``--max-cache-age``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MAX_CACHE_AGE", "NO_DATA", "STALE", "Backoff", "Failure", "KindReport", "Outage", "Summary", "Timing",
           "failed_line", "recovered_line", "seconds", "stale_reason", "summary_line"]

NO_DATA = "no data"   # the reason of a read deadline passed with no byte: the connection may be dead
STALE = "cluster state stale: "   # how the /readyz reason of a cache older than --max-cache-age begins
MAX_CACHE_AGE = 180.0   # s, serve --max-cache-age's default: docs/availability.md, "A cache that falls behind"


@dataclass(frozen=True, slots=True)
class Timing:
    """The live source's durations, in seconds. Tests and benchmarks scale them down; the defaults are what
    ``serve`` and the agent run with (docs/cluster-state.md, "live: list + watch")."""

    # Server-side timeoutSeconds of a watch, drawn from [watch_timeout, watch_timeout × (1 + watch_jitter)): the
    # kinds' and the replicas' watches end apart, as client-go's reflector draws its own from [5 min, 10 min)
    # (k8s.io/client-go/tools/cache/reflector.go, ListAndWatch: minWatchTimeout × (1 + rand)). Shorter than
    # client-go's, because the read deadline that notices a dead watch must sit just above it.
    watch_timeout: int = 45
    watch_jitter: float = 1 / 3
    # No byte for timeoutSeconds + read_margin: the API server would have ended the watch by then, so the
    # connection is dead (a blackhole, a middlebox that answers for a vanished peer).
    read_margin: float = 15.0
    connect_timeout: float = 5.0
    list_read_timeout: float = 30.0   # no byte of a list's answer for this long: relist
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    reconnect_max: float = 0.8        # the longest wait (before jitter) to try an unreachable API server again
    summary_every: float = 60.0       # the period of the summary line while any kind is failing

    def watch_seconds(self, u: float) -> int:
        """The timeoutSeconds of one watch, ``u`` uniform in [0, 1)."""
        return max(1, int(self.watch_timeout * (1 + self.watch_jitter * u)))

    def watch_deadline(self, timeout_seconds: int) -> float:
        """The read deadline of a watch asked to end after ``timeout_seconds``."""
        return timeout_seconds + self.read_margin

    @property
    def longest_silence(self) -> float:
        """The longest a dead watch can go unnoticed after its last byte."""
        return self.watch_deadline(math.ceil(self.watch_timeout * (1 + self.watch_jitter)))

    def delay(self, failures: int, unreachable: bool, u: float) -> float:
        """Capped exponential backoff with jitter (0.8..1.2), so restarted replicas do not retry in step. An API
        server that cannot be reached (refused, reset, silent: a restart, a failover) costs nothing to try again:
        the wait stays under ``reconnect_max``, so the watch is back within about a second of the server answering.
        One that answers with an error (403, 500) backs off to ``backoff_max``."""
        cap = min(self.backoff_max, self.reconnect_max) if unreachable else self.backoff_max
        base = min(cap, self.backoff_initial * 2.0 ** min(64, max(0, failures - 1)))
        return base * (0.8 + 0.4 * u)

    def scaled(self, factor: float) -> Timing:
        """Every duration times ``factor`` (tests, benchmarks: a minute in a few seconds); timeoutSeconds is
        whole seconds, at least 1, as the API server takes it."""
        return Timing(watch_timeout=max(1, round(self.watch_timeout * factor)), watch_jitter=self.watch_jitter,
                      read_margin=self.read_margin * factor, connect_timeout=self.connect_timeout * factor,
                      list_read_timeout=self.list_read_timeout * factor, backoff_initial=self.backoff_initial * factor,
                      backoff_max=self.backoff_max * factor, reconnect_max=self.reconnect_max * factor,
                      summary_every=self.summary_every * factor)


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, as the source's decisions see it."""

    reason: str                  # the class: failures with one reason are one (connection reset, HTTP 429, no data)
    text: str                    # one line saying what happened (the /readyz reason, the first log line of a reason)
    answered: bool               # the API server answered (an error status, an ERROR event): not silence, not a reset
    retry_after: float | None = None   # what the answer asked for (Retry-After, or a Status' retryAfterSeconds)

    @property
    def silent(self) -> bool:
        """No byte within the read deadline: the connection may be dead, so the kind relists (its watch's
        resourceVersion proves nothing about what it missed)."""
        return self.reason == NO_DATA


class Backoff:
    """When to try again: ``Timing.delay`` over the failures in a row, where the count starts over when the
    failure changes kind (nothing answered → answered with an error, or back) and an answer's Retry-After is
    honoured. Otherwise an apiserver that comes back from an outage saying ``429 storage is (re)initializing,
    Retry-After: 1`` would be asked again only after the outage's count of failures had grown the wait to 30 s."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.failures = 0
        self.answered: bool | None = None

    def failed(self, failure: Failure, u: float) -> float:
        """The wait after ``failure``, ``u`` uniform in [0, 1)."""
        if self.answered is not None and failure.answered != self.answered:
            self.failures = 0
        self.answered = failure.answered
        self.failures += 1
        if failure.retry_after is not None:
            # Never sooner than asked (jitter upwards only), never past our own cap: the answer knows best how
            # soon, and a far Retry-After must not park a kind longer than any other failure would.
            return min(max(0.0, failure.retry_after), self.timing.backoff_max) * (1.0 + 0.2 * u)
        return self.timing.delay(self.failures, not failure.answered, u)

    def succeeded(self) -> None:
        self.failures = 0
        self.answered = None


class KindReport:
    """Which of one kind's failures and recoveries are worth a log line: one when it goes bad, one more only when
    the reason changes (not for each attempt), and one when it recovers, saying for how long. A single failure of
    the connection that the next attempt mends (a pooled connection the server had closed) is no line; silence
    (the read deadline) and an answered error are said at once. A kind that goes bad again for a reason it gave
    less than ``quiet`` seconds ago says nothing until that has passed (nor about the recovery that follows): a
    flapping connection logs one pair of lines per ``quiet`` seconds, and the summary counts the rest."""

    def __init__(self, quiet: float) -> None:
        self.quiet = quiet
        self.bad_since: float | None = None   # when the current run of failures began
        self.run = 0                          # failures in the run
        self.said: str | None = None          # the reason said (or held back) last in the run
        self.spoken = False                   # whether the run got a line (then its recovery gets one too)
        self.silent = False                   # whether the run has been a silence (then the kind relists)
        self._last_line: dict[str, float] = {}

    @property
    def failing(self) -> bool:
        return self.bad_since is not None

    def failed(self, failure: Failure, now: float) -> bool:
        """Note ``failure``; whether to log it."""
        self.run += 1
        if self.bad_since is None:
            self.bad_since = now
        self.silent = self.silent or failure.silent
        if failure.reason == self.said:
            return False
        if self.run == 1 and not failure.answered and not failure.silent:
            return False
        self.said = failure.reason
        if not self.spoken and now - self._last_line.get(failure.reason, -math.inf) < self.quiet:
            return False
        self.spoken = True
        self._last_line[failure.reason] = now
        return True

    def recovered(self, now: float) -> tuple[float, bool] | None:
        """End the run: how long it lasted and whether it was a silence, when the run was said (None otherwise,
        and when there was no run)."""
        since, spoken, silent = self.bad_since, self.spoken, self.silent
        self.bad_since, self.run, self.said, self.spoken, self.silent = None, 0, None, False, False
        if since is None or not spoken:
            return None
        return now - since, silent


def seconds(value: float) -> str:
    """A duration as a log line says it: whole seconds (``75 s``), one decimal under ten (``0.4 s``)."""
    return f"{value:.1f} s" if value < 9.95 else f"{value:.0f} s"


def failed_line(kind: str, failure: Failure, synced: bool, resource_version: str | None) -> str:
    """The line a kind logs when it goes bad (``KindReport.failed``)."""
    if not synced:
        return f"{kind}: not synced: {failure.text}; retrying"
    then = "relisting" if failure.silent else "reconnecting"
    return f"{kind}: {failure.text}; serving the last complete state (resourceVersion {resource_version}) and {then}"


def recovered_line(kind: str, lasted: float, silent: bool, age: float | None,
                   listed: tuple[int, str] | None = None, first: bool = False) -> str:
    """The line a kind logs when it recovers from a run of failures that was said: for how long it failed, and
    after a silence for how long its state had no data (``age``: since its last event, bookmark or list).
    ``listed``: the recovery is a list (its object count and resourceVersion); ``first``: its first."""
    if listed is None:
        return f"{kind}: reconnected to the API server after {seconds(lasted)}"
    count, rv = listed
    if first:
        return f"{kind}: synced {count} objects (resourceVersion {rv}) after {seconds(lasted)} of failures"
    if silent and age is not None:
        return (f"{kind}: current again after {seconds(age)} without data: relisted {count} objects "
                f"(resourceVersion {rv})")
    return (f"{kind}: relisted {count} objects (resourceVersion {rv}); reconnected to the API server after "
            f"{seconds(lasted)}")


@dataclass(frozen=True, slots=True)
class Summary:
    since_wall: float                 # Unix time the outage began
    lasted: float
    failures: int
    by_reason: tuple[tuple[str, int], ...]   # most frequent first
    failing: tuple[tuple[str, str], ...]     # (kind, its reason now), in the source's order


class Outage:
    """The source-wide account of a run of failures, for the summary logged every ``every`` seconds while any
    kind is failing: since when, how many attempts failed, for which reasons, which kinds fail now."""

    def __init__(self, every: float, kinds: tuple[str, ...]) -> None:
        self.every = every
        self.kinds = kinds
        self.since: float | None = None
        self.since_wall = 0.0
        self.failures = 0
        self.by_reason: dict[str, int] = {}
        self.failing: dict[str, str] = {}
        self.next_at = math.inf

    def failed(self, kind: str, reason: str, now: float, wall: float) -> None:
        if self.since is None:
            self.since, self.since_wall, self.next_at = now, wall, now + self.every
        self.failures += 1
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        self.failing[kind] = reason

    def recovered(self, kind: str) -> None:
        self.failing.pop(kind, None)
        if not self.failing:
            self.since, self.failures, self.by_reason, self.next_at = None, 0, {}, math.inf

    def due(self, now: float) -> Summary | None:
        """The summary, when one is due (then the next is ``every`` seconds later)."""
        if self.since is None or now < self.next_at:
            return None
        self.next_at = now + self.every
        by_reason = tuple(sorted(self.by_reason.items(), key=lambda kv: (-kv[1], kv[0])))
        failing = tuple((k, self.failing[k]) for k in self.kinds if k in self.failing)
        return Summary(self.since_wall, now - self.since, self.failures, by_reason, failing)


def _utc(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary_line(s: Summary, host: str, kinds: int) -> str:
    """One line of an outage so far: since when, how many attempts failed and why, which kinds fail now."""
    reasons = ", ".join(f"{reason} {n}" for reason, n in s.by_reason)
    failing = ", ".join(kind for kind, _ in s.failing)
    return (f"API server at {host}: failing for {seconds(s.lasted)} (since {_utc(s.since_wall)}), "
            f"{s.failures} failed attempts ({reasons}); {len(s.failing)} of {kinds} kinds failing now: {failing}")


def stale_reason(ages: Mapping[str, float], max_age: float) -> str | None:
    """The /readyz reason when a kind's cache is older than ``max_age`` seconds, or None."""
    old = [(kind, age) for kind, age in ages.items() if age > max_age]
    if not old:
        return None
    kinds = ", ".join(f"{kind} (no data for {seconds(age)})" for kind, age in old)
    return f"{STALE}{kinds}; unready while older than {seconds(max_age)} (--max-cache-age)"
