"""This process's memory cgroup: its limit and usage, read when a large review arrives (a few small files, and
only then), for ``webhook.server.memory_budget``.

cgroup v2: ``memory.max`` and ``memory.current``; v1: ``memory.limit_in_bytes`` and ``memory.usage_in_bytes``; in
the folder ``/proc/self/cgroup`` names, or at the mount's root (a container with its own cgroup namespace sees its
cgroup there). No limit ("max", or v1's page-rounded largest value) or nothing readable: no check.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

V1_UNLIMITED = 1 << 62   # v1 reports "no limit" as the largest page-aligned value, about 2^63


@dataclass(frozen=True, slots=True)
class MemoryCgroup:
    usage_file: Path
    limit_file: Path

    def read(self) -> tuple[int, int] | None:
        """(usage, limit) in bytes; None without a limit or when the files cannot be read."""
        try:
            limit_text = self.limit_file.read_text().strip()
            usage = int(self.usage_file.read_text().strip())
        except (OSError, ValueError):
            return None
        if limit_text == "max" or not limit_text.isdigit() or int(limit_text) >= V1_UNLIMITED:
            return None
        return usage, int(limit_text)


def this_process(proc: Path = Path("/proc"), root: Path = Path("/sys/fs/cgroup")) -> MemoryCgroup | None:
    """The memory cgroup this process is in, with a limit; None when there is none to respect."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        _, controllers, path = fields
        if controllers == "":   # cgroup v2
            names, base = ("memory.current", "memory.max"), root
        elif "memory" in controllers.split(","):
            names, base = ("memory.usage_in_bytes", "memory.limit_in_bytes"), root / "memory"
        else:
            continue
        for folder in (base / path.lstrip("/"), base):
            found = MemoryCgroup(folder / names[0], folder / names[1])
            if found.limit_file.is_file() and found.read() is not None:
                return found
    return None
