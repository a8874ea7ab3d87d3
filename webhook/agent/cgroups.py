"""Reading and writing the cgroup files the agent enforces (BE limits, BE suppression).

Builds the ``webhook.core.cgroup_limits.Folder`` trees from what the folders hold now, and applies the
planned writes one by one. A refused write (cgroup v1 ``EBUSY`` when usage is above a new memory limit,
``EINVAL`` for a quota its parent forbids, a folder that vanished) is logged and counted, never raised:
the next cycle reads the folders again and plans again.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.agent.collectors import Layout
from webhook.agent.metrics import AgentMetrics
from webhook.core.cgroup_limits import (
    BESTEFFORT_FOLDER,
    CgroupWrite,
    Current,
    Folder,
    Limits,
    container_folder,
    container_ids,
    files,
    parse_current,
    pod_limits,
)
from webhook.core.qos import is_be

log = logging.getLogger("colocation-agent")

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

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
    """The cgroup files of one node layout."""

    def __init__(self, layout: Layout, metrics: AgentMetrics | None = None, page_size: int = PAGE_SIZE) -> None:
        self.layout = layout
        self.metrics = metrics
        self.page_size = page_size
        self.files = files(layout.version)
        self._refused: dict[tuple[str, str], tuple[str, str]] = {}

    # -- reading ------------------------------------------------------------------------------------
    def _current(self, cpu: str | None, memory: str | None, want: Limits, quota: bool) -> Current:
        names: dict[str, str] = {}
        if cpu is not None:
            if quota or want.cpu_limit_milli is not None:
                names[self.files["quota"]] = cpu
                names[self.files["period"]] = cpu
            if want.cpu_request_milli is not None:
                names[self.files["weight"]] = cpu
        if memory is not None and want.memory_limit is not None:
            names[self.files["memory"]] = memory
        texts = {name: _read(os.path.join(folder, name)) for name, folder in names.items()}
        return parse_current(self.layout.version, texts)

    def _folder(self, cpu_abs: str | None, mem_abs: str | None, want: Limits, quota: bool = False,
                children: tuple[Folder, ...] = ()) -> Folder:
        cpu = cpu_abs if cpu_abs and os.path.isdir(cpu_abs) else None
        mem = mem_abs if mem_abs and os.path.isdir(mem_abs) else None
        current = self._current(cpu, mem, want, quota)
        rel = self.layout.rel
        return Folder(rel(cpu) if cpu else None, rel(mem) if mem else None, current, want, None, children)

    def besteffort(self) -> tuple[str, Current] | None:
        """The besteffort QoS folder (relative path) and its CPU quota, or None when there is none."""
        base = self.layout.cpu_ctl_base
        if not base:
            return None
        path = os.path.join(base, BESTEFFORT_FOLDER[self.layout.driver])
        if not os.path.isdir(path):
            return None
        return self.layout.rel(path), self._current(path, None, Limits(), quota=True)

    def pod_folders(self, pods: Iterable[dict[str, Any]], dirs: Mapping[str, str]) -> tuple[list[Folder], list[Folder]]:
        """(BE pods' folders under the besteffort QoS folder, BE pods' folders elsewhere), with their containers.

        Only pods labelled BE are looked at; a pod without a cgroup folder yet is skipped (the next cycle
        finds it).
        """
        be_prefix = BESTEFFORT_FOLDER[self.layout.driver] + os.sep
        under: list[Folder] = []
        elsewhere: list[Folder] = []
        lay = self.layout
        for pod in pods:
            if not is_be(pod) or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            uid = (pod.get("metadata") or {}).get("uid") or ""
            rel = dirs.get(uid)
            if rel is None:
                continue
            limits = pod_limits(pod)
            if limits.pod.empty and all(c.empty for c in limits.containers.values()):
                continue
            cpu_pod = os.path.join(lay.cpu_ctl_base, rel) if lay.cpu_ctl_base else None
            mem_pod = os.path.join(lay.memory_base, rel)
            children = []
            for name, cid in container_ids(pod).items():
                want = limits.containers.get(name)
                leaf = container_folder(cid, lay.driver)
                if want is None or want.empty or leaf is None:
                    continue
                child = self._folder(os.path.join(cpu_pod, leaf) if cpu_pod else None, os.path.join(mem_pod, leaf), want)
                if child.cpu_path is not None or child.memory_path is not None:
                    children.append(child)
            folder = self._folder(cpu_pod, mem_pod, limits.pod, children=tuple(children))
            (under if rel.startswith(be_prefix) else elsewhere).append(folder)
        return under, elsewhere

    # -- writing ------------------------------------------------------------------------------------
    def apply(self, writes: Sequence[CgroupWrite]) -> list[WriteResult]:
        """Make each write in order; each one applied or refused on its own (the kernel keeps them consistent)."""
        results = []
        for w in writes:
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
