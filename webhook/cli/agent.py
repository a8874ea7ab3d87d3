"""colocation-agent: the node agent (memory eviction, kubelet-style thresholds, batch resources).

  run    measure, decide and act every --interval (a DaemonSet pod, or --dry-run anywhere)
  once   one measure-and-decide cycle on this machine, printed; nothing is acted on
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from webhook.agent.domain.coexistence import Capability, CapabilityError, parse_disabled
from webhook.agent.domain.durations import DurationError, parse_duration
from webhook.agent.domain.memory_notify import MODES
from webhook.agent.domain.thresholds import ThresholdError, parse_thresholds, parse_transition_period
from webhook.cli.common import (
    INTERRUPTED,
    STDOUT_CLOSED,
    UsageError,
    exit_codes,
    found_kubeconfig,
    list_first,
    namespace,
    non_negative_seconds,
    object_name,
    program_parser,
    run_main,
    setup_logging,
    unverified_tls,
    wait_synced,
)
from webhook.cli.common import port as _port
from webhook.cluster.files import StateFileError
from webhook.cluster.state import AGENT_KINDS, SLO_CONFIG_NAME, SLO_CONFIG_NAMESPACE, ClusterState
from webhook.core.quantity import format_binary_si

if TYPE_CHECKING:  # imported where used: `--help` and usage errors need none of them
    from webhook.agent.edges.collectors import Collector
    from webhook.agent.options import AgentOptions
    from webhook.cluster.sources import Source

log = logging.getLogger("colocation-agent")


# -- shared pieces ------------------------------------------------------------------------------------
def _node_name(args: argparse.Namespace) -> str:
    name = args.node_name or os.environ.get("NODE_NAME", "")
    if not name:
        raise UsageError("--node-name is required (or set NODE_NAME)")
    return name


def _options(args: argparse.Namespace, node: str, dry_run: bool, enforce: bool = False) -> AgentOptions:
    from webhook.agent.options import AgentOptions

    try:
        thresholds = parse_thresholds(args.eviction_hard, args.eviction_soft, args.eviction_soft_grace_period,
                                      args.eviction_minimum_reclaim)
        transition = parse_transition_period(args.eviction_pressure_transition_period)
    except ThresholdError as exc:
        raise UsageError(exc.with_flag()) from None
    for t in thresholds:
        if t.signal != "memory.available":
            log.warning("threshold %s is accepted but not acted on: the agent observes memory.available only",
                        t.describe())
    try:
        disabled = parse_disabled(args.disable)
    except CapabilityError as exc:
        raise UsageError(f"--disable: {exc}") from None
    return AgentOptions(node, thresholds, transition, (args.config_namespace, args.config_name), dry_run, enforce,
                        disabled, Path(args.sys_root))


def _collector(args: argparse.Namespace) -> Collector:
    from webhook.agent.edges.collectors import CollectError, Collector

    collector = Collector(Path(args.proc_root), Path(args.cgroup_root))
    try:
        collector.check()
    except CollectError as exc:
        raise UsageError(f"--proc-root: {exc}") from None
    if not collector.cgroup_root.is_dir():
        # else no pod would ever be measured, and nothing evicted, without a word
        raise UsageError(f"--cgroup-root: {args.cgroup_root}: no such directory")
    return collector


def _live_source(state: ClusterState, kubeconfig: str | None, node: str, args: argparse.Namespace) -> Source:
    from webhook.cluster.sources import LiveSourceError, build_source

    unverified_tls(kubeconfig, log.warning)

    try:
        return build_source(state, None, kubeconfig, kinds=AGENT_KINDS,
                            field_selectors={"Pod": f"spec.nodeName={node}", "Node": f"metadata.name={node}"},
                            config_map=(args.config_namespace, args.config_name))
    except LiveSourceError as exc:  # a kubeconfig that is missing or not one, no in-cluster token
        raise UsageError(str(exc)) from None


def _files_state(folder: Path, args: argparse.Namespace) -> ClusterState:
    from webhook.cluster.files import FilesSource

    state = ClusterState(AGENT_KINDS)
    try:
        FilesSource(folder, state, config_map=(args.config_namespace, args.config_name)).load()
    except StateFileError as exc:
        raise UsageError(f"--cluster-state: {exc}") from None
    return state


def _api_client(kubeconfig: str | None) -> Any:
    from webhook.agent.edges.actions import api_client_for

    unverified_tls(kubeconfig, log.warning)

    try:
        return api_client_for(kubeconfig)
    except Exception as exc:  # the kubernetes config loaders raise many types
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "in-cluster config"
        raise UsageError(f"{where}: {exc}") from None


# -- once -----------------------------------------------------------------------------------------------
def _text(out: dict[str, Any]) -> str:
    lines = [f"node {out['node']}"]
    mem = out["memory"]
    if mem:
        lines.append(f"memory: used {format_binary_si(mem['usedBytes'])} of {format_binary_si(mem['capacityBytes'])}"
                     f" ({mem['usagePercent']}%)")
    lines.append(f"release target: {out['releaseTargetBytes']} bytes")
    for e in out["evictions"]:
        usage = f"cpu {e['cpuMilli']}m" if "cpuMilli" in e else f"usage {e['usageBytes']} bytes"
        lines.append(f"evict {e['namespace']}/{e['name']} (uid {e['uid']}, priority {e['priority']}, "
                     f"{usage}): {e['reason']}")
    if not out["evictions"]:
        lines.append("evictions: none")
    lines.append("batch: " + (", ".join(f"{k}={v}" for k, v in out["batch"].items()) or "off"))
    if out.get("batchReason"):
        lines.append(f"batch why: {out['batchReason']}")
    lines.append("mid: " + (", ".join(f"{k}={v}" for k, v in out["mid"].items()) or "off"))
    if out.get("midReason"):
        lines.append(f"mid why: {out['midReason']}")
    for c in out["conditions"]:
        lines.append(f"condition {c['type']}={c['status']} ({c['reason']}): {c['message']}")
    for w in out["cgroupWrites"]:
        lines.append(f"cgroup write {w['path']}/{w['file']} = {w['value']}")
    if not out["cgroupWrites"]:
        lines.append("cgroup writes: none")
    for family in ("cpu", "memory"):
        for c in out.get(f"{family}Eviction") or []:
            held = " (cooldown)" if c["cooldown"] else ""
            lines.append(f"{family} eviction {c['feature']}: {c['decision']}{held}")
    cpu = out.get("cpuSuppress")
    if cpu and cpu["reason"]:
        lines.append(f"cpu suppress: {cpu['policy']} does not act: {cpu['reason']}")
    elif cpu and cpu["policy"]:
        cores = f", {cpu['cores']:g} cores" if cpu["cores"] is not None else ""
        lines.append(f"cpu suppress: {cpu['policy']}{cores}"
                     + (f", BE CPUs {cpu['beCPUs']}" if cpu["beCPUs"] else "")
                     + (f" (cpuset cannot act: {cpu['fallback']})" if cpu["fallback"] else ""))
    for cap, why in out["capabilitiesOff"].items():
        lines.append(f"off: {cap} ({why})")
    if out["configError"]:
        lines.append(f"config error: {out['configError']} (the last good configuration is in force)")
    lines.extend(f"config warning: {w}" for w in out["configWarnings"])
    lines.extend(f"config notice: {n}" for n in out["configNotices"])
    return "\n".join(lines) + "\n"


def once(args: argparse.Namespace) -> int:
    from webhook.agent.cycle import Agent

    setup_logging("text", logging.WARNING)
    node = _node_name(args)
    options = _options(args, node, dry_run=True)
    collector = _collector(args)
    source = None
    state: ClusterState | None = None
    if args.cluster_state is not None:
        state = _files_state(args.cluster_state, args)
    elif args.kubeconfig:
        state = ClusterState(AGENT_KINDS)
        source = _live_source(state, args.kubeconfig, node, args)
        try:
            list_first(state, source, args.sync_timeout, f"--kubeconfig {args.kubeconfig}")
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"--kubeconfig {args.kubeconfig}: {exc}") from None
    try:
        if args.cpu_sample_seconds > 0:  # CPU is a rate: prime the counters, then measure
            collector.collect(time.monotonic())
            time.sleep(args.cpu_sample_seconds)
        out = Agent(options, collector, state).cycle().as_dict()
    finally:
        if source is not None:
            source.stop()
    if args.output == "json":
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(_text(out))
    return 0


# -- run ------------------------------------------------------------------------------------------------
def _raise_open_files_limit() -> None:
    """The collector keeps three cgroup files open per pod; a 1024 soft limit would not hold 250 pods and more."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open files limit from %d: %s", soft, exc)

