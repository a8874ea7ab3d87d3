"""BE pods' batch requests and limits in their cgroup folders (``be-cgroup-limits``; koordlet's resource
executor): what each BE pod and container asks for, read against what its folders hold (the cycle reads them with
webhook.agent.edges.cgroups; webhook.agent.domain.cgroup_limits decides). Its writes go into the one cgroup plan
(``webhook.agent.capabilities.cgroup_plan``)."""

from __future__ import annotations

from dataclasses import dataclass

from webhook.agent.capabilities.contract import Readings
from webhook.agent.domain.cgroup_limits import Folder


@dataclass(frozen=True, slots=True)
class BeFolders:
    under: list[Folder]             # BE pods' folders under the besteffort tier, with their containers
    elsewhere: list[Folder]         # BE pods' folders elsewhere


class CgroupLimits:
    def decide(self, readings: Readings) -> BeFolders:
        """The BE pods' folders to plan, as read this cycle (none when nothing was read)."""
        cgroups = readings.cgroups
        if cgroups is None:
            return BeFolders([], [])
        return BeFolders(list(cgroups.be_under), list(cgroups.be_elsewhere))
