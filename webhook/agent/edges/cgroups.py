"""Reading and writing the cgroup files the agent enforces (BE limits, BE suppression).

Builds the ``webhook.agent.domain.cgroup_limits.Folder`` trees from what the folders hold now, and applies the
planned writes one by one. A refused write (cgroup v1 ``EBUSY`` when usage is above a new memory limit,
``EINVAL`` for a quota its parent forbids, a folder that vanished) is logged and counted, never raised:
the next cycle reads the folders again and plans again.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import time
import weakref
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.agent.domain.cgroup_limits import (
    BESTEFFORT_FOLDER,
    CgroupWrite,
    Current,
    Folder,
    Limits,
    PodLimits,
    container_folder,
    container_ids,
    files,
    iter_folders,
    parse_current,
    pod_limits,
)
from webhook.agent.domain.cpuset import CPUSET_FILE
from webhook.agent.domain.sample import Layout
from webhook.agent.edges.collectors import open_read
from webhook.agent.metrics import AgentMetrics
from webhook.core.qos import is_be, is_terminal

log = logging.getLogger("colocation-agent")

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
VERIFY_SECONDS = 10.0

_WHY = {
    errno.EBUSY: "the kernel could not bring usage under the new limit",
    errno.EINVAL: "the kernel refused the value (on cgroup v1 a quota above the parent folder's)",
    errno.ENOENT: "the cgroup vanished",
    errno.EACCES: "no permission to write cgroup files",
    errno.EPERM: "no permission to write cgroup files",
    errno.EROFS: "the cgroup filesystem is mounted read-only",
}
# cpuset.cpus is refused for its own reasons (cgroup v1: a child's CPUs within its parent's, a parent's holding its
# children's; any version: CPUs that are not online).
_WHY_CPUSET = {
    errno.EACCES: "some CPUs are outside the parent folder's (cgroup v1), or no permission to write cgroup files",
    errno.EBUSY: "a folder below still holds CPUs this value drops (cgroup v1)",
    errno.EINVAL: "the kernel refused the CPUs (not online, or not a CPU list)",
    errno.ENOSPC: "no CPU left for the folder's tasks",
}


def _why(file: str, exc: OSError) -> str:
    code = exc.errno or 0
    return (_WHY_CPUSET.get(code) if file == CPUSET_FILE else None) or _WHY.get(code, exc.strerror or "error")


def _close_all(fds: dict[str, int]) -> None:
    for fd in fds.values():
        os.close(fd)
    fds.clear()


@dataclass(frozen=True, slots=True)
class WriteResult:
    write: CgroupWrite
    error: str | None = None       # errno name when refused

    @property
    def applied(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class _Seen:
    """What was read for one BE pod, reused until ``until`` while its object and folders stay the same."""

    pod: dict[str, Any]
    rel: str
    until: float
    limits: PodLimits
    folder: Folder | None                   # None: the pod asks for nothing
    paths: frozenset[str]                   # its folders (absolute), to know when a write made them stale
    files: tuple[str, ...]                  # the files read (kept open)


class CgroupFiles:
    """The cgroup files of one node layout.

    What a BE pod's folders hold is read when the pod is first seen (or its object changes), right after the
    agent wrote to one of them, and again at least every ``verify_seconds`` (spread over cycles), so a value
    changed behind the agent's back is put back within that time while a steady node costs few reads. The files
    read stay open while their pod is a BE pod on the node, and are read again with ``pread``: an open and a
    close cost several times the read (docs/benchmarks.md, "Figures behind the code's comments").
    """

    def __init__(self, layout: Layout, metrics: AgentMetrics | None = None, page_size: int = PAGE_SIZE,
                 verify_seconds: float = VERIFY_SECONDS) -> None:
        self.layout = layout
        self.metrics = metrics
        self.page_size = page_size
        self.verify_seconds = verify_seconds
        self.files = files(layout.version)
        self._refused: dict[tuple[str, str], tuple[str, str]] = {}
        self._seen: dict[str, _Seen] = {}       # uid -> what its folders held
        # the besteffort QoS folder: (folder, valid until, its quota, the files read)
        self._besteffort: tuple[str, float, Current, tuple[str, ...]] | None = None
        self._stale: set[str] = set()           # folders written since they were read
        self._fds: dict[str, int] = {}          # the files of the folders above, open
        weakref.finalize(self, _close_all, self._fds)
        self._reading: list[str] = []           # the files read by the folder being built
        self._last: tuple[list[Folder], list[Folder]] = ([], [])
        self.changed = True                     # what the folders hold (or which there are) moved since the last plan
        self._root_prefix = layout.root.rstrip(os.sep) + os.sep if layout.root else ""
        self._jitter = random.Random(0)

    def _rel(self, path: str) -> str:
        p = self._root_prefix
        return path[len(p):] if p and path.startswith(p) else self.layout.rel(path)

    def _abs(self, rel: str) -> str:
        return os.path.join(self.layout.root, rel) if self.layout.root else rel

    def _expiry(self, now: float, due: bool) -> float:
        """Until when what was just read is trusted: a full period after a read that was due; a random part of
        one after any other, so folders first seen together (an agent start) are read again spread over cycles."""
        return now + self.verify_seconds * (1.0 if due else self._jitter.uniform(0.5, 1.0))

    # -- reading ------------------------------------------------------------------------------------
    def _read(self, path: str) -> str | None:
        self._reading.append(path)
        fd = self._fds.get(path)
        if fd is not None:
            try:
                return os.pread(fd, 256, 0).decode(errors="replace")
            except OSError:                     # its cgroup was removed (ENODEV): opened once more
                os.close(self._fds.pop(path))
        fd, data = open_read(path, 256)
        if fd is None or data is None:
            return None
        self._fds[path] = fd
        return data.decode(errors="replace")

    def _release(self, paths: Iterable[str], keep: Container[str] = ()) -> None:
        """Close the files of ``paths`` no longer read (but those in ``keep``)."""
        for path in paths:
            if path not in keep:
                fd = self._fds.pop(path, None)
                if fd is not None:
                    os.close(fd)

    def close(self) -> None:
        _close_all(self._fds)
        self._seen, self._besteffort = {}, None

    def _current(self, cpu: str | None, memory: str | None, want: Limits, quota: bool) -> Current:
        """Read the settings ``want`` (and ``quota``) need; a folder or file that is missing reads as None."""
        names: dict[str, str] = {}
        if cpu is not None:
            if quota or want.cpu_limit_milli is not None:
                names[self.files["quota"]] = cpu
                names[self.files["period"]] = cpu
            if want.cpu_request_milli is not None:
                names[self.files["weight"]] = cpu
        if memory is not None and want.memory_limit is not None:
            names[self.files["memory"]] = memory
        return parse_current(self.layout.version,
                             {name: self._read(folder + os.sep + name) for name, folder in names.items()})

    def _folder(self, cpu: str | None, mem: str, want: Limits, children: tuple[Folder, ...] = ()) -> Folder:
        return Folder(self._rel(cpu) if cpu else None, self._rel(mem), self._current(cpu, mem, want, False), want,
                      None, children)

    def _besteffort_path(self) -> str | None:
        base = self.layout.cpu_ctl_base
        return os.path.join(base, BESTEFFORT_FOLDER[self.layout.driver]) if base else None

    def no_besteffort(self) -> str:
        """Why ``besteffort`` found no folder. The kubelet makes it at start with cgroupsPerQOS, its default
        (kubernetes pkg/kubelet/cm/qos_container_manager_linux.go, Start)."""
        path = self._besteffort_path()
        if path is None:
            return "no cpu controller holds the kubepods cgroup: no besteffort tier to cap"
        return (f"no besteffort folder {self._rel(path)} in the cpu controller: no besteffort tier to cap (the "
                "kubelet makes it at start, with cgroupsPerQOS)")

    def besteffort(self, now: float = 0.0) -> tuple[str, Current] | None:
        """The besteffort QoS folder (relative path) and its CPU quota, or None when there is none
        (``no_besteffort`` says why)."""
        path = self._besteffort_path()
        if path is None or not os.path.isdir(path):
            return None
        known = self._besteffort
        if known is None or known[0] != path or now >= known[1] or path in self._stale:
            self._stale.discard(path)
            self._reading = []
            current = self._current(path, None, Limits(), True)
            if known is None or known[2] != current:
                self.changed = True
            if known is not None:
                self._release(known[3], keep=self._reading)
            due = known is not None and known[0] == path and now >= known[1]
            known = self._besteffort = (path, self._expiry(now, due), current, tuple(self._reading))
        return self._rel(path), known[2]

    def pod_folders(self, pods: Iterable[dict[str, Any]], dirs: Mapping[str, str],
                    now: float = 0.0) -> tuple[list[Folder], list[Folder]]:
        """(BE pods' folders under the besteffort QoS folder, BE pods' folders elsewhere), with their containers.

        ``pods`` must be BE pods only (anything else is skipped here too); a pod without a cgroup folder yet
        is skipped (the next cycle finds it).
        """
        stale = self._stale
        self.changed = bool(stale)
        be_prefix = BESTEFFORT_FOLDER[self.layout.driver] + os.sep
        under: list[Folder] = []
        elsewhere: list[Folder] = []
        seen = self._seen
        current: set[str] = set()
        for pod in pods:
            uid = (pod.get("metadata") or {}).get("uid") or ""
            rel = dirs.get(uid)
            if rel is None:
                continue
            known = seen.get(uid)
            if known is not None and (known.pod is not pod or known.rel != rel):
                known = None                            # another object, or another folder: all read anew
            if known is None or now >= known.until or (stale and not stale.isdisjoint(known.paths)):
                # A pod object seen before is BE and running still; a new one is checked (and remembered).
                if not is_be(pod) or is_terminal(pod):
                    continue
                old = seen.get(uid)
                limits = known.limits if known is not None else pod_limits(pod)
                due = known is not None and now >= known.until
                self._reading = []
                built = self._pod_folder(pod, limits, rel)
                if old is not None:
                    self._release(old.files, keep=set(self._reading))
                paths = frozenset(self._abs(p) for f in iter_folders([built]) for p in (f.cpu_path, f.memory_path)
                                  if p) if built is not None else frozenset()
                if stale:
                    stale.difference_update(paths)
                known = seen[uid] = _Seen(pod, rel, self._expiry(now, due), limits, built, paths,
                                          tuple(self._reading))
            current.add(uid)
            if known.folder is not None:
                (under if rel.startswith(be_prefix) else elsewhere).append(known.folder)
        if len(seen) > len(current):               # pods that left the node, or are no longer BE
            for uid in [u for u in seen if u not in current]:
                self._release(seen.pop(uid).files)
        if (under, elsewhere) != self._last:      # identity first: only folders read again compare field by field
            self.changed = True
        self._last = (under, elsewhere)
        return under, elsewhere

    def _pod_folder(self, pod: dict[str, Any], limits: PodLimits, rel: str) -> Folder | None:
        lay = self.layout
        if limits.pod.empty and all(c.empty for c in limits.containers.values()):
            return None
        cpu_pod = lay.cpu_ctl_base + os.sep + rel if lay.cpu_ctl_base else None
        mem_pod = lay.memory_base + os.sep + rel
        children = []
        for name, cid in container_ids(pod).items():
            want = limits.containers.get(name)
            leaf = container_folder(cid, lay.driver)
            if want is None or want.empty or leaf is None:
                continue
            children.append(self._folder(cpu_pod + os.sep + leaf if cpu_pod else None, mem_pod + os.sep + leaf, want))
        return self._folder(cpu_pod, mem_pod, limits.pod, tuple(children))

    def _written(self, write: CgroupWrite) -> None:
        """Read a written folder again next cycle: the kernel may round, refuse or have changed more."""
        self._stale.add(self._abs(write.path))

    # -- writing ------------------------------------------------------------------------------------
    def apply(self, writes: Sequence[CgroupWrite]) -> list[WriteResult]:
        """Make each write in order; each one applied or refused on its own (the kernel keeps them consistent)."""
        results = []
        for w in writes:
            self._written(w)
            path = os.path.join(self.layout.root, w.path, w.file)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_TRUNC)   # O_TRUNC: as a shell redirection opens it
                try:
                    os.write(fd, w.value.encode())
                finally:
                    os.close(fd)
            except OSError as exc:
                name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
                # Said once at warning level per file and refusal; while it repeats every cycle, at debug.
                level = logging.DEBUG if self._refused.get((w.path, w.file)) == (w.value, name) else logging.WARNING
                self._refused[(w.path, w.file)] = (w.value, name)
                log.log(level, "cgroup write refused, retrying next cycle: %s/%s = %s: %s (%s)", w.path, w.file,
                        w.value, name, _why(w.file, exc))
                if self.metrics is not None:
                    self.metrics.cgroup_refusals.labels(w.file, name).inc()
                results.append(WriteResult(w, name))
                continue
            self._refused.pop((w.path, w.file), None)
            log.info("cgroup write: %s/%s = %s", w.path, w.file, w.value)
            if self.metrics is not None:
                self.metrics.cgroup_writes.labels(w.file).inc()
                self.metrics.cgroup_last_write.labels(w.file).set(time.time())
            results.append(WriteResult(w))
        return results