def run(args: argparse.Namespace) -> int:
    from webhook.agent.cycle import Agent
    from webhook.agent.edges.actions import KubeActions
    from webhook.agent.edges.metrics_server import Health, serve
    from webhook.agent.edges.notify import MemoryWatch
    from webhook.agent.loop import run_loop
    from webhook.agent.metrics import AgentMetrics

    setup_logging(args.log_format)
    _raise_open_files_limit()
    node = _node_name(args)
    options = _options(args, node, dry_run=args.dry_run, enforce=True)
    try:
        interval = parse_duration(args.interval)
    except DurationError as exc:
        raise UsageError(f'invalid argument "{args.interval}" for "--interval" flag: {exc}') from None
    if interval <= 0:
        raise UsageError(f"--interval: must be positive, got {args.interval}")
    collector = _collector(args)
    from webhook.cluster.sources import in_cluster

    state = ClusterState(AGENT_KINDS)
    actions = None
    if args.cluster_state is not None:
        if not args.dry_run and not args.kubeconfig:
            raise UsageError("--cluster-state without --kubeconfig can only --dry-run (no API to act on)")
        state = _files_state(args.cluster_state, args)
        source = None
    else:
        if not (args.kubeconfig or in_cluster()):
            args.kubeconfig, looked = found_kubeconfig("colocation-agent")   # a cluster, as kubectl finds it
            if args.kubeconfig is None:
                raise UsageError("no cluster: give --kubeconfig, run in a pod, or --cluster-state DIR with --dry-run "
                                 f"({looked})")
        source = _live_source(state, args.kubeconfig, node, args)
    if args.kubeconfig or in_cluster():
        actions = KubeActions(_api_client(args.kubeconfig), node)
    metrics = AgentMetrics()
    if source is not None:
        metrics.watch_cache(state)
    health = Health(interval)
    httpd = None
    if args.metrics_port:
        try:
            httpd = serve(args.metrics_port, metrics, health)
        except OSError as exc:
            raise UsageError(f"--metrics-port {args.metrics_port}: {exc.strerror or exc}") from None
    agent = Agent(options, collector, state, actions, metrics)
    watch = MemoryWatch(Path(args.cgroup_root), Path(args.proc_root), args.memory_notification, metrics)
    for problem in watch.problems:
        log.info("memory notification: %s", problem)
    stop = threading.Event()

    def _stop(*_: Any) -> None:
        stop.set()
        watch.wake()

    signal.signal(signal.SIGTERM, _stop)
    if source is not None:
        try:
            source.start()
        except Exception as exc:
            raise UsageError(f"cluster source: {exc}") from None
        wait_synced(state, args.sync_timeout)
    log.info("agent on node %s: interval %gs, %s, %d kubelet-style threshold(s), memory notification: %s, "
             "metrics and /healthz on :%s%s", node, interval, "dry run" if args.dry_run else "acting",
             len(options.thresholds), watch.describe(), args.metrics_port or "off",
             f"; off: {', '.join(sorted(options.disabled))}" if options.disabled else "")
    try:
        run_loop(agent, interval, stop, watch, health)
    except KeyboardInterrupt:
        pass
    finally:
        if source is not None:
            source.stop()
        watch.close()
        if httpd is not None:
            httpd.shutdown()
    return 0


