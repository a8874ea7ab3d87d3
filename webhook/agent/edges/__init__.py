"""The agent's edges: everything that reads or writes outside the process - /proc and the pod cgroups
(``collectors``), the cgroup files the agent enforces (``cgroups``), the besteffort cpuset folders (``cpusets``), the
CPU topology from sysfs (``topology``), the memory notifications (``notify``), the API actions (``actions``) and the
/metrics + /healthz server (``metrics_server``).

The cycle (``webhook.agent.cycle``) measures through them and hands the capabilities what was measured; a
capability acts only through the edges it was given, and never imports this package (docs/architecture.md, "Adding
a capability").
"""
