"""Waiting for the next cycle: the interval elapses, or the kernel says memory moved.

Sources, by what the kernel offers (``--memory-notification auto``):

- ``memcg-threshold`` (cgroup v1): a threshold on the root memory cgroup's ``memory.usage_in_bytes``, registered
  through ``cgroup.event_control`` with an eventfd, as the kubelet's ``--kernel-memcg-notification`` does. The
  kernel signals crossings in both directions; a downward one is recognised (usage below the threshold) and
  ignored. The threshold is set again after every cycle (``webhook.agent.domain.memory_notify``).
- ``psi`` (cgroup v2): a PSI trigger on the kubepods cgroup's ``memory.pressure``. Without CAP_SYS_RESOURCE the
  kernel only takes triggers whose window is a multiple of 2 s (and checks them every 2 s); writes to
  ``/proc/pressure/memory`` are refused outright.
- ``memory-events`` (cgroup v2): a change of the kubepods cgroup's ``memory.events`` (high, max, oom events).
- ``sampler``: ``MemTotal − MemAvailable`` from meminfo every 100 ms, a cycle when it reaches the trigger level.
  PSI and memory.events see stalls and limits, not usage crossing a watermark, so on cgroup v2 the sampler runs
  beside them.

The full cycle still runs every ``--interval``; a notification only brings it forward.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import time
from pathlib import Path

from webhook.agent.domain.memory_notify import (
    MODES,
    SamplerGate,
    memcg_threshold,
    near_level,
    needs_rearm,
    rearm_tolerance,
)
from webhook.agent.domain.sample import used_memory
from webhook.agent.edges.collectors import CollectError, MeminfoReader
from webhook.agent.metrics import NOTIFICATION_SOURCES, AgentMetrics

log = logging.getLogger("colocation-agent")

SAMPLE_PERIOD = 0.1
RECHECK_PERIOD = 0.01
RECHECK_SECONDS = 2.0
# Tried in order: a real-time trigger (needs CAP_SYS_RESOURCE), then the 2 s window unprivileged writers get.
PSI_TRIGGERS = ("some 100000 1000000", "some 150000 2000000")
EVENTS_MIN_GAP = 0.1      # memory.events can change in storms (an OOM loop): at most one cycle per 100 ms from it
WAKE = "wake"


class MemoryWatch:
    """One epoll set over the notification sources, plus the sampler; ``wait`` returns what fired."""

    def __init__(self, cgroup_root: Path, proc_root: Path, mode: str = "auto",
                 metrics: AgentMetrics | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"--memory-notification must be one of {', '.join(MODES)}, got {mode!r}")
        self.cgroup_root = str(cgroup_root)
        self.proc_root = Path(proc_root)
        self.metrics = metrics
        self.sources: list[str] = []
        self.problems: list[str] = []         # why a source could not be used (for the log and ``describe``)
        self.psi_trigger: str | None = None
        self._epoll = select.epoll()
        self._meminfo = MeminfoReader(self.proc_root)
        self._wake_fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._epoll.register(self._wake_fd, select.EPOLLIN)
        self._memcg: _MemcgThreshold | None = None
        self._psi_fd: int | None = None
        self._events_fd: int | None = None
        self._events_last = 0.0
        self._gate: SamplerGate | None = None     # the sampler's, when it runs: the same edge trigger
        self._edge = SamplerGate()
        self._capacity = 0
        self._near = False               # usage near the level (near_level): meminfo sampled too
        self._recheck_until = 0.0        # after an early memcg notification: meminfo sampled every 10 ms
        self.fired_at: float | None = None     # when the last notification was seen (monotonic)
        v2 = os.path.exists(os.path.join(self.cgroup_root, "cgroup.controllers"))
        if mode in ("auto", "memcg-threshold") and not v2:
            self._memcg = _MemcgThreshold.open(os.path.join(self.cgroup_root, "memory"), self._epoll, self.problems)
            if self._memcg is not None:
                self.sources.append("memcg-threshold")
        if mode == "psi" or (mode == "auto" and v2):
            self._open_psi()
            self._open_events()
        if mode == "sampler" or (mode != "none" and "memcg-threshold" not in self.sources):
            self._gate = self._edge
            self.sources.append("sampler")
        if metrics is not None:
            for source in NOTIFICATION_SOURCES:
                metrics.notification_source.labels(source).set(1 if source in self.sources else 0)

    # -- sources ---------------------------------------------------------------------------------------
    def _kubepods(self) -> str | None:
        for name in ("kubepods.slice", "kubepods"):
            path = os.path.join(self.cgroup_root, name)
            if os.path.isdir(path):
                return path
        return None

    def _open_psi(self) -> None:
        kubepods = self._kubepods()
        candidates = [os.path.join(p, "memory.pressure") for p in (kubepods, self.cgroup_root) if p]
        candidates.append(str(self.proc_root / "pressure" / "memory"))
        for path in candidates:
            if not os.path.exists(path):
                continue
            for trigger in PSI_TRIGGERS:
                try:
                    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
                except OSError as exc:
                    self.problems.append(f"psi: {path}: {exc.strerror}")
                    break
                try:
                    os.write(fd, trigger.encode() + b"\0")
                    self._epoll.register(fd, select.EPOLLPRI)
                except OSError as exc:
                    os.close(fd)
                    self.problems.append(f"psi: {path}: trigger {trigger!r} refused: "
                                         f"{errno.errorcode.get(exc.errno or 0, exc.errno)}")
                    continue
                self._psi_fd, self.psi_trigger = fd, f"{path}: {trigger}"
                self.sources.append("psi")
                return

    def _open_events(self) -> None:
        kubepods = self._kubepods()
        path = os.path.join(kubepods, "memory.events") if kubepods else None
        if path is None or not os.path.exists(path):
            self.problems.append("memory-events: no kubepods memory.events")
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            self.problems.append(f"memory-events: {path}: {exc.strerror}")
            return
        try:
            os.pread(fd, 4096, 0)          # kernfs reports changes made after the last read
            self._epoll.register(fd, select.EPOLLPRI)
        except OSError as exc:              # a regular file (not cgroupfs) cannot be polled
            os.close(fd)
            self.problems.append(f"memory-events: {path}: cannot poll: {exc.strerror}")
            return
        self._events_fd = fd
        self.sources.append("memory-events")

    def describe(self) -> str:
        text = ", ".join(self.sources) or "none (interval only)"
        if self.psi_trigger:
            text += f" [psi trigger {self.psi_trigger}]"
        return text

    # -- arming ----------------------------------------------------------------------------------------
    def arm(self, level: int | None, capacity: int, seen: int | None = None) -> str | None:
        """After a cycle: the node usage at which the next cycle should come early (None: none).

        ``seen`` is the usage the cycle measured. Returns a source name when usage reached the level after
        that measurement (while the cycle ran): the next cycle is due now, not at the next crossing.
        """
        self._edge.set_level(level, capacity)
        self._capacity = capacity
        if seen is not None:
            self._edge.feed(seen)          # a cycle that saw usage over the level has dealt with this crossing
        if not self.sources:
            return None
        used = self._used()
        if used is None:
            return None
        if self._memcg is not None:
            self._memcg.arm(level, used, capacity)
        self._near = near_level(level, used, capacity)
        if self._edge.feed(used):
            return self._fired(self.sources[0])
        return None

    def _used(self) -> int | None:
        try:
            total, available = self._meminfo.read()
        except CollectError:
            return None
        return used_memory(total, available)

    # -- waiting ---------------------------------------------------------------------------------------
    def wake(self) -> None:
        """Make ``wait`` return now (safe from a signal handler)."""
        os.eventfd_write(self._wake_fd, 1)

    def wait(self, timeout: float) -> str | None:
        """Block until a source fires (its name), ``wake`` (``WAKE``), or ``timeout`` elapses (None)."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            recheck = time.monotonic() < self._recheck_until
            polling = self._gate is not None or recheck or self._near
            span = min(remaining, RECHECK_PERIOD if recheck else SAMPLE_PERIOD) if polling else remaining
            for fd, _ in self._epoll.poll(span):
                fired = self._event(fd)
                if fired is not None:
                    return self._fired(fired)
            recheck = time.monotonic() < self._recheck_until      # an event may have just started one
            if polling or recheck:
                used = self._used()
                if used is None:
                    continue
                if self._memcg is not None and self._capacity:
                    self._near = near_level(self._edge.level, used, self._capacity)
                if self._edge.feed(used):  # the sampler's find, or the memcg watch's own meminfo check near the level
                    return self._fired("sampler" if self._gate is not None else "memcg-threshold")

    def _fired(self, source: str) -> str:
        if source != WAKE:
            self.fired_at = time.monotonic()
            if self.metrics is not None:
                self.metrics.notifications.labels(source).inc()
        return source

    def _event(self, fd: int) -> str | None:
        if fd == self._wake_fd:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self._wake_fd)
            return WAKE
        if self._memcg is not None and fd == self._memcg.eventfd:
            if not self._memcg.crossed_up():
                return None
            # The watermark is on meminfo's measure: check it (one cheap read) before a full cycle. It can lag the
            # cgroup's count (page cache growth; seen 140 MB behind during an allocation right after a large
            # free), so when it is still short the agent watches meminfo every 10 ms for a while and lets the
            # threshold fire again a little higher.
            level, used = self._edge.level, self._used()
            if level is not None and used is not None and used < level:
                self._recheck_until = time.monotonic() + RECHECK_SECONDS
                self._memcg.step(self._capacity)
                return None
            return "memcg-threshold" if used is None or self._edge.feed(used) else None
        if fd == self._psi_fd:
            return "psi"
        if fd == self._events_fd:
            try:
                os.pread(fd, 4096, 0)
            except OSError as exc:  # the kubepods cgroup went away (ENODEV): the source ends, the others stay
                log.warning("memory-events: %s; no longer watched", exc.strerror)
                self._epoll.unregister(fd)
                os.close(fd)
                self._events_fd = None
                self.sources.remove("memory-events")
                return None
            now = time.monotonic()
            if now - self._events_last < EVENTS_MIN_GAP:
                return None
            self._events_last = now
            return "memory-events"
        return None

    def close(self) -> None:
        self._meminfo.close()
        if self._memcg is not None:
            self._memcg.close()
        for fd in (self._psi_fd, self._events_fd, self._wake_fd):
            if fd is not None:
                os.close(fd)
        self._epoll.close()