# -- entry point ----------------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--node-name", default=None, help="this node's name (default: $NODE_NAME)")
    p.add_argument("--proc-root", default="/proc", metavar="DIR", help="where /proc is mounted")
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup", metavar="DIR", help="where the cgroup filesystem is")
    p.add_argument("--sys-root", default="/sys", metavar="DIR",
                   help="where sysfs is (the CPU topology, for cpuset suppression)")
    p.add_argument("--eviction-hard", metavar="SIGNAL<VALUE,...",
                   help="kubelet-style hard thresholds, e.g. memory.available<500Mi")
    p.add_argument("--eviction-soft", metavar="SIGNAL<VALUE,...",
                   help="kubelet-style soft thresholds (each needs a grace period)")
    p.add_argument("--eviction-soft-grace-period", metavar="SIGNAL=DURATION,...",
                   help="how long a soft threshold must hold, e.g. memory.available=1m30s")
    p.add_argument("--eviction-minimum-reclaim", metavar="SIGNAL=VALUE,...",
                   help="how much beyond the threshold to free, e.g. memory.available=0.5Gi")
    p.add_argument("--eviction-pressure-transition-period", metavar="DURATION",
                   help="how long a pressure condition stays after its threshold clears (default: 5m0s)")
    p.add_argument("--config-namespace", type=namespace, default=SLO_CONFIG_NAMESPACE,
                   help="namespace of the slo-controller-config ConfigMap")
    p.add_argument("--config-name", type=object_name, default=SLO_CONFIG_NAME, help="name of that ConfigMap")
    p.add_argument("--sync-timeout", type=non_negative_seconds, default=30.0, help=argparse.SUPPRESS)
    p.add_argument("--disable", action="append", default=[], metavar="CAPABILITY,...",
                   help="capabilities left to another component (repeatable, comma-separated): "
                        + ", ".join(c.value for c in Capability)
                        + " (docs/coexistence.md: beside koordlet and koord-manager)")


