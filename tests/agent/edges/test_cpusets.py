"""cpuset folder discovery and writes on fake cgroup v1 and v2 trees: which folders, in what order, what lands."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.agent_trees import FakePod, write_cgroup_v1, write_cgroup_v2, write_cpuset_v1, write_cpuset_v2
from webhook.agent.domain.cpuset import CPUSET_FILE, parse_cpu_list, plan_cpuset_writes
from webhook.agent.domain.sample import Layout
from webhook.agent.edges.cgroups import CgroupFiles
from webhook.agent.edges.collectors import detect_layout
from webhook.agent.edges.cpusets import read_tree

PODS = [FakePod("aaaa-1", container_ids=("containerd://c1", "containerd://c2")),
        FakePod("bbbb-2", container_ids=("containerd://c3",)),
        FakePod("cccc-3", qos="burstable", container_ids=("containerd://c4",))]


def layout_of(root: Path) -> Layout:
    layout = detect_layout(root)
    assert layout is not None
    return layout


def v1(root: Path, driver: str) -> tuple[Layout, list[Path]]:
    write_cgroup_v1(root, PODS, driver)
    return layout_of(root), write_cpuset_v1(root, PODS, driver, "0-7")


def rel(root: Path, paths: list[Path]) -> list[str]:
    return [str(p.relative_to(root)) for p in paths]


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_v1_finds_the_tier_its_pods_and_containers_in_walk_order(tmp_path: Path, driver: str) -> None:
    layout, made = v1(tmp_path, driver)
    tree = read_tree(layout)
    assert tree.unavailable is None and tree.problems == ()
    assert [f.path for f in tree.folders] == rel(tmp_path, made)      # tier, pod, its containers, next pod...
    assert tree.folders[0].path.startswith("cpuset/kubepods")
    assert tree.held == set(range(8)) and {f.cpus for f in tree.folders} == {frozenset(range(8))}
    assert len(tree.folders) == 1 + 2 + 3                               # the burstable pod is not in the tier


def test_v1_deeper_folders_are_not_walked(tmp_path: Path) -> None:
    layout, made = v1(tmp_path, "systemd")
    (made[2] / "nested").mkdir()
    (made[2] / "nested" / "cpuset.cpus").write_text("0-7\n")
    assert not any(f.path.endswith("nested") for f in read_tree(layout).folders)


def test_v1_narrowing_and_widening_through_the_cgroup_writer(tmp_path: Path) -> None:
    layout, made = v1(tmp_path, "systemd")
    files = CgroupFiles(layout)
    tree = read_tree(layout)
    writes = plan_cpuset_writes(tree.folders, frozenset({0, 1, 4, 5}))
    results = files.apply(writes)
    assert all(r.applied for r in results)
    assert [r.write.path for r in results] == [str(p.relative_to(tmp_path)) for p in reversed(made)]  # children first
    assert {(p / CPUSET_FILE).read_text() for p in made} == {"0-1,4-5"}
    tree = read_tree(layout)
    assert tree.held == {0, 1, 4, 5}
    writes = plan_cpuset_writes(tree.folders, frozenset(range(8)))
    assert [w.path for w in writes] == rel(tmp_path, made)                                           # tier first
    assert all(r.applied for r in files.apply(writes))
    assert {(p / CPUSET_FILE).read_text() for p in made} == {"0-7"}


def test_v1_without_a_cpuset_mount_or_tier_says_why(tmp_path: Path) -> None:
    write_cgroup_v1(tmp_path, PODS, "systemd")
    layout = layout_of(tmp_path)
    assert read_tree(layout).unavailable == (
        "cgroup v1: no besteffort folder cpuset/kubepods.slice/kubepods-besteffort.slice in the cpuset hierarchy")
    (tmp_path / "cpuset").rmdir()
    assert read_tree(layout).unavailable == f"cgroup v1: no cpuset controller mounted at {tmp_path}/cpuset"


def test_v2_empty_cpus_are_the_parents_and_every_level_is_written(tmp_path: Path) -> None:
    write_cgroup_v2(tmp_path, PODS, "systemd")
    made = write_cpuset_v2(tmp_path, PODS, "systemd", "0-3")
    layout = layout_of(tmp_path)
    tree = read_tree(layout)
    assert tree.unavailable is None
    assert tree.held == {0, 1, 2, 3}                   # the tier's cpuset.cpus is empty: its effective CPUs
    assert [f.path for f in tree.folders] == rel(tmp_path, made)
    writes = plan_cpuset_writes(tree.folders, frozenset({2, 3}), tree.held)
    # v2 takes any order, the plan is the same: the union down (0-3, from empty), then the set up
    assert [(w.path, w.value) for w in writes] == (
        [(p, "0-3") for p in rel(tmp_path, made)] + [(p, "2-3") for p in reversed(rel(tmp_path, made))])
    assert all(r.applied for r in CgroupFiles(layout).apply(writes))
    assert {parse_cpu_list((p / CPUSET_FILE).read_text()) for p in made} == {frozenset({2, 3})}


def test_v2_tier_only_confines_the_pods_below_it(tmp_path: Path) -> None:
    write_cgroup_v2(tmp_path, PODS, "systemd")
    made = write_cpuset_v2(tmp_path, PODS, "systemd", "0-3", below_tier=False)
    tree = read_tree(layout_of(tmp_path))
    assert [f.cpus is None for f in tree.folders] == [False] + [True] * (len(made) - 1)
    writes = plan_cpuset_writes(tree.folders, frozenset({1}), tree.held)
    assert [(w.path, w.value) for w in writes] == [("kubepods.slice/kubepods-besteffort.slice", "0-3"),
                                                   ("kubepods.slice/kubepods-besteffort.slice", "1")]


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
def test_v2_without_the_cpuset_controller_for_the_tier_says_why(tmp_path: Path, driver: str) -> None:
    write_cgroup_v2(tmp_path, PODS, driver)
    write_cpuset_v2(tmp_path, PODS, driver, tier_enabled=False)
    tree = read_tree(layout_of(tmp_path))
    kubepods = "kubepods.slice" if driver == "systemd" else "kubepods"
    tier = "kubepods.slice/kubepods-besteffort.slice" if driver == "systemd" else "kubepods/besteffort"
    assert tree.unavailable == (f"cgroup v2: the cpuset controller is not enabled for {tier} ({tier}/cgroup.controllers"
                                f" has no cpuset: {kubepods}/cgroup.subtree_control lacks it)")
    assert tree.folders == ()


def test_a_malformed_cpuset_file_is_named_and_its_folder_left_alone(tmp_path: Path) -> None:
    layout, made = v1(tmp_path, "cgroupfs")
    (made[1] / CPUSET_FILE).write_text("0-x\n")
    tree = read_tree(layout)
    assert tree.problems == (f"{made[1].relative_to(tmp_path)}/cpuset.cpus: '0-x' in '0-x' is not a CPU number or range",)
    assert str(made[1].relative_to(tmp_path)) not in {w.path for w in plan_cpuset_writes(tree.folders, frozenset({0}))}


def test_a_folder_that_cannot_be_listed_is_said_not_taken_for_empty(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod folder gone between the walk's steps is its pod leaving; one that cannot be listed is a problem the
    log names (its containers keep their CPUs, and the kernel may then refuse the tier's narrowing). Root lists any
    folder, so the listing is made to fail the way it would for another user."""
    layout, made = v1(tmp_path, "systemd")
    pod = str(made[1])
    scandir = os.scandir

    def refusing(path: str) -> object:
        if str(path) == pod:
            raise PermissionError(13, "Permission denied", path)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    tree = read_tree(layout)
    assert tree.problems == (f"{made[1].relative_to(tmp_path)}: cannot list: Permission denied",)
    assert [f.path for f in tree.folders][:2] == rel(tmp_path, made[:2])
    assert str(made[2].relative_to(tmp_path)) not in [f.path for f in tree.folders]
