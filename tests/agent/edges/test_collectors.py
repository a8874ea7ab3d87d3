"""Collectors over temporary trees laid out like /proc and cgroup v1/v2 (systemd and cgroupfs)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.agent_trees import FakePod, pod_dir_v2, set_pod_cpu_v2, write_cgroup_v1, write_cgroup_v2, write_proc
from webhook.agent.domain.sample import PodUsage
from webhook.agent.edges.collectors import CollectError, Collector, detect_layout, read_cpu_ticks, read_meminfo

GI, MI = 2**30, 2**20
PODS = [FakePod("11111111-aaaa-4bbb-8ccc-000000000001", "besteffort", 300 * MI, 100 * MI, 1_000_000),
        FakePod("11111111-aaaa-4bbb-8ccc-000000000002", "burstable", 200 * MI, 0, 2_000_000),
        FakePod("11111111-aaaa-4bbb-8ccc-000000000003", "guaranteed", 50 * MI, 80 * MI, 0)]


def test_meminfo_and_stat(tmp_path: Path) -> None:
    proc = write_proc(tmp_path, 32 * GI, 8 * GI, busy=3000, idle=7000, cpus=4)
    assert read_meminfo(proc) == (32 * GI, 8 * GI)
    assert read_cpu_ticks(proc) == (3000, 10000, 4)


@pytest.mark.parametrize("name,content,error", [
    ("no MemAvailable", "MemTotal: 100 kB\n", "no MemAvailable line"),
    ("garbage", "MemTotal: lots kB\nMemAvailable: 1 kB\n", "malformed MemTotal line"),
])
def test_meminfo_errors(tmp_path: Path, name: str, content: str, error: str) -> None:
    (tmp_path / "meminfo").write_text(content)
    with pytest.raises(CollectError, match=error):
        read_meminfo(tmp_path)


def test_missing_proc_root(tmp_path: Path) -> None:
    with pytest.raises(CollectError, match="cannot read"):
        Collector(tmp_path / "nope", tmp_path).check()


@pytest.mark.parametrize("version,driver", [(2, "systemd"), (2, "cgroupfs"), (1, "systemd"), (1, "cgroupfs")])
def test_layouts_detected_and_read(tmp_path: Path, version: int, driver: str) -> None:
    write_proc(tmp_path / "proc", 32 * GI, 8 * GI)
    cg = tmp_path / "cgroup"
    (write_cgroup_v2 if version == 2 else write_cgroup_v1)(cg, PODS, driver)
    layout = detect_layout(cg)
    assert layout is not None and layout.name == f"v{version}/{driver}"
    c = Collector(tmp_path / "proc", cg)
    s = c.collect(0.0)
    assert s.layout is not None and s.layout.name == f"v{version}/{driver}"
    assert {u: p.memory for u, p in s.pods.items()} == {
        PODS[0].uid: 200 * MI, PODS[1].uid: 200 * MI, PODS[2].uid: 0}   # working set clamps at 0
    assert all(p.cpu_milli is None for p in s.pods.values())            # a rate needs two samples
    assert s.mem_used == 24 * GI


def test_cpu_rates_from_two_samples(tmp_path: Path) -> None:
    write_proc(tmp_path / "proc", 32 * GI, 8 * GI, busy=1000, idle=9000, cpus=2)
    cg = write_cgroup_v2(tmp_path / "cg", PODS)
    c = Collector(tmp_path / "proc", cg)
    c.collect(10.0)
    write_proc(tmp_path / "proc", 32 * GI, 8 * GI, busy=1500, idle=9500, cpus=2)   # 50% of 2 CPUs busy
    set_pod_cpu_v2(cg, PODS[0], 1_000_000 + 500_000)                                 # 0.5 s over 1 s
    s = c.collect(11.0)
    assert s.node_cpu_milli == pytest.approx(1000.0)
    assert s.pods[PODS[0].uid].cpu_milli == pytest.approx(500.0)
    assert s.pods[PODS[1].uid].cpu_milli == pytest.approx(0.0)


def test_no_kubepods_tree_means_no_pods(tmp_path: Path) -> None:
    write_proc(tmp_path / "proc", GI, GI // 2)
    (tmp_path / "cg").mkdir()
    assert Collector(tmp_path / "proc", tmp_path / "cg").collect(0).pods == {}


@pytest.mark.parametrize("name,breakage", [
    ("memory.current missing", lambda d: os.remove(d / "memory.current")),
    ("memory.current half-written", lambda d: (d / "memory.current").write_text("")),
    ("memory.current garbage", lambda d: (d / "memory.current").write_text("12ab")),
    ("memory.stat without inactive_file", lambda d: (d / "memory.stat").write_text("anon 1\n")),
    ("memory.stat half-written", lambda d: (d / "memory.stat").write_text("anon 1\ninactive_fi")),
])
def test_broken_files_mean_no_usage(tmp_path: Path, name: str, breakage: Callable[[Path], object]) -> None:
    write_proc(tmp_path / "proc", 32 * GI, 8 * GI)
    cg = write_cgroup_v2(tmp_path / "cg", PODS)
    breakage(pod_dir_v2(cg, PODS[0]))
    s = Collector(tmp_path / "proc", cg).collect(0)
    assert s.pods[PODS[0].uid].memory is None
    assert s.pods[PODS[1].uid].memory == 200 * MI


def test_pod_vanishing_between_scan_and_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import webhook.agent.edges.collectors as col

    write_proc(tmp_path / "proc", 32 * GI, 8 * GI)
    cg = write_cgroup_v2(tmp_path / "cg", PODS)
    real = col.pod_dirs

    def scan_then_vanish(base: str, driver: str) -> dict[str, str]:
        found = real(base, driver)
        shutil.rmtree(pod_dir_v2(cg, PODS[0]))
        return found

    monkeypatch.setattr(col, "pod_dirs", scan_then_vanish)
    s = Collector(tmp_path / "proc", cg).collect(0)
    assert s.pods[PODS[0].uid] == PodUsage(None, None)


def test_usage_files_stay_open_and_a_pod_that_left_has_them_closed(tmp_path: Path) -> None:
    import shutil

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    write_proc(tmp_path / "proc", 32 * GI, 8 * GI)
    cg = write_cgroup_v2(tmp_path / "cg", PODS)
    before = open_fds()
    c = Collector(tmp_path / "proc", cg)
    c.collect(0.0)
    assert open_fds() == before + 2 + 3 * len(PODS)      # meminfo, stat; memory.current, memory.stat, cpu.stat
    (pod_dir_v2(cg, PODS[0]) / "memory.current").write_text(f"{400 * MI}\n")
    assert c.collect(1.0).pods[PODS[0].uid].memory == 300 * MI     # read again through the open file
    shutil.rmtree(pod_dir_v2(cg, PODS[0]))
    s = c.collect(2.0)
    assert PODS[0].uid not in s.pods and open_fds() == before + 2 + 3 * (len(PODS) - 1)
    c.close()
    assert open_fds() == before
    dropped = Collector(tmp_path / "proc", cg)
    dropped.collect(0.0)
    assert open_fds() > before
    del dropped                                          # a collector dropped closes what it kept open
    assert open_fds() == before


def test_memory_stat_is_read_again_after_stat_seconds_only(tmp_path: Path) -> None:
    write_proc(tmp_path / "proc", 32 * GI, 8 * GI)
    cg = write_cgroup_v2(tmp_path / "cg", PODS)
    c = Collector(tmp_path / "proc", cg, stat_seconds=5.0)
    assert c.collect(0.0).pods[PODS[0].uid].memory == 200 * MI
    (pod_dir_v2(cg, PODS[0]) / "memory.stat").write_text("inactive_file 0\n")
    assert c.collect(4.0).pods[PODS[0].uid].memory == 200 * MI    # page cache moves slowly: read every 5 s
    assert c.pod_memory(4.5, [PODS[0].uid, "not-a-pod"]) == {PODS[0].uid: 200 * MI, "not-a-pod": None}
    assert c.collect(5.0).pods[PODS[0].uid].memory == 300 * MI
