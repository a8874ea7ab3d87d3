"""What bench/hostile_load.py and bench/state_memory.py both use: the large reviews, one HTTP/1.1 exchange over TLS,
and the server's memory as its pod's cgroup counts it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
from pathlib import Path
from typing import Any

from bench.webhook_load import DEFAULT_REVIEW


def large_review(kind: str) -> bytes:
    review = json.loads(DEFAULT_REVIEW.read_text())
    resources = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}
    containers: list[dict[str, Any]]
    if kind == "hostile":
        containers = [{"name": f"c{i}", "image": "b", "resources": resources} for i in range(23_500)]
    else:
        env = [{"name": f"VARIABLE_{j}", "value": "x" * 24} for j in range(46)]
        init = len(review["request"]["object"]["spec"].get("initContainers", []))
        containers = [{"name": f"c{i}", "image": "busybox:1.36", "env": env, "resources": resources}
                      for i in range(1000 - init)]
    review["request"]["object"]["spec"]["containers"] = containers
    return json.dumps(review).encode()


async def exchange(port: int, ctx: ssl.SSLContext, request: bytes,
                   conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None) -> tuple[int, bytes]:
    """One HTTP/1.1 request; on ``conn`` (kept alive) or on a new TLS connection (closed after)."""
    reader, writer = conn or await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(
            b"content-length:"))
        return status, await reader.readexactly(length)
    finally:
        if conn is None:
            writer.close()


def post(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class Memory:
    """The server's memory as its pod's cgroup would count it: a memory cgroup of its own (cgroup v1, needs
    root), any child process counted too, shared pages once; else, without root, the RSS of the process and its
    children added up (an overestimate: shared pages count twice)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        own = next((line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                    if line.split(":", 2)[1] == "memory"), None)
        base = Path("/sys/fs/cgroup/memory") / (own or "/").lstrip("/")
        candidate = base / f"hostile-load-{os.getpid()}"
        with contextlib.suppress(OSError):
            candidate.mkdir()
            self.path = candidate

    def join(self) -> None:
        """In the server process, before it starts (Popen's preexec_fn)."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def kib(self, pid: int) -> int:
        if self.path is not None:
            return int((self.path / "memory.usage_in_bytes").read_text()) // 1024
        return sum(rss_kib(p) for p in [pid, *children(pid)])

    def limit(self, size: int) -> None:
        """The cgroup's memory limit in bytes, as the pod's ``limits.memory`` sets it."""
        if self.path is not None:
            (self.path / "memory.limit_in_bytes").write_text(str(size))

    def oom_kills(self) -> int:
        """How often the kernel killed a process of the cgroup for its limit."""
        if self.path is None:
            return 0
        text = (self.path / "memory.oom_control").read_text()
        return next((int(line.split()[1]) for line in text.splitlines() if line.startswith("oom_kill ")), 0)

    def reset_peak(self) -> None:
        if self.path is not None:
            (self.path / "memory.max_usage_in_bytes").write_text("0")

    def peak_kib(self) -> int | None:
        return int((self.path / "memory.max_usage_in_bytes").read_text()) // 1024 if self.path else None

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.rmdir()

    def describe(self) -> str:
        return (f"memory cgroup {self.path.name} (usage_in_bytes: what the pod's limit counts)" if self.path
                else "RSS of the server and its children, added up (no memory cgroup: not root?)")


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:  # it exited meanwhile
        pass
    return 0


def children(pid: int) -> list[int]:
    try:
        return [int(c) for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
    except OSError:
        return []
