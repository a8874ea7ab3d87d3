"""Real cgroups for tests and benchmarks: uniquely named, removed afterwards (children killed first).

``RealCgroupRoot`` creates ``colocation-test-<pid>-<random>`` under each cgroup v1 controller this machine
mounts separately or combined (memory, cpu, cpuacct) and a folder of symlinks that the agent takes as its
``--cgroup-root``: ``<root>/memory`` is the test's memory cgroup, ``<root>/cpu`` its cpu cgroup, and so on, so
the agent's paths (``memory/kubepods/besteffort/pod<uid>/<container>``) are real cgroups, isolated from the
host's own ``kubepods``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("memory", "cpu", "cpuacct")


def _is_v1_mount(path: Path) -> bool:
    return (path / "cgroup.procs").exists() and not (path / "cgroup.controllers").exists()


def v1_unavailable_reason() -> str | None:
    """Why real cgroup v1 tests cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "real-kernel cgroup tests need root"
    for ctl in V1_CONTROLLERS:
        mount = CGROUP_FS / ctl
        if not _is_v1_mount(mount.resolve()):
            return f"real-kernel cgroup tests need the cgroup v1 {ctl} controller mounted at {mount}"
        if not os.access(mount, os.W_OK):
            return f"{mount} is not writable"
    return None


def cpuset_unavailable_reason() -> str | None:
    """Why real cgroup v1 cpuset tests cannot run here, or None when they can."""
    reason = v1_unavailable_reason()
    if reason is not None:
        return reason
    mount = CGROUP_FS / "cpuset"
    if not _is_v1_mount(mount.resolve()) or not os.access(mount, os.W_OK):
        return f"real-kernel cpuset tests need the cgroup v1 cpuset controller mounted writable at {mount}"
    return None


def unified_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "real-kernel cgroup tests need root"
    for path in (CGROUP_FS / "unified", CGROUP_FS):
        if (path / "cgroup.controllers").exists() and os.access(path, os.W_OK):
            return None
    return "no writable cgroup2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified"


def unified_mount() -> Path:
    for path in (CGROUP_FS / "unified", CGROUP_FS):
        if (path / "cgroup.controllers").exists():
            return path
    raise FileNotFoundError("no cgroup2 hierarchy")


