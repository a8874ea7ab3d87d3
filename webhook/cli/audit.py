"""`colocation-webhook audit`: which existing pods and pod templates the rules disagree with.

Reads objects from files or a live cluster one at a time (a page of a paginated LIST, one List item), puts each
through the webhook's own chains as a dry-run CREATE, and prints a finding per object. Never writes anything.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from webhook.audit.migrate import migration
from webhook.audit.subjects import KINDS, PLURALS, Subject, kind_of, subject
from webhook.cli.common import (
    UsageError,
    exit_codes,
    found_kubeconfig,
    namespace,
    positive,
    stderr_warning,
    unverified_tls,
)
from webhook.cli.common import seconds as _seconds
from webhook.cli.state import listed_state, review_settings, review_settings_flags
from webhook.cluster.state import ClusterState, Kind
from webhook.core.selectors import SelectorError, compile_selector, parse_selector

# The rules, the file reader and the Kubernetes client are imported where they run: `colocation-webhook` builds
# this command's flags whatever command it runs.
if TYPE_CHECKING:
    from webhook.audit.findings import Finding, Tally
    from webhook.cluster.sources import Source
    from webhook.server.service import ReviewService

EXIT_DISAGREES = 1
EXIT_NOTHING = 3  # nothing to audit: a CI gate must not pass on an empty or wrong input
_GROUPS = {"Pod": ("", "v1"), "Deployment": ("apps", "v1"), "StatefulSet": ("apps", "v1"),
           "DaemonSet": ("apps", "v1"), "ReplicaSet": ("apps", "v1"), "Job": ("batch", "v1"),
           "CronJob": ("batch", "v1")}
API_KINDS = {k: Kind(k, *_GROUPS[k], PLURALS[k], True) for k in KINDS}
_BLOCK = 200  # table rows aligned together: the table streams, a block at a time, as kubectl's chunks do


def _kinds(text: str) -> tuple[str, ...]:
    try:
        kinds = tuple(dict.fromkeys(kind_of(k) for k in text.split(",") if k.strip()))
    except ValueError as exc:
        raise UsageError(f"--kinds: {exc}") from None
    if not kinds:
        raise UsageError("--kinds: name at least one kind")
    return kinds


def _selector(text: str | None) -> Any:
    if not text:
        return None
    try:
        return compile_selector(parse_selector(text))
    except SelectorError as exc:
        raise UsageError(f"-l {text!r}: {exc}") from None


# (kind, object, where, problem): an object to audit, or why what was read is none
Item = tuple[str, dict[str, Any] | None, str, str]


class Seen:
    """What the input held besides the objects audited: said when nothing was audited, and kustomize's files
    skipped, said in any case."""

    def __init__(self, kinds: tuple[str, ...] = ()) -> None:
        self.kinds = kinds                              # what is audited
        self.read = 0                                   # objects read
        self.other_kinds: dict[str, int] = {}           # kinds that are no pod or workload, by count
        self.filtered = 0                               # pods and workloads -n, -l or --kinds left out
        self.kustomize: list[tuple[str, str]] = []      # (file, what it is)

    def nothing(self, args: argparse.Namespace) -> str:
        """Why nothing was audited, in one line."""
        if not args.filename:
            where = "".join((f" in namespace {args.namespace}" if args.namespace else "",
                             f" with labels {args.selector}" if args.selector else ""))
            kinds = ", ".join(PLURALS[k] for k in self.kinds)
            return f"nothing to audit: the cluster holds no {kinds}{where}"
        source = "the input"
        if self.read == 0:
            why = f"{source} holds no object" + (" (an empty stdin: did the command before the pipe fail?)"
                                                 if "-" in args.filename else "")
        else:
            kinds = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(self.other_kinds.items()))
            why = f"{source} holds {self.read} object(s)" + (f", none a pod or workload ({kinds})" if kinds else "")
            if self.filtered:
                why += f"; {self.filtered} pod(s) or workload(s) left out by -n, -l or --kinds"
        return f"nothing to audit: {why}"

    def say_kustomize(self, prog: str) -> None:
        """One stderr line naming kustomize's files skipped, once (before the count, or on an error)."""
        if self.kustomize:
            files = "; ".join(f"{f} ({what})" for f, what in self.kustomize)
            print(f"{prog}: skipped {len(self.kustomize)} kustomize file(s), which are no objects: {files}; to audit "
                  "what kustomize builds: kubectl kustomize DIR | colocation-webhook audit -f -", file=sys.stderr)
            self.kustomize = []


