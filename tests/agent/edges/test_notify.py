"""Memory notifications: the trigger level, the memcg threshold, the sampler's edge trigger, the watch."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from harness.agent_trees import FakePod, write_cgroup_v1, write_cgroup_v2, write_proc
from webhook.agent.domain.memory_notify import SamplerGate, memcg_threshold, near_level, needs_rearm, trigger_level
from webhook.agent.domain.thresholds import (
    MEMORY_AVAILABLE,
    Observation,
    Threshold,
    is_met,
    parse_thresholds,
    watermark_threshold,
)
from webhook.agent.edges.notify import WAKE, MemoryWatch
from webhook.agent.metrics import AgentMetrics

GI, MI = 2**30, 2**20


@pytest.mark.parametrize("thresholds", [
    [watermark_threshold(70, 68)],
    parse_thresholds(hard="memory.available<1536Mi"),
    parse_thresholds(hard="memory.available<10%"),
    parse_thresholds(soft="memory.available<3Gi", soft_grace_period="memory.available=1m"),
])
def test_trigger_level_is_where_the_threshold_starts_to_be_met(thresholds: list[Threshold]) -> None:
    capacity = 32 * GI + 12345
    level = trigger_level(thresholds, capacity)
    assert level is not None
    t = thresholds[0]
    assert is_met(t, Observation(capacity - level, capacity), False)
    assert not is_met(t, Observation(capacity - (level - 1), capacity), False)


def test_trigger_level_takes_the_first_memory_threshold() -> None:
    thresholds = [watermark_threshold(70, 68), *parse_thresholds(hard="memory.available<1Gi,nodefs.available<1Gi")]
    assert trigger_level(thresholds, 100 * GI) == 70 * GI
    assert trigger_level(parse_thresholds(hard="nodefs.available<1Gi"), 100 * GI) is None
    assert all(t.signal == MEMORY_AVAILABLE for t in [watermark_threshold(70, 68)])


def test_memcg_threshold_carries_the_offset() -> None:
    # node usage 10Gi, cgroup usage 14Gi (4Gi of page cache counted there): the level 12Gi is 16Gi in cgroup terms
    assert memcg_threshold(12 * GI, 10 * GI, 14 * GI) == 16 * GI
    assert memcg_threshold(GI, 10 * GI, 2 * GI) == 1        # already far above: the lowest threshold
    assert needs_rearm(None, GI, 32 * GI)
    assert not needs_rearm(GI, GI + MI, 32 * GI) and needs_rearm(GI, GI + 64 * MI, 32 * GI)


def test_sampler_gate_fires_once_per_crossing() -> None:
    gate = SamplerGate()
    assert not gate.feed(100)                      # no level: never
    gate.set_level(1000, 100_000)                  # margin 100
    assert [gate.feed(u) for u in (900, 999, 1000, 1200, 1000, 950, 1100)] == [
        False, False, True, False, False, False, False]     # 950 is within the margin: still disarmed
    assert [gate.feed(u) for u in (899, 1000)] == [False, True]
    gate.set_level(2000, 100_000)
    assert gate.feed(2500)                          # a new level arms again


# -- the watch over fake trees (no kernel notifications there: the sampler) --------------------------------
def test_sampler_brings_the_cycle_forward(tmp_path: Path) -> None:
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)                    # 8Gi used
    cg = write_cgroup_v2(tmp_path / "cg", [FakePod("u")])
    metrics = AgentMetrics()
    watch = MemoryWatch(cg, proc, "auto", metrics)
    try:
        assert watch.sources == ["sampler"]         # fake files cannot be polled; no PSI file
        assert metrics.notification_source.labels("sampler")._value.get() == 1
        watch.arm(16 * GI, 32 * GI)
        assert watch.wait(0.25) is None             # below the level: the interval elapses
        threading.Timer(0.05, lambda: write_proc(proc, 32 * GI, 12 * GI)).start()    # 20Gi used
        started = time.monotonic()
        assert watch.wait(5.0) == "sampler"
        assert time.monotonic() - started < 1.0
        assert watch.wait(0.25) is None             # still above: no second notification
        assert metrics.notifications.labels("sampler")._value.get() == 1
    finally:
        watch.close()


def test_wake_and_modes(tmp_path: Path) -> None:
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = write_cgroup_v1(tmp_path / "cg", [FakePod("u")])
    watch = MemoryWatch(cg, proc, "auto")
    try:
        # A v1 tree without cgroup.event_control (not cgroupfs): the memcg threshold cannot be used.
        assert watch.sources == ["sampler"] and any("cgroup.event_control" in p for p in watch.problems)
        threading.Timer(0.05, watch.wake).start()
        assert watch.wait(10.0) == WAKE
    finally:
        watch.close()
    none = MemoryWatch(cg, proc, "none")
    assert none.sources == [] and none.describe() == "none (interval only)"
    none.close()
    with pytest.raises(ValueError, match="--memory-notification must be one of"):
        MemoryWatch(cg, proc, "inotify")


def test_a_usage_file_that_holds_no_number_leaves_the_sampler(tmp_path: Path) -> None:
    proc = write_proc(tmp_path / "proc", 32 * GI, 24 * GI)
    cg = write_cgroup_v1(tmp_path / "cg", [FakePod("u")])
    (cg / "memory" / "cgroup.event_control").write_text("")
    (cg / "memory" / "memory.usage_in_bytes").write_text("garbage\n")
    watch = MemoryWatch(cg, proc, "auto")
    try:
        assert watch.sources == ["sampler"]
        assert any(p.startswith("memcg-threshold: ") and "invalid literal" in p for p in watch.problems), watch.problems
    finally:
        watch.close()


def test_near_level() -> None:
    capacity = 20 * GI                                  # near: within capacity / 20 = 1Gi below the level
    assert not near_level(None, 10 * GI, capacity)
    assert [near_level(10 * GI, u, capacity) for u in (8 * GI, 9 * GI, 10 * GI, 11 * GI)] == [False, True, True, True]
