"""``colocation-agent run``'s loop: a cycle every interval, sooner when memory moves."""

from __future__ import annotations

import logging
import threading
import time

from webhook.agent.cycle import Agent
from webhook.agent.edges.metrics_server import Health
from webhook.agent.edges.notify import WAKE, MemoryWatch

log = logging.getLogger("colocation-agent")


def run_loop(agent: Agent, interval: float, stop: threading.Event, watch: MemoryWatch | None = None,
             health: Health | None = None) -> None:
    """Cycle every ``interval`` seconds until ``stop``, sooner when ``watch`` reports memory moving.

    A failing cycle is logged, never fatal. The reaction latency (notification to first eviction request)
    is recorded per source.
    """
    eviction = agent.eviction
    source: str | None = None
    while not stop.is_set():
        started = time.monotonic()
        try:
            agent.cycle()
            if health is not None:
                health.cycle_done()
            agent.metrics.last_cycle.set(time.time())
        except Exception:  # a bug in one cycle must not take the node's protection down
            log.exception("agent cycle failed")
        if source is not None and watch is not None and watch.fired_at is not None \
                and eviction.first_evict_at is not None:
            latency = eviction.first_evict_at - watch.fired_at
            agent.metrics.reaction.labels(source).observe(latency)
            log.info("memory notification (%s) to eviction request: %.1f ms (notified at monotonic %.6f)", source,
                     latency * 1000, watch.fired_at)
        remaining = max(0.0, interval - (time.monotonic() - started))
        if watch is None:
            stop.wait(remaining)
            source = None
            continue
        try:
            source = watch.arm(eviction.trigger_level, eviction.capacity, eviction.seen_used)
            if source is None:
                source = watch.wait(remaining)
        except Exception:  # the notifications only bring the cycle forward: without them it still runs
            log.exception("memory notification failed; waiting for the next cycle")
            source = None
            stop.wait(remaining)
        if source == WAKE:
            source = None