def _from_files(args: argparse.Namespace, kinds: tuple[str, ...], selector: Any, seen: Seen) -> Iterator[Item]:
    from webhook.audit.files import KUSTOMIZE_GROUP, objects
    from webhook.cluster.strict import pod_unknown_fields, strict_decoding

    for where, obj in objects(args.filename, seen.kustomize):
        seen.read += 1
        if not isinstance(obj, dict):
            yield "", None, where, f"{where}: holds {type(obj).__name__}, not an object"
            continue
        kind = obj.get("kind")
        if not kind:  # a raw API list's items carry none; kubectl's output does
            yield "", None, where, f"{where}: has no kind"
            continue
        if str(obj.get("apiVersion") or "").startswith(KUSTOMIZE_GROUP):  # a kustomization under another name
            seen.kustomize.append((where, f"a {kind}"))
            continue
        if kind not in KINDS:
            seen.other_kinds[str(kind)] = seen.other_kinds.get(str(kind), 0) + 1
            continue  # Services, ConfigMaps, the cluster state's own kinds: nothing to admit
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        if kind not in kinds or (args.namespace and (meta.get("namespace") or "default") != args.namespace):
            seen.filtered += 1
            continue
        labels = meta.get("labels")
        if selector is not None and not selector.matches(labels if isinstance(labels, dict) else {}):
            seen.filtered += 1
            continue
        # kubectl's strict field validation: a misspelt field of the pod (template) would be dropped by the
        # apiserver's refusal, never applied; judged without it, the object would "agree" (docs/audit.md).
        unknown = pod_unknown_fields(obj)
        if unknown:
            yield "", None, where, f"{where}: {strict_decoding(str(kind), unknown)}"
            continue
        yield str(kind), obj, where, ""


def _from_cluster(args: argparse.Namespace, kinds: tuple[str, ...], seen: Seen) -> Iterator[Item]:
    from webhook.cluster.live import api_client, paginated

    unverified_tls(args.kubeconfig, stderr_warning("audit"))
    api = api_client(args.kubeconfig, "colocation-webhook/audit")
    try:
        for kind in kinds:
            for obj in paginated(api, API_KINDS[kind], args.namespace, args.selector, args.page_size):
                seen.read += 1
                yield kind, obj, "", ""
    finally:
        api.close()  # type: ignore[no-untyped-call]  # the client is untyped


def _subjects(items: Iterator[Item]) -> Iterator[Subject]:
    for kind, obj, where, problem in items:
        yield subject(obj, kind) if obj is not None else Subject("", "", where, problem=problem)


def _state(args: argparse.Namespace) -> tuple[ClusterState, Source | None]:
    """The state the rules read: --cluster-state, else the audited cluster's, else the embedded example."""
    from webhook.cluster.sources import describe

    live = bool(args.kubeconfig or args.in_cluster) and args.cluster_state is None
    if args.cluster_state is None and not live:
        print(f"audit: cluster state: {describe(None, None)}; pass --cluster-state DIR for your cluster's",
              file=sys.stderr)
    return listed_state(args.cluster_state, args.kubeconfig if live else None, bool(args.in_cluster and live),
                        args.sync_timeout)


