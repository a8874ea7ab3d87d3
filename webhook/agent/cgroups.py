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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.agent.collectors import Layout
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
from webhook.agent.metrics import AgentMetrics
from webhook.core.qos import is_be

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


def _read(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 256).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class WriteResult:
    write: CgroupWrite
    error: str | None = None       # errno name when refused

    @property
    def applied(self) -> bool:
        return self.error is None


class CgroupFiles:
    """The cgroup files of one node layout.

    What a folder holds is read when the folder is first seen, right after the agent wrote to it, and
    again at least every ``verify_seconds`` (spread over cycles), so a value changed behind the agent's back
    is put back within that time while a steady node costs no reads at all.
    """

    def __init__(self, layout: Layout, metrics: AgentMetrics | None = None, page_size: int = PAGE_SIZE,
                 verify_seconds: float = VERIFY_SECONDS) -> None:
        self.layout = layout
        self.metrics = metrics
        self.page_size = page_size
        self.verify_seconds = verify_seconds
        self.files = files(layout.version)
        self._refused: dict[tuple[str, str], tuple[str, str]] = {}
        self._known: dict[tuple[str | None, str | None, frozenset[str]], tuple[float, Current]] = {}
        self._limits: dict[str, tuple[dict[str, Any], PodLimits]] = {}
        self._dirs: dict[str, float] = {}       # folder -> until when it is trusted to exist
        self._stale: set[str] = set()           # folders written since they were read
        # uid -> (pod object, folder, valid until, last build, its folders): reused while nothing changed
        self._memo: dict[str, tuple[dict[str, Any], str, float, Folder | None, frozenset[str]]] = {}
        self._until = float("inf")
        self.changed = True                     # something was read or rebuilt since the last plan
        self._root_prefix = layout.root.rstrip(os.sep) + os.sep if layout.root else ""
        self._jitter = random.Random(0)

    def _rel(self, path: str) -> str:
        p = self._root_prefix
        return path[len(p):] if p and path.startswith(p) else self.layout.rel(path)

    # -- reading ------------------------------------------------------------------------------------
    def _current(self, cpu: str | None, memory: str | None, want: Limits, quota: bool, now: float) -> Current:
        names: dict[str, str] = {}
        if cpu is not None:
            if quota or want.cpu_limit_milli is not None:
                names[self.files["quota"]] = cpu
                names[self.files["period"]] = cpu
            if want.cpu_request_milli is not None:
                names[self.files["weight"]] = cpu
        if memory is not None and want.memory_limit is not None:
            names[self.files["memory"]] = memory
        key = (cpu, memory, frozenset(names))
        known = self._known.get(key)
        if known is not None and now < known[0] and cpu not in self._stale and memory not in self._stale:
            self._until = min(self._until, known[0])
            return known[1]
        self.changed = True
        texts = {name: _read(os.path.join(folder, name)) for name, folder in names.items()}
        current = parse_current(self.layout.version, texts)
        expiry = now + self.verify_seconds * self._jitter.uniform(0.5, 1.0)
        self._known[key] = (expiry, current)
        self._until = min(self._until, expiry)
        for folder in (cpu, memory):
            if folder is not None:
                self._stale.discard(folder)
                self._dirs[folder] = expiry
        return current

    def _folder(self, cpu_abs: str | None, mem_abs: str | None, want: Limits, now: float, quota: bool = False,
                children: tuple[Folder, ...] = ()) -> Folder:
        cpu = cpu_abs if cpu_abs and self._exists(cpu_abs, now) else None
        mem = mem_abs if mem_abs and self._exists(mem_abs, now) else None
        current = self._current(cpu, mem, want, quota, now)
        return Folder(self._rel(cpu) if cpu else None, self._rel(mem) if mem else None, current, want, None,
                      children)

    def _exists(self, path: str, now: float) -> bool:
        # A folder read recently is trusted to exist until its files are due to be read again.
        expiry = self._dirs.get(path)
        if expiry is not None and now < expiry and path not in self._stale:
            return True
        return os.path.isdir(path)

    def forget(self, now: float) -> None:
        """Drop what is known about folders not looked at for a while (pods that left)."""
        horizon = now - 2 * self.verify_seconds
        self._known = {k: v for k, v in self._known.items() if v[0] > horizon}
        self._dirs = {k: v for k, v in self._dirs.items() if v > horizon}

    def besteffort(self, now: float = 0.0) -> tuple[str, Current] | None:
        """The besteffort QoS folder (relative path) and its CPU quota, or None when there is none."""
        base = self.layout.cpu_ctl_base
        if not base:
            return None
        path = os.path.join(base, BESTEFFORT_FOLDER[self.layout.driver])
        if not os.path.isdir(path):
            return None
        return self._rel(path), self._current(path, None, Limits(), True, now)

    def _pod_limits(self, uid: str, pod: dict[str, Any]) -> PodLimits:
        hit = self._limits.get(uid)
        if hit is not None and hit[0] is pod:   # sources replace whole objects: same object, same answer
            return hit[1]
        limits = pod_limits(pod)
        self._limits[uid] = (pod, limits)
        return limits

    def pod_folders(self, pods: Iterable[dict[str, Any]], dirs: Mapping[str, str],
                    now: float = 0.0) -> tuple[list[Folder], list[Folder]]:
        """(BE pods' folders under the besteffort QoS folder, BE pods' folders elsewhere), with their containers.

        ``pods`` must be BE pods only (anything else is skipped here too); a pod without a cgroup folder yet
        is skipped (the next cycle finds it).
        """
        self.changed = bool(self._stale)
        be_prefix = BESTEFFORT_FOLDER[self.layout.driver] + os.sep
        under: list[Folder] = []
        elsewhere: list[Folder] = []
        seen: set[str] = set()
        for pod in pods:
            if not is_be(pod) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            uid = (pod.get("metadata") or {}).get("uid") or ""
            rel = dirs.get(uid)
            if rel is None:
                continue
            seen.add(uid)
            memo = self._memo.get(uid)
            if memo is not None and memo[0] is pod and memo[1] == rel and now < memo[2] \
                    and (not self._stale or self._stale.isdisjoint(memo[4])):
                if memo[3] is not None:   # nothing read or changed since: the same folders as last cycle
                    (under if rel.startswith(be_prefix) else elsewhere).append(memo[3])
                continue
            self._until = float("inf")
            self.changed = True
            built = self._pod_folder(pod, uid, rel, now)
            paths = frozenset(p for f in iter_folders([built]) for p in (f.cpu_path, f.memory_path) if p) \
                if built is not None else frozenset()
            root = self.layout.root
            self._memo[uid] = (pod, rel, self._until, built,
                               frozenset(os.path.join(root, p) if root else p for p in paths))
            if built is not None:
                (under if rel.startswith(be_prefix) else elsewhere).append(built)
        if len(self._limits) > 2 * len(seen) + 16:
            self._limits = {u: v for u, v in self._limits.items() if u in seen}
            self._memo = {u: v for u, v in self._memo.items() if u in seen}
        return under, elsewhere

    def _pod_folder(self, pod: dict[str, Any], uid: str, rel: str, now: float) -> Folder | None:
        lay = self.layout
        limits = self._pod_limits(uid, pod)
        if limits.pod.empty and all(c.empty for c in limits.containers.values()):
            return None
        cpu_pod = os.path.join(lay.cpu_ctl_base, rel) if lay.cpu_ctl_base else None
        mem_pod = os.path.join(lay.memory_base, rel)
        children = []
        for name, cid in container_ids(pod).items():
            want = limits.containers.get(name)
            leaf = container_folder(cid, lay.driver)
            if want is None or want.empty or leaf is None:
                continue
            child = self._folder(os.path.join(cpu_pod, leaf) if cpu_pod else None, os.path.join(mem_pod, leaf),
                                 want, now)
            if child.cpu_path is not None or child.memory_path is not None:
                children.append(child)
        return self._folder(cpu_pod, mem_pod, limits.pod, now, children=tuple(children))

    def _written(self, write: CgroupWrite) -> None:
        """Read a written folder again next cycle: the kernel may round, refuse or have changed more."""
        self._stale.add(os.path.join(self.layout.root, write.path) if self.layout.root else write.path)

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
                        w.value, name, _WHY.get(exc.errno or 0, exc.strerror or "error"))
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