DESCRIPTION = "colocation-agent: the node agent (memory eviction, kubelet-style thresholds, batch resources)."
USAGE = "unusable input: a flag, a file, a kubeconfig, a port in use (one line on stderr names it)"
COMMAND_CODES: dict[str, dict[int, str]] = {  # each command's --help lists its own
    "run": {0: "stopped by SIGTERM or SIGINT", 2: USAGE},
    "once": {0: "the cycle is printed", 2: USAGE.replace(", a port in use", ""), 130: INTERRUPTED,
             141: STDOUT_CLOSED},
}
EXIT_CODES = {
    0: "done (run: stopped by SIGTERM or SIGINT)",
    2: USAGE,
    130: INTERRUPTED,
    141: f"once: {STDOUT_CLOSED}",
}


def parser() -> argparse.ArgumentParser:
    p, sub = program_parser("colocation-agent", DESCRIPTION, EXIT_CODES)

    r = sub.add_parser("run", help="measure, decide and act every --interval", epilog=exit_codes(COMMAND_CODES["run"]),
                       description="Measure the node, evict BE pods past the memory watermark or a kubelet-style "
                                   "threshold, and publish batch resources in the node status, every --interval.")
    _common(r)
    r.add_argument("--kubeconfig", metavar="F",
                   help="the cluster to act on (default: in-cluster config in a pod; else, without --cluster-state, "
                        "the kubeconfig kubectl would use: $KUBECONFIG, ~/.kube/config)")
    r.add_argument("--cluster-state", type=Path, metavar="DIR", help="a folder of manifests (with --dry-run)")
    r.add_argument("--interval", default="1s", metavar="DURATION", help="how often a full cycle runs")
    r.add_argument("--dry-run", action="store_true", help="log every decision, act on nothing")
    r.add_argument("--metrics-port", type=_port, default=9316, metavar="PORT",
                   help="port of /metrics and /healthz; 0 disables both")
    r.add_argument("--memory-notification", default="auto", choices=MODES, metavar="SOURCE",
                   help="what brings a cycle forward when memory moves: " + ", ".join(MODES)
                   + "; auto picks the best this kernel offers")
    r.add_argument("--log-format", choices=("text", "json"), default="text", help="log lines for people or pipelines")
    r.set_defaults(func=run)

    o = sub.add_parser("once", help="one measure-and-decide cycle, printed, nothing acted on",
                       epilog=exit_codes(COMMAND_CODES["once"]),
                       description="Measure this machine once and print what the agent would decide; nothing is "
                                   "acted on. With no cluster flag, no pods are known (the node alone is measured).")
    _common(o)
    src = o.add_mutually_exclusive_group()
    src.add_argument("--cluster-state", type=Path, metavar="DIR", help="a folder of manifests (pods, node, config)")
    src.add_argument("--kubeconfig", metavar="F", help="read this node's pods and config from a cluster")
    o.add_argument("-o", "--output", choices=("json", "text"), default="json", help="the cycle as JSON or text")
    o.add_argument("--cpu-sample-seconds", type=non_negative_seconds, default=0.25, metavar="S",
                   help="how long to watch CPU counters; 0: no CPU figures")
    o.set_defaults(func=once)
    return p


def main(argv: list[str] | None = None) -> int:
    return run_main("colocation-agent", parser, argv, COMMAND_CODES)


if __name__ == "__main__":
    sys.exit(main())