class _MemcgThreshold:
    """A cgroup v1 memory threshold: eventfd + ``cgroup.event_control``, re-registered when it moves."""

    def __init__(self, folder: str, usage_fd: int, epoll: select.epoll) -> None:
        self.folder = folder
        self.usage_fd = usage_fd
        self.epoll = epoll
        self.eventfd: int | None = None
        self.threshold: int | None = None

    @classmethod
    def open(cls, folder: str, epoll: select.epoll, problems: list[str]) -> _MemcgThreshold | None:
        control = os.path.join(folder, "cgroup.event_control")
        if not os.path.exists(control):
            problems.append(f"memcg-threshold: {control} does not exist")
            return None
        try:
            usage_fd = os.open(os.path.join(folder, "memory.usage_in_bytes"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            problems.append(f"memcg-threshold: {folder}/memory.usage_in_bytes: {exc.strerror}")
            return None
        watch = cls(folder, usage_fd, epoll)
        try:  # one registration now tells whether the kernel takes them here at all
            watch._register(watch.usage() + (1 << 40))
        except (OSError, ValueError) as exc:  # ValueError: a usage file that holds no number
            problems.append(f"memcg-threshold: {control}: {getattr(exc, 'strerror', None) or exc}")
            watch.close()
            return None
        return watch

    def usage(self) -> int:
        return int(os.pread(self.usage_fd, 64, 0))

    def _register(self, threshold: int) -> None:
        efd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            ctl = os.open(os.path.join(self.folder, "cgroup.event_control"), os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(ctl, f"{efd} {self.usage_fd} {threshold}".encode())
            finally:
                os.close(ctl)
            self.epoll.register(efd, select.EPOLLIN)
        except OSError:
            os.close(efd)
            raise
        old = self.eventfd
        self.eventfd, self.threshold = efd, threshold
        if old is not None:  # the new one is in place first: no moment without a threshold
            self.epoll.unregister(old)
            os.close(old)       # closing the eventfd unregisters its threshold in the kernel

    def arm(self, level: int | None, used: int, capacity: int) -> None:
        if level is None:
            return
        try:
            usage = self.usage()
            wanted = memcg_threshold(level, used, usage)
            # Usage already past the armed threshold (it fired early: the offset drifted) means it cannot fire
            # on the way up again: set anew even when the new one is close to the old.
            passed = self.threshold is not None and usage >= self.threshold
            if passed or needs_rearm(self.threshold, wanted, capacity):
                self._register(wanted)
        except (OSError, ValueError) as exc:
            log.warning("cannot set the memory cgroup threshold: %s", exc)

    def step(self, capacity: int) -> None:
        """Set the threshold just above the current usage: further growth notifies again."""
        try:
            self._register(self.usage() + rearm_tolerance(capacity))
        except (OSError, ValueError) as exc:
            log.warning("cannot set the memory cgroup threshold: %s", exc)

    def crossed_up(self) -> bool:
        """Drain the eventfd; whether usage is now at or above the threshold (not a downward crossing)."""
        if self.eventfd is not None:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_read(self.eventfd)
        try:
            return self.threshold is not None and self.usage() >= self.threshold
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        if self.eventfd is not None:
            with contextlib.suppress(OSError, ValueError):
                self.epoll.unregister(self.eventfd)
            os.close(self.eventfd)
            self.eventfd = None
        os.close(self.usage_fd)
