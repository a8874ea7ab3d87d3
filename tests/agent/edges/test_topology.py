"""The sysfs topology reader: fake trees for 1-, 2-socket and NUMA-less nodes, this machine's own, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.agent_trees import write_sysfs
from webhook.agent.domain.cpuset import ProcessorInfo, parse_cpu_list
from webhook.agent.edges.topology import TopologyError, TopologyReader, read_processors


def test_two_sockets_with_hyperthreads(tmp_path: Path) -> None:
    # cpu i and i + 4 are siblings; socket 1 is NUMA node 1
    rows = [(c, c % 2, c % 4 // 2, c % 4 // 2) for c in range(8)]
    got = read_processors(write_sysfs(tmp_path, rows))
    assert got == [ProcessorInfo(0, 0, 0, 0), ProcessorInfo(4, 0, 0, 0), ProcessorInfo(1, 1, 0, 0),
                   ProcessorInfo(5, 1, 0, 0), ProcessorInfo(2, 0, 1, 1), ProcessorInfo(6, 0, 1, 1),
                   ProcessorInfo(3, 1, 1, 1), ProcessorInfo(7, 1, 1, 1)]


def test_offline_cpus_are_left_out(tmp_path: Path) -> None:
    got = read_processors(write_sysfs(tmp_path, [(0, 0, 0, 0), (1, 1, 0, 0), (2, 2, 0, 0)], offline=(1,)))
    assert [p.cpu for p in got] == [0, 2]


def test_without_numa_folders_every_cpu_is_on_node_0(tmp_path: Path) -> None:
    write_sysfs(tmp_path, [(0, 0, 0, 5), (1, 1, 0, 5)])
    for d in (tmp_path / "devices" / "system" / "node").iterdir():
        (d / "cpulist").unlink()
        d.rmdir()
    assert {p.node for p in read_processors(tmp_path)} == {0}


def test_an_unreadable_or_malformed_file_is_named(tmp_path: Path) -> None:
    write_sysfs(tmp_path, [(0, 0, 0, 0), (1, 1, 0, 0)])
    core = tmp_path / "devices/system/cpu/cpu1/topology/core_id"
    core.write_text("one\n")
    with pytest.raises(TopologyError, match=r"cpu1/topology/core_id: 'one' is not a number"):
        read_processors(tmp_path)
    core.unlink()
    with pytest.raises(TopologyError, match=r"cpu1/topology/core_id: cannot read: No such file"):
        read_processors(tmp_path)
    (tmp_path / "devices/system/cpu/online").write_text("0-x\n")
    with pytest.raises(TopologyError, match=r"devices/system/cpu/online: '0-x'"):
        read_processors(tmp_path)
    with pytest.raises(TopologyError, match=r"nowhere/devices/system/cpu/online: cannot read"):
        read_processors(tmp_path / "nowhere")


def test_an_unreadable_numa_folder_is_an_error_not_one_node(tmp_path: Path) -> None:
    write_sysfs(tmp_path, [(0, 0, 0, 0), (1, 1, 0, 1)])
    node_dir = tmp_path / "devices" / "system" / "node"
    for d in node_dir.iterdir():
        (d / "cpulist").unlink()
        d.rmdir()
    node_dir.rmdir()
    node_dir.write_text("")   # there, but no folder to list (tests run as root: permissions would not stop it)
    with pytest.raises(TopologyError, match=r"devices/system/node: cannot read: Not a directory"):
        read_processors(tmp_path)


def test_the_reader_reads_again_when_cpus_go_online(tmp_path: Path) -> None:
    write_sysfs(tmp_path, [(0, 0, 0, 0), (1, 1, 0, 0)], offline=(1,))
    reader = TopologyReader(tmp_path)
    assert [p.cpu for p in reader.read()] == [0]
    (tmp_path / "devices/system/cpu/cpu0/topology/core_id").write_text("7\n")   # not re-read: online unchanged
    assert reader.read()[0].core == 0
    write_sysfs(tmp_path, [(0, 0, 0, 0), (1, 1, 0, 0)])
    assert [(p.cpu, p.core) for p in reader.read()] == [(0, 0), (1, 1)]


def test_this_machine() -> None:
    online = Path("/sys/devices/system/cpu/online")
    if not online.exists():
        pytest.skip("no sysfs here")
    got = read_processors()
    assert {p.cpu for p in got} == parse_cpu_list(online.read_text())
    assert len(got) <= (os.cpu_count() or 0)