class RealCgroupRoot:
    """A fake ``--cgroup-root`` whose controller folders are real, uniquely named cgroups."""

    def __init__(self, memory_at_root: bool = False, cpuset: bool = False) -> None:
        """``memory_at_root``: the memory folder is the host's root memory cgroup, as on a node, so the root's
        usage (what the agent's threshold watches) is the whole machine's; ``kubepods`` is then created there for
        the run (refused when one exists: a real node's) and removed afterwards. ``cpuset``: the cpuset controller
        too, each new folder starting with its parent's CPUs and memory nodes (as the runtime sets them: a v1
        cpuset folder starts empty, and no task may join it so)."""
        self.name = f"colocation-test-{os.getpid()}-{secrets.token_hex(3)}"
        self.root = Path(tempfile.mkdtemp(prefix="colocation-cgroot-"))
        self.real: dict[str, Path] = {}
        self._made: list[Path] = []
        self.controllers = (*V1_CONTROLLERS, "cpuset") if cpuset else V1_CONTROLLERS
        try:
            self._make(memory_at_root)
        except BaseException:  # what was made before the failure goes too (a host kubepods above all)
            self.cleanup()
            raise

    def _make(self, memory_at_root: bool) -> None:
        for ctl in self.controllers:
            mount = (CGROUP_FS / ctl).resolve()
            if ctl == "memory" and memory_at_root:
                kubepods = mount / "kubepods"
                if kubepods.exists():
                    raise FileExistsError(f"{kubepods} exists (a real node's?): not touching it")
                kubepods.mkdir()
                self._made.append(kubepods)
                self.real[ctl] = mount
                os.symlink(mount, self.root / ctl)
                continue
            target = mount / self.name
            if target not in self._made:
                if not target.exists():
                    target.mkdir()
                self._made.append(target)
            if ctl == "cpuset":
                _inherit_cpuset(target)
            self.real[ctl] = target
            os.symlink(target, self.root / ctl)

    def mkdir(self, rel: str, controllers: Sequence[str] | None = None) -> None:
        """Create ``rel`` (and its parents) in each controller (by default every one this root has)."""
        for ctl in self.controllers if controllers is None else controllers:
            if ctl != "cpuset":
                (self.real[ctl] / rel).mkdir(parents=True, exist_ok=True)
                continue
            folder = self.real[ctl]
            for part in Path(rel).parts:
                folder = folder / part
                if not folder.exists():
                    folder.mkdir()
                    _inherit_cpuset(folder)

    def path(self, ctl: str, rel: str = "") -> Path:
        return self.real[ctl] / rel if rel else self.real[ctl]

    def read(self, ctl: str, rel: str, name: str) -> str:
        return (self.real[ctl] / rel / name).read_text().strip()

    def write(self, ctl: str, rel: str, name: str, value: str) -> None:
        fd = os.open(self.real[ctl] / rel / name, os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def spawn(self, rel: str, code: str, controllers: Sequence[str] | None = None,
              args: Sequence[str] = ()) -> subprocess.Popen[str]:
        """A Python child that joins ``rel`` in each controller (by default every one this root has), then runs
        ``code`` (stdout piped)."""
        procs_files = [str(self.real[ctl] / rel / "cgroup.procs")
                       for ctl in (self.controllers if controllers is None else controllers)]
        join = (f"import os as _os\nfor _f in {procs_files!r}:\n"
                "    _fd = _os.open(_f, _os.O_WRONLY)\n    _os.write(_fd, str(_os.getpid()).encode())\n"
                "    _os.close(_fd)\n")
        return subprocess.Popen([sys.executable, "-c", join + code, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def _folders(self) -> list[Path]:
        out: list[Path] = []
        for top in self._made:
            for dirpath, _, _ in os.walk(top):
                out.append(Path(dirpath))
        return sorted(set(out), key=lambda p: len(p.parts), reverse=True)   # children first

    def cleanup(self) -> None:
        folders = self._folders()
        for _ in range(50):
            alive = False
            for folder in folders:
                try:
                    pids = (folder / "cgroup.procs").read_text().split()
                except OSError:
                    continue
                for pid in pids:
                    alive = True
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
            if not alive:
                break
            time.sleep(0.02)
        for folder in folders:
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)   # a killed task leaves its cgroup a moment later
        shutil.rmtree(self.root, ignore_errors=True)
        left = [str(f) for f in folders if f.exists()]
        if left:  # a leak must not pass unseen: later runs would trip over it
            raise RuntimeError(f"cgroups left behind after the test: {', '.join(left)}")


def _inherit_cpuset(folder: Path) -> None:
    for name in ("cpuset.cpus", "cpuset.mems"):
        (folder / name).write_text((folder.parent / name).read_text())


@contextmanager
def real_cgroup_root(memory_at_root: bool = False, cpuset: bool = False) -> Iterator[RealCgroupRoot]:
    cg = RealCgroupRoot(memory_at_root, cpuset)
    try:
        yield cg
    finally:
        cg.cleanup()


def meminfo_used() -> int:
    total = available = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            total = int(line.split()[1]) * 1024
        elif line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * 1024
    return total - available


# A child that allocates 1 MiB at a time up to ``TOTAL`` bytes (or until killed), printing after each chunk the
# monotonic time and the node's MemTotal - MemAvailable, so the moment usage crossed a watermark is known.
ALLOCATOR = """
import os, sys, time
total = int(sys.argv[1]) if len(sys.argv) > 1 else {total}
hold, out = [], []
fd = os.open("/proc/meminfo", os.O_RDONLY)
def used():
    t = a = 0
    for line in os.pread(fd, 4096, 0).split(b"\\n"):
        if line.startswith(b"MemTotal:"): t = int(line.split()[1]) * 1024
        elif line.startswith(b"MemAvailable:"): a = int(line.split()[1]) * 1024
    return t - a
out.append((time.monotonic(), used()))
while len(hold) * (1 << 20) < total:
    hold.append(b"x" * (1 << 20))
    out.append((time.monotonic(), used()))
sys.stdout.write("\\n".join(f"{{t}} {{u}}" for t, u in out) + "\\nend\\n")
sys.stdout.flush()
time.sleep({hold_seconds})
"""


def allocator_code(total: int, hold_seconds: float = 30.0) -> str:
    return ALLOCATOR.format(total=total, hold_seconds=hold_seconds)


def crossing(samples: list[tuple[float, int]], watermark: int) -> tuple[float, float] | None:
    """(last sample below the watermark, first sample at or above it): the crossing lies between."""
    for (t0, u0), (t1, u1) in itertools.pairwise(samples):
        if u0 < watermark <= u1:
            return t0, t1
    return None
