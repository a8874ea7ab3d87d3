"""Real cgroup v1 cpuset (root only): the agent's cpuset writes land on real nested BE folders (tier, pods,
containers) in an order the kernel accepts, narrowing and widening, and real processes in a BE pod folder and in a
BE container folder end with exactly the CPUs written (``/proc/PID/status`` ``Cpus_allowed_list``).

This machine may have as few as 2 CPUs: a budget then always asks for all of them (koordlet never gives BE fewer
than 2), so the narrowing here uses sets the test chooses ({first CPU}, {last CPU}) rather than a budget's choice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from subprocess import Popen

import pytest

from harness.kernel import RealCgroupRoot, cpuset_unavailable_reason, real_cgroup_root
from webhook.agent.domain.cgroup_limits import CgroupWrite
from webhook.agent.domain.cpuset import CPUSET_FILE, format_cpu_list, parse_cpu_list, plan_cpuset_writes
from webhook.agent.domain.sample import Layout
from webhook.agent.edges.cgroups import CgroupFiles
from webhook.agent.edges.collectors import detect_layout
from webhook.agent.edges.cpusets import read_tree

REASON = cpuset_unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

TIER = "kubepods/besteffort"
POD_A = f"{TIER}/pod0a0a0a0a-1111-4222-8333-444444444444"
CTR_A = f"{POD_A}/be0123456789abcdef"
POD_B = f"{TIER}/pod0b0b0b0b-1111-4222-8333-444444444444"
CTR_B = f"{POD_B}/be9876543210fedcba"
FOLDERS = [TIER, POD_A, CTR_A, POD_B, CTR_B]          # a directory walk's order: each before those in it
SLEEPER = "import time\ntime.sleep(60)\n"


@pytest.fixture()
def cg() -> Iterator[RealCgroupRoot]:
    with real_cgroup_root(cpuset=True) as root:
        for rel in (CTR_A, CTR_B):
            root.mkdir(rel)
        yield root


def online() -> frozenset[int]:
    cpus = parse_cpu_list(Path("/sys/devices/system/cpu/online").read_text())
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs or more to narrow a set")
    return cpus


def layout_of(cg: RealCgroupRoot) -> Layout:
    layout = detect_layout(cg.root)
    assert layout is not None and layout.version == 1
    return layout


def joined(cg: RealCgroupRoot, rel: str) -> Popen[str]:
    """A real process in ``rel`` (every controller), once the kernel lists it there."""
    child = cg.spawn(rel, SLEEPER)
    procs = cg.path("cpuset", rel) / "cgroup.procs"
    deadline = time.monotonic() + 10
    while str(child.pid) not in procs.read_text().split():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, f"pid {child.pid} never joined {rel}"
        time.sleep(0.01)
    return child


def cpus_allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"/proc/{pid}/status has no Cpus_allowed_list")


def held(cg: RealCgroupRoot) -> dict[str, str]:
    return {rel: cg.read("cpuset", rel, CPUSET_FILE) for rel in FOLDERS}


def apply(cg: RealCgroupRoot, target: frozenset[int]) -> list[str]:
    """Read the tree, plan, write through the agent's cgroup writer; every write must be accepted. Returns the
    folders written, in order (relative to the tier)."""
    layout = layout_of(cg)
    tree = read_tree(layout)
    assert tree.unavailable is None and tree.problems == ()
    assert [f.path for f in tree.folders] == [f"cpuset/{rel}" for rel in FOLDERS]
    results = CgroupFiles(layout).apply(plan_cpuset_writes(tree.folders, target, tree.held))
    assert [r.error for r in results if not r.applied] == []
    return [f"{r.write.path.removeprefix(f'cpuset/{TIER}').lstrip('/') or 'tier'}={r.write.value}" for r in results]


def test_narrowing_widening_and_moving_land_and_confine_real_processes(cg: RealCgroupRoot) -> None:
    cpus = online()
    first, last, every = min(cpus), max(cpus), format_cpu_list(cpus)
    in_pod, in_ctr = joined(cg, POD_A), joined(cg, CTR_B)
    try:
        assert cpus_allowed(in_pod.pid) == cpus_allowed(in_ctr.pid) == every
        # narrowing: from the containers up
        order = apply(cg, frozenset({first}))
        rel_b, rel_a = POD_B.removeprefix(TIER + "/"), POD_A.removeprefix(TIER + "/")
        assert order == [f"{rel_b}/be9876543210fedcba={first}", f"{rel_b}={first}",
                         f"{rel_a}/be0123456789abcdef={first}", f"{rel_a}={first}", f"tier={first}"]
        assert set(held(cg).values()) == {str(first)}
        assert (cpus_allowed(in_pod.pid), cpus_allowed(in_ctr.pid)) == (str(first), str(first))
        # moving to another CPU: the union from the tier down, then the new CPU from the containers up
        order = apply(cg, frozenset({last}))
        union = format_cpu_list({first, last})
        assert order[:5] == [f"tier={union}", f"{rel_a}={union}", f"{rel_a}/be0123456789abcdef={union}",
                             f"{rel_b}={union}", f"{rel_b}/be9876543210fedcba={union}"]
        assert order[5:] == [f"{rel_b}/be9876543210fedcba={last}", f"{rel_b}={last}",
                             f"{rel_a}/be0123456789abcdef={last}", f"{rel_a}={last}", f"tier={last}"]
        assert (cpus_allowed(in_pod.pid), cpus_allowed(in_ctr.pid)) == (str(last), str(last))
        # widening (recovery): from the tier down, nothing after
        order = apply(cg, cpus)
        assert order == [f"tier={every}", f"{rel_a}={every}", f"{rel_a}/be0123456789abcdef={every}",
                         f"{rel_b}={every}", f"{rel_b}/be9876543210fedcba={every}"]
        assert (cpus_allowed(in_pod.pid), cpus_allowed(in_ctr.pid)) == (every, every)
        assert apply(cg, cpus) == []                  # nothing left to write
    finally:
        for child in (in_pod, in_ctr):
            child.kill()
            child.wait()


def test_the_kernel_refuses_the_other_order(cg: RealCgroupRoot) -> None:
    """What the plan's order avoids: a parent narrowed before its children (EBUSY), a child widened past its
    parent (EACCES, cgroup v1's answer). Shown so the order tests above are known to matter on this kernel."""
    cpus = online()
    first, every = min(cpus), format_cpu_list(cpus)
    files = CgroupFiles(layout_of(cg))
    narrow_tier_first = files.apply([CgroupWrite(f"cpuset/{TIER}", CPUSET_FILE, str(first))])
    assert narrow_tier_first[0].error == "EBUSY"
    assert cg.read("cpuset", TIER, CPUSET_FILE) == every
    assert all(r.applied for r in files.apply([CgroupWrite(f"cpuset/{rel}", CPUSET_FILE, str(first))
                                               for rel in reversed(FOLDERS)]))
    widen_child_first = files.apply([CgroupWrite(f"cpuset/{CTR_A}", CPUSET_FILE, every)])
    assert widen_child_first[0].error == "EACCES"
    assert cg.read("cpuset", CTR_A, CPUSET_FILE) == str(first)
