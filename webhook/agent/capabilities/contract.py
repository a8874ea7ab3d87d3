"""The contract every capability of the agent implements, as koordlet's QoS strategies share one
(koordinator's ``pkg/koordlet/qosmanager/framework/strategy.go``): the cycle measures, once, through the edges;
each capability decides from what was measured (``Readings``) and then acts through the edges it was given.

- ``decide(readings)`` is pure: it reads only ``readings`` and the capability's own remembered state (which it may
  update), and returns what it would do. No collector, no file, no API call, no clock: a capability never
  imports ``webhook.agent.edges`` (``tests/agent/capabilities/test_contract.py`` holds it to that). It may set a
  gauge of ``AgentMetrics`` (memory only) and log what it concluded.
- ``act(readings, decision, report)`` does it, through the ``KubeActions`` or cgroup files it was handed at
  construction (``Shared``; a dry run logs instead, ``once`` only plans), and puts what it did in the cycle's report.

The order they run in is ``Agent.order`` (``webhook/agent/cycle.py``); docs/architecture.md, "Adding a capability".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, TypeVar

from webhook.agent.domain.cgroup_limits import Current, Folder
from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.cpuset import CpusetTree, ProcessorInfo
from webhook.agent.domain.sample import Layout, Sample
from webhook.agent.inputs import Inputs
from webhook.agent.report import CycleReport

if TYPE_CHECKING:   # the types of the edges a capability acts through; never imported to run
    from webhook.agent.edges.cgroups import CgroupFiles

D = TypeVar("D")


@dataclass(frozen=True, slots=True)
class MemoryPressure:
    """What memory eviction concluded about pressure, for the node condition: a threshold is met (or was, within
    the transition period), and the thresholds met, described."""

    met: bool = False
    observed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cpusets:
    """The besteffort tier's cpuset folders and the CPU topology, read when cpuset suppression needs them."""

    tree: CpusetTree
    processors: tuple[ProcessorInfo, ...] = ()
    topology_error: str | None = None          # why the topology could not be read (the tree could)


@dataclass(frozen=True, slots=True)
class CgroupReadings:
    """What the cgroup capabilities' folders hold this cycle (read through ``CgroupFiles``)."""

    layout: Layout
    page_size: int
    changed: bool                                   # the folders (or which there are) moved since the last plan
    be_under: tuple[Folder, ...] = ()               # BE pods' folders under the besteffort tier (limits on)
    be_elsewhere: tuple[Folder, ...] = ()           # BE pods' folders elsewhere
    tier: tuple[str, Current] | None = None         # the besteffort tier's folder and its CPU quota
    no_tier: str | None = None                      # why there is no tier, when there is none
    cpusets: Cpusets | None = None                  # None: not read (cpuset suppression needs nothing this cycle)


@dataclass(frozen=True, slots=True)
class Readings:
    """What the cycle measured, for every capability to decide from.

    The cycle measures in two stages: node memory (and the pods' memory when a memory threshold acts or memory
    requests are past the allocatable) first, for memory eviction, whose requests go out before the rest of the
    node is measured; then the CPU/cgroup
    ``sample`` and the cgroup folders for the others, with what memory eviction concluded (``memory_pressure``).
    """

    now: float
    inputs: Inputs
    memory: tuple[int, int] | None                    # (MemTotal, MemAvailable); None: unreadable this cycle
    # pod uid -> working set, of the pods memory eviction may rank (the BE pods, and those MemoryEvict or
    # MemoryAllocatableEvict could take: MemoryEviction.pods_to_measure); None: not measured
    be_memory: Mapping[str, int | None] | None = None
    sample: Sample | None = None                      # None: not measured (yet, or unreadable)
    cgroups: CgroupReadings | None = None             # None: no kubepods tree, or both cgroup capabilities off
    memory_pressure: MemoryPressure = field(default_factory=MemoryPressure)


class AgentCapability(Protocol[D]):
    """One capability: the ``--disable`` names it answers to, a pure ``decide``, and ``act``."""

    names: ClassVar[tuple[Capability, ...]]

    def decide(self, readings: Readings) -> D:
        """What the capability would do on ``readings`` (pure: see the module's docstring)."""
        ...

    def act(self, readings: Readings, decision: D, report: CycleReport) -> None:
        """Do ``decision`` (log it in a dry run), and put what was done in ``report``."""
        ...


class CgroupWriter(Protocol):
    """How the cgroup plan reaches the files of a layout (the cycle's ``CgroupFiles``, kept across cycles)."""

    def __call__(self, layout: Layout) -> CgroupFiles: ...