def _cell(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def _table(rows: list[Finding], header: bool) -> str:
    cols = [(f.namespace, f"{f.kind.lower()}/{f.name}" if f.kind else f.name, f.owner or "-", f.verdict,
             f.reason or "-", _cell(f.detail or "-")) for f in rows]
    if header:
        cols.insert(0, ("NAMESPACE", "NAME", "OWNER", "VERDICT", "REASON", "DETAIL"))
    widths = [max(len(c[i]) for c in cols) for i in range(5)]
    return "".join("   ".join(c[i].ljust(widths[i]) for i in range(5)) + "   " + c[5] + "\n" for c in cols)


def _summary(tally: Tally) -> str:
    from webhook.audit.findings import AGREES

    rows = [("VERDICT", "REASON", "OBJECTS")]
    rows += [(v, r or "-", str(n)) for (v, r), n in sorted(tally.reasons.items(), key=lambda x: (-x[1], x[0]))]
    rows.append((AGREES, "-", str(tally.verdicts[AGREES])))
    w0, w1 = (max(len(r[i]) for r in rows) for i in range(2))
    return "".join(f"{a.ljust(w0)}   {b.ljust(w1)}   {c}\n" for a, b, c in rows)


def run(args: argparse.Namespace) -> int:
    from webhook.audit.files import ObjectsError
    from webhook.cluster.live import LiveSourceError
    from webhook.server.service import ReviewService

    if not args.filename and not (args.kubeconfig or args.in_cluster):
        args.kubeconfig, looked = found_kubeconfig("colocation-webhook")   # a cluster, as kubectl finds it
        if args.kubeconfig is None:
            raise UsageError("name what to audit: -f FILE|DIR (kubectl get ... -o json|yaml output, manifests), "
                             f"or a cluster with --kubeconfig F or --in-cluster ({looked})")
    if args.filename and (args.kubeconfig or args.in_cluster):
        raise UsageError("-f reads objects from files; --kubeconfig/--in-cluster from a cluster: choose one "
                         "(--cluster-state DIR sets the state the rules read)")
    kinds, selector = _kinds(args.kinds), _selector(args.selector)
    settings = review_settings(args)
    settings.pinned_draw = 0  # a workload a profile converts some pods of is named, whatever the share
    settings.warning_limit = None  # a finding's detail holds its warnings whole (the table cuts its cells)
    logging.getLogger("webhook.admission").setLevel(logging.WARNING)  # each denial is a finding, not a log line
    seen = Seen(kinds)
    items = _from_files(args, kinds, selector, seen) if args.filename else _from_cluster(args, kinds, seen)
    try:
        if args.migrate:
            try:
                return _migrate(args, items, seen)
            except (ObjectsError, LiveSourceError) as exc:
                raise UsageError(str(exc)) from None
        state, source = _state(args)
        try:
            service = ReviewService(state, settings)
            return _report(args, service, _subjects(items), seen)
        except (ObjectsError, LiveSourceError) as exc:
            raise UsageError(str(exc)) from None
        finally:
            if source is not None:
                source.stop()
    finally:
        seen.say_kustomize("audit")


def _report(args: argparse.Namespace, service: ReviewService, subjects: Iterator[Subject], seen: Seen) -> int:
    from webhook.audit.findings import AGREES, Tally, audit

    tally, block, header = Tally(), [], True
    out = sys.stdout
    try:
        for s in subjects:
            f = audit(service, s)
            tally.add(f)
            if f.verdict == AGREES and not args.all:
                continue
            if args.output == "json":
                out.write(orjson.dumps(f.as_json()).decode() + "\n")
            elif args.output == "table":
                block.append(f)
                if len(block) >= _BLOCK:
                    out.write(_table(block, header))
                    block, header = [], False
    finally:  # a file that breaks half-way still shows what was found before it
        if args.output == "table" and block:
            out.write(_table(block, header))
    seen.say_kustomize("audit")
    if tally.total == 0:
        print(f"audit: {seen.nothing(args)}", file=sys.stderr)
        return EXIT_NOTHING
    if args.output == "summary":
        out.write(_summary(tally))
    print(f"audit: {tally.line()}", file=sys.stderr)
    return 0 if tally.all_agree else EXIT_DISAGREES


def _migrate(args: argparse.Namespace, items: Iterator[Item], seen: Seen) -> int:
    """Print, per object on the legacy protocol, the patch that moves it; 1 when any is."""
    counted = found = conflicts = 0
    out = sys.stdout
    for kind, obj, _where, _problem in items:
        if obj is None:
            continue
        counted += 1
        m = migration(obj, kind)
        if m is None:
            continue
        found += 1
        conflicts += len(m.conflicts)
        if args.output == "json":
            out.write(orjson.dumps(m.as_json()).decode() + "\n")
            continue
        # comments and commands only: the output stays a script a shell can run
        out.write(f"# {kind} {m.namespace}/{m.name}{': ' + m.note if m.note and m.ops else ''}\n")
        out.write("".join(f"# conflict: {c}\n" for c in m.conflicts))
        if m.ops:  # a pod's patch is what to make it again from, not a command that would work
            out.write(f"# {m.command()}\n" if m.note else f"{m.command()}\n")
    seen.say_kustomize("audit --migrate")
    if counted == 0:
        print(f"audit --migrate: {seen.nothing(args)}", file=sys.stderr)
        return EXIT_NOTHING
    unresolved = (f"; {conflicts} conflict(s) between the two protocols left as they are, named with their "
                  "object" if conflicts else "")
    print(f"audit --migrate: {found} of {counted} object(s) use the legacy ack-slo-manager protocol{unresolved}",
          file=sys.stderr)
    return EXIT_DISAGREES if found else 0


def add_parser(sub: Any, codes: dict[int, str]) -> None:
    """``audit`` as a command of ``sub``; ``codes``: its exit codes, for its --help."""
    a = sub.add_parser(
        "audit", help="which existing pods and pod templates the rules would change or refuse (never writes)",
        epilog=exit_codes(codes),
        description="Put existing pods, and the pod templates of Deployments, StatefulSets, DaemonSets, "
                    "ReplicaSets, Jobs and CronJobs, through the webhook's chains as a dry-run CREATE, and say of "
                    "each whether the rules agree with it, would change it (and how; what the apiserver's Priority "
                    "plugin writes into every pod anyway is no change) or would deny it (and why). "
                    "Exit 0 when every object agrees, 1 when any does not, 2 on unusable input, 3 when the input "
                    "holds nothing to audit. kustomize's own files (a kustomization, its patches) are skipped, "
                    "each named: to audit what kustomize builds, kubectl kustomize DIR | colocation-webhook audit "
                    "-f -.")
    src = a.add_mutually_exclusive_group()
    a.add_argument("-f", "--filename", action="append", metavar="FILE|DIR",
                   help="objects to audit: kubectl get ... -o json|yaml output, manifests, a folder of them; "
                        "- reads stdin; repeatable")
    src.add_argument("--kubeconfig", metavar="F",
                     help="audit this cluster's objects (paginated lists); with no -f and no --in-cluster, the "
                          "kubeconfig kubectl would use ($KUBECONFIG, ~/.kube/config)")
    src.add_argument("--in-cluster", action="store_true", help="audit the cluster this runs in (its ServiceAccount)")
    a.add_argument("--cluster-state", type=Path, metavar="DIR",
                   help="a folder of manifests with the state the rules read (profiles, classes, namespaces, quotas); "
                        "default: the audited cluster's, or with -f the embedded example state")
    a.add_argument("-n", "--namespace", type=namespace, metavar="NS", help="only objects in this namespace")
    a.add_argument("-l", "--selector", metavar="SELECTOR", help="only objects with these labels (kubectl syntax)")
    a.add_argument("--kinds", default=",".join(PLURALS.values()), metavar="KINDS",
                   help="comma-separated kinds to audit (kubectl names: po, deploy, sts, ds, rs, job, cj)")
    a.add_argument("-o", "--output", choices=("table", "json", "summary"), default="table",
                   help="a table, JSON lines (one finding a line) or the count by verdict and reason")
    a.add_argument("--all", action="store_true", help="list the objects that agree too")
    a.add_argument("--migrate", action="store_true",
                   help="instead: the kubectl patch that moves each object off the legacy ack-slo-manager protocol "
                        "(alibabacloud.com/qosClass, alibabacloud.com/reclaimed-*); -o json: one patch a line")
    a.add_argument("--page-size", type=positive, default=500, metavar="N", help="objects per list request")
    a.add_argument("--sync-timeout", type=_seconds, default=30.0, metavar="S",
                   help="with a cluster: how long listing its state may take")
    review_settings_flags(a)
    a.set_defaults(func=run)
