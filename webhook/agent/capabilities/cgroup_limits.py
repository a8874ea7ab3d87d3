"""BE pods' batch requests and limits in their cgroup folders (``be-cgroup-limits``; koordlet's resource
executor): what each BE pod and container asks for, read against what its folders hold
(webhook.agent.edges.cgroups reads, webhook.agent.domain.cgroup_limits decides)."""

from __future__ import annotations

from webhook.agent.domain.cgroup_limits import Folder
from webhook.agent.edges.cgroups import CgroupFiles
from webhook.agent.edges.collectors import Sample
from webhook.agent.inputs import Inputs


class CgroupLimits:
    def folders(self, files: CgroupFiles, sample: Sample, inputs: Inputs) -> tuple[list[Folder], list[Folder]]:
        """(BE pods' folders under the besteffort tier, BE pods' folders elsewhere), with their containers."""
        under, elsewhere = files.pod_folders([v.obj for v in inputs.pods if v.be], sample.pod_folders, sample.time)
        return under, list(elsewhere)
