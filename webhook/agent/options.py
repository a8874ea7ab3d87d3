"""The agent's options, as the command line gives them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from webhook.agent.domain.coexistence import Capability
from webhook.agent.domain.thresholds import DEFAULT_PRESSURE_TRANSITION_PERIOD, Threshold
from webhook.cluster.state import SLO_CONFIG_NAME, SLO_CONFIG_NAMESPACE


@dataclass
class AgentOptions:
    node_name: str
    thresholds: list[Threshold] = field(default_factory=list)   # from the --eviction-* flags
    transition_period: float = DEFAULT_PRESSURE_TRANSITION_PERIOD
    config_map: tuple[str, str] = (SLO_CONFIG_NAMESPACE, SLO_CONFIG_NAME)
    dry_run: bool = False
    enforce: bool = False          # write cgroups (``run``); ``once`` only lists the writes
    disabled: frozenset[Capability] = frozenset()   # --disable: left to another component
    sys_root: Path = Path("/sys")  # the CPU topology (cpuset suppression)
