"""colocation-webhook: serve the admission webhook, review a pod offline, or make its certificates."""

from __future__ import annotations

import argparse
import logging
import re
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import orjson
import yaml

from webhook.cli import audit
from webhook.cli.common import (
    INTERRUPTED,
    LOG_LEVELS,
    STDOUT_CLOSED,
    UsageError,
    check_host,
    exit_codes,
    first_positional,
    found_kubeconfig,
    listen,
    listen_port,
    namespace,
    non_negative_seconds,
    object_name,
    positive,
    program_parser,
    run_main,
    service_name,
    setup_logging,
)
from webhook.cli.common import port as _port
from webhook.cli.common import seconds as _seconds
from webhook.cli.state import cluster_state, listed_state, review_settings, review_settings_flags

# What a command needs is imported where it runs: a command that fails on its flags or its file, and --help,
# start without the rules, the edge or the Kubernetes client.
if TYPE_CHECKING:
    from webhook.admission.context import Settings
    from webhook.cluster.state import ClusterState

log = logging.getLogger("colocation-webhook")
EXIT_DENIED = 1
DEFAULT_CERT_DIR = Path("certs")


# -- serve ----------------------------------------------------------------------------------
def serve(args: argparse.Namespace) -> int:
    from webhook.cluster.sources import describe
    from webhook.tls.watch import pair_unusable, wait_for_pair

    setup_logging(args.log_format, args.log_level)
    if bool(args.tls_cert_file) != bool(args.tls_private_key_file):
        raise UsageError("--tls-cert-file and --tls-private-key-file go together")
    if args.cluster_state is not None and args.kubeconfig:
        raise UsageError("--kubeconfig and --cluster-state are alternatives; give one")
    if args.wait_for_certs and not args.tls_cert_file:
        raise UsageError("--wait-for-certs needs --tls-cert-file and --tls-private-key-file")
    if args.cert_dir is not None and args.tls_cert_file:
        raise UsageError("--cert-dir is where serve keeps a pair of its own; with --tls-cert-file it is not used")
    if args.metrics_port and args.metrics_port == args.port:
        raise UsageError(f"--metrics-port {args.metrics_port} is the admission port (--port); give another, or 0")
    check_host(args.host)  # before a certificate is made for it
    settings = review_settings(args)
    state, source = cluster_state(args.cluster_state, args.kubeconfig, watch=True, say=log.warning)
    state.max_age = args.max_cache_age or None   # a folder's state has no age: only the live source's counts
    if args.tls_cert_file:
        cert, key = Path(args.tls_cert_file), Path(args.tls_private_key_file)
        if args.wait_for_certs and not wait_for_pair(cert, key):
            return 0
        for flag, p in (("--tls-cert-file", cert), ("--tls-private-key-file", key)):
            if not p.is_file():
                raise UsageError(f"{flag}: {p} does not exist" if not p.exists() else f"{flag}: {p} is not a file")
        # The checks a renewal gets (parses, key matches, in date) before serving, not OpenSSL's bare "PEM lib".
        if (reason := pair_unusable(cert, key)) is not None:
            raise UsageError(f"--tls-cert-file/--tls-private-key-file: {reason}")
    else:
        from webhook.tls.certs import CertsError, ensure_localhost  # cryptography: only to make a pair

        cert_dir = args.cert_dir or DEFAULT_CERT_DIR
        try:
            paths, what = ensure_localhost(cert_dir.absolute(), args.host)
        except CertsError as exc:
            raise UsageError(f"--cert-dir {cert_dir}: {exc}") from None
        cert, key = paths.cert, paths.key
        log.info("%s", what)
    # The server itself once the input is known to be usable: bad input is answered without loading it.
    from webhook.server.app import create_server
    from webhook.server.asgi import EdgePolicy
    from webhook.server.memory import this_process
    from webhook.server.serving import AdmissionServer, ServeOptions, url_host
    from webhook.tls.policy import ClientCAError

    policy = EdgePolicy(max_in_flight=args.max_in_flight, max_large_in_flight=args.max_large_in_flight,
                        memory=this_process())
    webhook = create_server(state, settings, policy=policy, openapi=args.openapi)
    options = ServeOptions(host=args.host, port=args.port, metrics_port=args.metrics_port,
                           read_header_timeout=args.read_header_timeout, read_timeout=args.read_timeout,
                           drain_delay=args.drain_delay)
    # Both ports bound before anything says it serves: a port in use is one line and exit 2.
    listener = listen(args.host, args.port, "--port")
    metrics_listener = listen(args.host, args.metrics_port, "--metrics-port") if args.metrics_port else None
    try:
        # Hot reload of the pair (a renewed Secret, cert-manager): no restart, the old pair serves until then.
        server = AdmissionServer(webhook, options, cert, key, args.client_ca_file, metrics_socket=metrics_listener)
    except ClientCAError as exc:
        raise UsageError(f"--client-ca-file: {exc}") from None
    except (ssl.SSLError, OSError) as exc:
        raise UsageError(f"cannot load the TLS certificate/key ({cert}, {key}): {exc}") from None
    log.info("cluster state: %s", describe(args.cluster_state, args.kubeconfig))
    source.start()
    routes = "/mutate, /validate, /healthz, /readyz" + (", /openapi.json, /docs" if args.openapi else "")
    log.info("serving https://%s:%d (%s)%s; metrics %s", url_host(args.host), args.port, routes,
             f", client certificates from {args.client_ca_file} required for reviews" if args.client_ca_file else "",
             f"on http://{url_host(args.host)}:{args.metrics_port}/metrics" if args.metrics_port else "off")
    try:
        server.run(sockets=[listener])
    finally:
        source.stop()
    return 0


# -- review ---------------------------------------------------------------------------------
class _Head(msgspec.Struct):
    """The one field of a JSON document read before the rest: decoding into it skips every other field without
    building it (``msgspec``), so a file that is no Pod is said to be none at once, whatever its size."""

    kind: Any = None


_LEADING_SPACE = re.compile(rb"[ \t\r\n]*")


def _wrong_kind(kind: object, shown: str, what: str) -> None:
    """A UsageError for a document of a kind ``review`` does not take (--old: the Pod before the update); a
    workload or a list is pointed at ``audit -f``, which reviews their pods and pod templates."""
    from webhook.audit.subjects import KINDS

    if what == "--old":
        if kind not in (None, "Pod"):
            raise UsageError(f"{shown}: expected the Pod before the update, got kind {kind!r}")
    elif kind not in (None, "Pod", "AdmissionReview"):
        name = "-" if shown == "stdin" else shown
        audit_it = {**{k: "a workload's pod template" for k in KINDS}, "List": "each pod and workload of a List",
                    "PodList": "each pod and workload of a List"}.get(str(kind))
        pointer = f": audit -f {name} checks {audit_it}" if audit_it else ""
        raise UsageError(f"{shown}: {f'is a {kind}' if isinstance(kind, str) else f'has kind {kind!r}'}; review "
                         f"takes a Pod or AdmissionReview{pointer}")


def _json_document(data: bytes, shown: str, what: str) -> dict[str, Any] | None:
    """The object of a JSON file, its kind checked before the whole is decoded; None when it is not JSON (YAML's
    flow style, several documents): read as YAML then."""
    try:
        head = msgspec.json.decode(data, type=_Head)
    except msgspec.DecodeError:
        return None
    _wrong_kind(head.kind, shown, what)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _load_document(path: Path, what: str) -> dict[str, Any]:
    """The one object of a Pod or AdmissionReview file (``-``: stdin), or a UsageError saying what is there.
    ``what``: the flag it came with ("" for the positional file). JSON (``kubectl get -o json``) is read by the
    fast decoders, and its kind checked first; anything else as YAML, by the one YAML reader (aliases bounded as
    kube-apiserver bounds them)."""
    from webhook.cluster.files import found, utf8
    from webhook.cluster.yaml_input import load_all, yaml_problem

    name = "stdin" if str(path) == "-" else str(path)
    shown = f"{what} {name}" if what else name
    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except IsADirectoryError:
        raise UsageError(f"{shown}: is a directory; expected a Pod or AdmissionReview file") from None
    except OSError as exc:
        raise UsageError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    start = _LEADING_SPACE.match(data)
    if start is not None and data[start.end():start.end() + 1] == b"{":
        doc = _json_document(data, shown, what)
        if doc is not None:
            return _strict_pod(doc, data.decode("utf-8", "replace"), shown)
    try:
        text = utf8(data)
    except ValueError as exc:
        raise UsageError(f"{shown}: {exc}; expected a Pod or AdmissionReview as YAML or JSON") from None
    try:
        loaded = load_all(text)
    except yaml.YAMLError as exc:
        raise UsageError(yaml_problem(Path(shown), exc)) from None
    docs = [d for d in loaded if d is not None]  # an empty document (a trailing ---) is no document
    expected = "expected one Pod or AdmissionReview object"
    if not docs:
        # `null` (JSON or YAML) is a document, and says nothing of a Pod: not the same mistake as an empty file
        raise UsageError(f"{shown}: {'holds null' if loaded else 'is empty'}; {expected}")
    if len(docs) > 1:
        raise UsageError(f"{shown}: holds {len(docs)} documents; {expected}")
    if not isinstance(docs[0], dict):
        raise UsageError(f"{shown}: holds {found(docs[0])}; {expected}")
    _wrong_kind(docs[0].get("kind"), shown, what)
    return _strict_pod(docs[0], text, shown)


def _strict_pod(doc: dict[str, Any], text: str, shown: str) -> dict[str, Any]:
    """``doc`` when it is no Pod, or a Pod with no unknown and no repeated field; else kubectl's strict field
    validation's refusal, at the line of the first (JSON is YAML: composed again for the lines). An
    AdmissionReview's pod is what an apiserver decoded: not judged here."""
    from webhook.cluster.files import line_at
    from webhook.cluster.strict import format_path, pod_unknown_fields, strict_decoding
    from webhook.cluster.yaml_input import compose_all, duplicate_keys

    if doc.get("kind") != "Pod":
        return doc
    try:
        root: Any = next(iter(compose_all(text)), None)
    except yaml.YAMLError:
        root = None
    repeated = duplicate_keys(root)
    unknown = pod_unknown_fields(doc)
    if not unknown and not repeated:
        return doc
    line = repeated[0][1] if repeated else line_at(root, unknown[0])
    raise UsageError(f"{shown}:{line}: {strict_decoding('Pod', unknown, [format_path(p) for p, _ in repeated])}")


def _review_of(doc: dict[str, Any], path: Path, operation: str | None, old: dict[str, Any] | None) -> dict[str, Any]:
    """The AdmissionReview the apiserver would send for this file: the file itself when it is one (with
    --operation applied), else a dry-run v1 review of the Pod."""
    from webhook.admission.review import pod_review

    if doc.get("kind") == "AdmissionReview":
        request = doc.get("request")
        if isinstance(request, dict) and operation:
            request["operation"] = operation
        return doc
    _wrong_kind(doc.get("kind"), str(path), "")
    op = operation or ("UPDATE" if old is not None else "CREATE")
    if op == "UPDATE" and old is None:
        raise UsageError("--operation UPDATE needs --old FILE (the pod before the update)")
    return pod_review(doc, op, old)


def review(args: argparse.Namespace) -> int:
    if str(args.file) == "-" and args.old is not None and str(args.old) == "-":
        raise UsageError("the pod and --old cannot both be read from stdin (-)")
    if args.old is not None and args.operation == "CREATE":
        raise UsageError("--old is the pod before an UPDATE, and a CREATE has none: give --operation UPDATE, or "
                         "no --old")
    settings = review_settings(args)
    settings.warning_limit = None  # read on a terminal: whole (the server cuts each to the apiserver's 120)
    old = _load_document(args.old, "--old") if args.old else None
    doc = _load_document(args.file, "")
    if old is not None and doc.get("kind") == "AdmissionReview":   # else its own would be replaced unsaid
        raise UsageError(f"--old {args.old}: {args.file} is an AdmissionReview, which carries the pod before an "
                         "update itself (request.oldObject); --old goes with a Pod file")
    state, source = listed_state(args.cluster_state, args.kubeconfig, args.in_cluster, args.sync_timeout)
    try:
        return _review(args, settings, state, doc, old)
    finally:
        if source is not None:
            source.stop()


def _review(args: argparse.Namespace, settings: Settings, state: ClusterState, doc: dict[str, Any],
            old: dict[str, Any] | None) -> int:
    from webhook.admission.review import encode_response
    from webhook.server.service import ReviewService, dry_run

    review = _review_of(doc, args.file, args.operation, old)
    service = ReviewService(state, settings)
    explain: list[str] | None = [] if args.explain else None
    run = dry_run(service, review, explain)
    if run.problem:
        raise UsageError(f"{args.file}: {run.problem}")
    first, mutation, final = run.mutating, run.mutation, run.final
    if explain is not None:
        print("\n".join(explain) or "no rule handled this request", file=sys.stderr)
        print(f"patch: {orjson.dumps(mutation.patch).decode()}", file=sys.stderr)
    outcome = run.outcome
    if args.output == "review":  # the answer itself says allowed: false, with the status and no patch
        answer = orjson.loads(encode_response(first.api_version, first.uid, outcome))
        sys.stdout.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not outcome.allowed:
        pass  # no pod is admitted and no patch applied: a pod on stdout would read as the one that would run
    elif args.output == "patch":
        sys.stdout.write(orjson.dumps(mutation.patch, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif args.output == "json":
        sys.stdout.write(orjson.dumps(final, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(final, sort_keys=False))
    for w in outcome.warnings:
        print(f"Warning: {w}", file=sys.stderr)
    if not outcome.allowed:
        nothing = "" if args.output == "review" else f" (no {'patch' if args.output == 'patch' else 'pod'} on stdout)"
        print(f"denied by {outcome.rule or 'webhook'}: {outcome.message}{nothing}", file=sys.stderr)
        return EXIT_DENIED
    return 0


# -- certs --------------------------------------------------------------------------------------
def certs_generate(args: argparse.Namespace) -> int:
    from webhook.tls.certs import CertsError, generate_for_service

    if args.new_ca and not args.force:  # alone it would be ignored where a pair is kept: say so instead
        raise UsageError("--new-ca replaces the CA, and so the caBundle of every webhook configuration: it goes "
                         "with --force")

    try:
        paths, what = generate_for_service(args.out, args.service, args.namespace, days=args.days,
                                           force=args.force, new_ca=args.new_ca)
    except CertsError as exc:  # refusing to overwrite is unusable input like any other: exit 2
        raise UsageError(str(exc)) from None
    print(what, file=sys.stderr)
    print(f"CA {paths.ca_cert}, certificate {paths.cert}, key {paths.key} (keys are mode 0600)", file=sys.stderr)
    return 0


def certs_ca_bundle(args: argparse.Namespace) -> int:
    from webhook.tls.certs import CertsError, ca_bundle

    try:
        print(ca_bundle(args.out))
    except CertsError as exc:
        raise UsageError(str(exc)) from None
    return 0


def policies(args: argparse.Namespace) -> int:
    """Print the stateless validating rules as a ValidatingAdmissionPolicy and its binding (offline); with a
    cluster state, each ClusterColocationProfile's policy and binding too; ``--mutating``: the
    MutatingAdmissionPolicies that convert instead (Kubernetes 1.36+); ``--check``: compare them with the applied
    ones instead (exit 1 when one is missing, stale or left over)."""
    from webhook.policies import invariants as generated
    from webhook.policies import mutating as mutating_policies
    from webhook.policies import profiles as profile_policies

    if args.check is not None and args.cluster_state is None and not args.kubeconfig:
        args.kubeconfig, looked = found_kubeconfig("colocation-webhook")   # a cluster, as kubectl finds it
        if args.kubeconfig is None:
            raise UsageError("--check compares with the profiles of a cluster state: give --cluster-state DIR or "
                             f"--kubeconfig F ({looked})")
    live = bool(args.kubeconfig)
    # Without a cluster state: what the components ship, with no profile.
    fixed: list[dict[str, Any]] = [] if args.mutating else [generated.policy(), generated.binding()]
    profile_docs: list[dict[str, Any]] = (
        [*mutating_policies.band_mutation([]), *mutating_policies.extended_resource_spec_mutation()]
        if args.mutating else profile_policies.band_policy([]))
    if args.cluster_state is not None or live:
        applied = _applied(args.check) if args.check is not None else None
        state, source = listed_state(args.cluster_state, args.kubeconfig, False, args.sync_timeout)
        try:
            if args.mutating:
                made = mutating_policies.render_mutating(state.colocation_profiles(), state.priority_class)
                notes, profile_docs = made.notes, made.objects
                count = sum(1 for d in made.objects if d["kind"] == "MutatingAdmissionPolicy") - 2
            else:
                rendered = profile_policies.render(state.colocation_profiles(), state.priority_class)
                notes, profile_docs = rendered.notes, [*rendered.band, *rendered.objects]
                count = len(rendered.objects) // 2
        finally:
            if source is not None:
                source.stop()
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        if applied is not None:
            components = (mutating_policies.COMPONENT,) if args.mutating else None
            found_stale = profile_policies.stale([*fixed, *profile_docs], applied, components)
            for s in found_stale:
                print(f"{s.kind}/{s.name}: {s.problem}")
            if not found_stale:
                what = ("the band conversion, the extended-resource-spec annotation" if args.mutating
                        else "the pod invariants, the band conversion")
                print(f"the applied policies are up to date ({what} and {count} profile(s))")
            return EXIT_DENIED if found_stale else 0
    if args.output == "json":
        items = [*fixed, *profile_docs]
        print(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}, option=orjson.OPT_INDENT_2).decode())
    else:
        if args.mutating:
            print(mutating_policies.HEADER, end="")
        else:
            print(generated.render(), end="")
        for i, doc in enumerate(profile_docs):
            print(("---\n" if i or not args.mutating else "") + yaml.safe_dump(doc, sort_keys=False, width=120),
                  end="")
    return 0


def _applied(path: Path) -> list[dict[str, Any]]:
    """The applied policies and bindings: a YAML/JSON stream or a List (``kubectl get ... -o yaml``)."""
    from webhook.cluster.yaml_input import load_all, yaml_problem

    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        docs = [d for d in load_all(text) if d is not None]
    except OSError as exc:
        raise UsageError(f"--check: {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"--check: {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--check: {yaml_problem(path, exc)}") from None
    out: list[dict[str, Any]] = []
    for d in docs:
        if not isinstance(d, dict):
            raise UsageError(f"--check: {path}: a document is not an object")
        items = d.get("items") if str(d.get("kind", "")).endswith("List") else [d]
        if not isinstance(items, list):
            raise UsageError(f"--check: {path}: items is not a list")
        out.extend(i for i in items if isinstance(i, dict))
    return out


def certs_bootstrap(args: argparse.Namespace) -> int:
    """In-cluster (the install's Job): exit 0 done, 1 an API request failed (the Job retries), 2 unusable input."""
    from webhook.cluster.live import _client_configuration
    from webhook.cluster.sources import LiveSourceError, in_cluster
    from webhook.tls.bootstrap import BootstrapError, BootstrapInputError, Target, bootstrap

    setup_logging(args.log_format)
    kubeconfig = args.kubeconfig
    if kubeconfig is None and not in_cluster():   # outside the cluster, the one kubectl would use
        kubeconfig, _ = found_kubeconfig("colocation-webhook")
    target = Target(namespace=args.namespace, service=args.service, secret_name=args.secret_name,
                    mutating=args.mutating_webhook_configuration, validating=args.validating_webhook_configuration,
                    days=args.days)
    try:
        from kubernetes import client

        api_client = client.ApiClient(_client_configuration(kubeconfig))
        bootstrap(api_client, target)
    except (BootstrapInputError, LiveSourceError) as exc:
        raise UsageError(str(exc)) from None
    except BootstrapError as exc:
        log.error("%s", exc)
        return EXIT_DENIED
    return 0


# -- entry point ----------------------------------------------------------------------------
DESCRIPTION = "colocation-webhook: the admission webhook for colocated clusters."
def _usage(what: str) -> str:
    return f"unusable input: {what} (one line on stderr names it)"


COMMAND_CODES: dict[str, dict[int, str]] = {  # each command's --help lists its own, and what they mean for it
    "serve": {0: "stopped by SIGTERM (after --drain-delay) or SIGINT",
              2: _usage("a flag, a file, a certificate, a kubeconfig, a port in use")},
    "review": {0: "the pod is admitted", 1: "the pod is denied (the reason on stderr)",
               2: _usage("a flag, a file, a cluster state, a kubeconfig"), 130: INTERRUPTED, 141: STDOUT_CLOSED},
    "audit": {0: "every object agrees (--migrate: none uses the legacy protocol)",
              1: "an object the rules would change or deny (--migrate: one uses the legacy protocol)",
              2: _usage("a flag, a file, a cluster state, a kubeconfig, an API error while listing"),
              3: "nothing to audit: no pod or workload in the input (an empty file or stdin, other kinds only, "
                 "all left out by -n, -l or --kinds), said on stderr",
              130: INTERRUPTED, 141: STDOUT_CLOSED},
    "policies": {0: "printed (--check: the applied profile policies are up to date)",
                 1: "--check: an applied profile policy is missing, stale or left over",
                 2: _usage("a flag, a file, a cluster state, a kubeconfig"), 130: INTERRUPTED, 141: STDOUT_CLOSED},
    "certs generate": {0: "written, or a valid pair for these names kept",
                       2: _usage("a flag, a folder, a pair for other names without --force"), 130: INTERRUPTED},
    "certs ca-bundle": {0: "printed", 2: _usage("a flag, a missing or unreadable CA"), 130: INTERRUPTED,
                        141: STDOUT_CLOSED},
    "certs bootstrap": {0: "done: the Secret is usable and the configurations hold its CA",
                        1: "an API request failed (the message names it; a Job retries)",
                        2: _usage("a flag, a kubeconfig"), 130: INTERRUPTED},
}
COMMANDS = {name.split()[0] for name in COMMAND_CODES}
# The program's --help: every code any command ends in; 1 differs by command, so it names them.
EXIT_CODES = {
    0: "done",
    1: "; ".join(f"{command}: {codes[1]}" for command, codes in COMMAND_CODES.items() if 1 in codes),
    2: _usage("a flag, a file, a certificate, a kubeconfig, a port in use"),
    3: f"audit: {COMMAND_CODES['audit'][3]}",
    130: INTERRUPTED,
    141: STDOUT_CLOSED,
}


def _state_flags(p: argparse.ArgumentParser, state_help: str, kubeconfig_help: str,
                 in_cluster_help: str | None = None) -> None:
    """Where a command reads its cluster state: ``--cluster-state DIR``, ``--kubeconfig F`` or (where it takes it)
    ``--in-cluster``, one of them, and how long a cluster's first list may take."""
    source = p.add_mutually_exclusive_group()
    source.add_argument("--cluster-state", type=Path, metavar="DIR", help=state_help)
    source.add_argument("--kubeconfig", metavar="F", help=kubeconfig_help)
    if in_cluster_help is not None:
        source.add_argument("--in-cluster", action="store_true", help=in_cluster_help)
    p.add_argument("--sync-timeout", type=_seconds, default=30.0, metavar="S",
                   help=f"with --kubeconfig{' or --in-cluster' if in_cluster_help else ''}: how long the first list "
                        "may take")


def _serve_flags(p: argparse.ArgumentParser) -> None:
    from webhook.cluster.freshness import MAX_CACHE_AGE
    from webhook.server.asgi import EdgePolicy  # the whole edge: only for serve
    from webhook.server.serving import ServeOptions

    p.add_argument("--host", default="0.0.0.0", help="address to listen on")
    p.add_argument("--port", type=listen_port, default=8443, help="HTTPS port")
    p.add_argument("--tls-cert-file", metavar="F",
                   help="serving certificate (PEM); with no TLS flags serve makes a pair of its own (--cert-dir)")
    p.add_argument("--tls-private-key-file", metavar="F", help="its private key (PEM); goes with --tls-cert-file")
    p.add_argument("--cert-dir", type=Path, metavar="DIR",
                   help=f"without TLS flags: the folder of serve's own pair for localhost and --host "
                        f"(localhost.crt/.key; default: {DEFAULT_CERT_DIR}/), signed by the CA there (ca.crt/.key) "
                        "or a new one; files serve did not write are never replaced")
    p.add_argument("--wait-for-certs", action="store_true",
                   help="wait until the TLS files exist and are a usable pair (a Secret created after the pod "
                        "starts) instead of exiting with code 2")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--kubeconfig", metavar="F",
                     help="list+watch a cluster with this kubeconfig (default: in-cluster config when "
                          "KUBERNETES_SERVICE_HOST is set, else the embedded example state)")
    src.add_argument("--cluster-state", type=Path, metavar="DIR",
                     help="a folder of manifests to serve from, reloaded when a file changes")
    p.add_argument("--max-cache-age", type=non_negative_seconds, default=MAX_CACHE_AGE, metavar="S",
                   help="with a live cluster: /readyz answers 503 while a kind's cache has had no data (an event, a "
                        "bookmark, a list) for longer, so the apiserver calls the replicas that are current "
                        "(docs/availability.md, \"A cache that falls behind\"); 0: never")
    p.add_argument("--client-ca-file", type=Path, metavar="F",
                   help="PEM CA bundle: reviews are answered only to a client presenting a certificate it signed "
                        "(the apiserver, through its AdmissionConfiguration kubeConfigFile; docs/security.md); "
                        "/healthz and /readyz stay open to the kubelet's probes")
    p.add_argument("--metrics-port", type=_port, default=8080, metavar="PORT",
                   help="plain-HTTP port of /metrics, apart from the admission port; 0 disables it")
    p.add_argument("--openapi", action="store_true", help="also serve /openapi.json and /docs")
    p.add_argument("--max-in-flight", type=positive, default=EdgePolicy().max_in_flight, metavar="N",
                   help="reviews read or answered at once; one more is answered 429 with Retry-After")
    p.add_argument("--max-large-in-flight", type=positive, default=EdgePolicy().max_large_in_flight, metavar="N",
                   help="of them, reviews with a body over 64 KiB (answered one at a time off the event loop)")
    p.add_argument("--read-header-timeout", type=_seconds, default=ServeOptions().read_header_timeout, metavar="S",
                   help="seconds for the TLS handshake and then for a request's headers; the connection is "
                        "closed past it")
    p.add_argument("--read-timeout", type=_seconds, default=ServeOptions().read_timeout, metavar="S",
                   help="seconds for a whole request, body included, from its first byte (408 past it)")
    p.add_argument("--drain-delay", type=non_negative_seconds, default=ServeOptions().drain_delay, metavar="S",
                   help="after SIGTERM: seconds of answering reviews while /readyz is 503, so the endpoints change "
                        "reaches the apiserver before the listeners close; then in-flight reviews get "
                        f"{ServeOptions().graceful_shutdown_seconds} s; a second signal stops at once; 0 stops at once")
    review_settings_flags(p)
    p.add_argument("--log-format", choices=("text", "json"), default="text", help="log lines for people or pipelines")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="the least severe level logged")


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line; ``only``: a run of that command, which needs no other command's flags (serve's import
    the whole edge for their defaults)."""
    p, sub = program_parser("colocation-webhook", DESCRIPTION, EXIT_CODES)

    s = sub.add_parser("serve", help="serve /mutate and /validate over TLS (the embedded example state when no "
                       "cluster is given)", epilog=exit_codes(COMMAND_CODES["serve"]),
                       description="Serve /mutate, /validate, /healthz, /readyz and /metrics over TLS.")
    if only in (None, "serve"):
        _serve_flags(s)
    s.set_defaults(func=serve)

    r = sub.add_parser("review", help="run the mutate-then-validate chain offline on a pod",
                       epilog=exit_codes(COMMAND_CODES["review"]),
                       description="Run the mutating then the validating chain on a Pod or AdmissionReview file, as "
                                   "the apiserver would. Exit 0 when admitted, 1 when denied, 2 on unusable input.")
    r.add_argument("file", type=Path, metavar="FILE",
                   help="a Pod manifest or an AdmissionReview (YAML or JSON); - reads stdin")
    _state_flags(r, "a folder of manifests (default, with no source flag: the embedded example state, in a cluster "
                    "too)", "list this cluster's state (every kind) before the review",
                 "list the state of the cluster this runs in (its ServiceAccount) before the review")
    review_settings_flags(r)
    r.add_argument("--operation", choices=("CREATE", "UPDATE"),
                   help="the request's operation (default: UPDATE with --old, else CREATE)")
    r.add_argument("--old", type=Path, metavar="FILE", help="the pod before the update (for UPDATE); - reads stdin")
    r.add_argument("-o", "--output", choices=("yaml", "json", "patch", "review"), default="yaml",
                   help="the admitted pod as YAML or JSON, the mutating JSONPatch, or the AdmissionReview answer")
    r.add_argument("--explain", action="store_true", help="list every rule and profile and why it acted (stderr)")
    r.set_defaults(func=review)

    audit.add_parser(sub, COMMAND_CODES["audit"])

    pol = sub.add_parser("policies", help="print the stateless validating rules as a ValidatingAdmissionPolicy and "
                         "its binding, and a policy per colocation profile, for kubectl apply (Kubernetes 1.30+)",
                         epilog=exit_codes(COMMAND_CODES["policies"]),
                         description="Print the validating rules that need no cluster state as one "
                                     "ValidatingAdmissionPolicy and its binding: what "
                                     "manifests/components/admission-policies holds (docs/policies.md, \"Admission "
                                     "policies\"), the pod invariants and the band conversion. With a cluster "
                                     "state, also a policy and binding per ClusterColocationProfile that refuse "
                                     "the pods it matches unconverted, and the band conversion with the pods of "
                                     "profiles that skip it left out. "
                                     "Offline; the apiserver enforces them while the webhook is down.")
    pol.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml",
                     help="a YAML stream, or a JSON v1 List")
    _state_flags(pol, "a folder of manifests: also print a policy and binding per ClusterColocationProfile, "
                      "refusing its unconverted pods while the webhook is down",
                 "the same from this cluster's profiles (listed first); --check with neither: the kubeconfig "
                 "kubectl would use ($KUBECONFIG, ~/.kube/config)")
    pol.add_argument("--check", type=Path, metavar="FILE",
                     help="instead of printing: compare, field by field, with the applied policies and bindings in "
                          "FILE (kubectl get validatingadmissionpolicies,validatingadmissionpolicybindings -l "
                          "app.kubernetes.io/part-of=colocation-webhook -o yaml; - reads stdin); exit 1 and list "
                          "each one missing, edited, stale or left over")
    pol.add_argument("--mutating", action="store_true",
                     help="Kubernetes 1.36+: print instead the MutatingAdmissionPolicies that convert while the "
                          "webhook is down (manifests/components/mutating-policies; with a cluster state, one per "
                          "profile a policy can apply; docs/policies.md, \"Mutating admission policies\"); with "
                          "--check, compare the applied ones (kubectl get mutatingadmissionpolicies,"
                          "mutatingadmissionpolicybindings -l app.kubernetes.io/part-of=colocation-webhook -o yaml)")
    pol.set_defaults(func=policies)

    c = sub.add_parser("certs", help="make the serving certificate and CA for the in-cluster Service",
                       description="Make or read the serving certificate and CA for an in-cluster install.")
    csub = c.add_subparsers(dest="certs_command", required=True, metavar="COMMAND")
    g = csub.add_parser("generate", help="write ca.crt, ca.key, tls.crt, tls.key for SERVICE.NAMESPACE.svc",
                        epilog=exit_codes(COMMAND_CODES["certs generate"]),
                        description="Write ca.crt, ca.key, tls.crt and tls.key for SERVICE.NAMESPACE.svc. A valid "
                                    "pair already there is kept; one for other names is refused (exit 2) unless "
                                    "--force.")
    g.add_argument("--service", type=service_name, required=True,
                   help="the webhook Service name (manifests: colocation-webhook)")
    g.add_argument("--namespace", type=namespace, required=True, help="its namespace (manifests: colocation-system)")
    g.add_argument("--out", type=Path, default=Path("certs"), metavar="DIR", help="folder to write")
    g.add_argument("--days", type=int, default=365, help="validity in days")
    g.add_argument("--force", action="store_true", help="replace a valid pair (the CA is kept while it is good)")
    g.add_argument("--new-ca", action="store_true", help="with --force: also replace the CA (changes caBundle)")
    g.set_defaults(func=certs_generate)
    b = csub.add_parser("ca-bundle", help="print the base64 CA certificate for a webhook's caBundle",
                        epilog=exit_codes(COMMAND_CODES["certs ca-bundle"]),
                        description="Print the base64 CA certificate for a webhook configuration's caBundle.")
    b.add_argument("--out", type=Path, default=Path("certs"), metavar="DIR", help="folder to read")
    b.set_defaults(func=certs_ca_bundle)
    bs = csub.add_parser("bootstrap", help="in the cluster: create the serving Secret when missing or unusable "
                         "and put its CA into the webhook configurations (the install's Job)",
                         epilog=exit_codes(COMMAND_CODES["certs bootstrap"]),
                         description="Create the serving Secret when it is missing or unusable and put its CA into "
                                     "the webhook configurations' caBundle; running it again changes nothing. Exit 0 "
                                     "when done, 1 when an API request failed (a Job retries), 2 on unusable input.")
    bs.add_argument("--namespace", type=namespace, required=True, help="the namespace of the Service and the Secret")
    bs.add_argument("--service", type=service_name, required=True,
                    help="the webhook Service name (manifests: colocation-webhook)")
    bs.add_argument("--secret-name", type=object_name, required=True,
                    help="the kubernetes.io/tls Secret the webhook mounts")
    bs.add_argument("--mutating-webhook-configuration", type=object_name, metavar="NAME",
                    help="give every webhook of it the CA")
    bs.add_argument("--validating-webhook-configuration", type=object_name, metavar="NAME",
                    help="give every webhook of it the CA")
    bs.add_argument("--days", type=int, default=3650, help="validity of a new CA and certificate in days")
    bs.add_argument("--kubeconfig", metavar="F",
                    help="the cluster (default: the in-cluster ServiceAccount in a pod, else the kubeconfig kubectl "
                         "would use: $KUBECONFIG, ~/.kube/config)")
    bs.add_argument("--log-format", choices=("text", "json"), default="text", help="log lines for people or pipelines")
    bs.set_defaults(func=certs_bootstrap)
    return p


def main(argv: list[str] | None = None) -> int:
    command = first_positional(sys.argv[1:] if argv is None else argv)
    return run_main("colocation-webhook", lambda: parser(command if command in COMMANDS else None), argv,
                    COMMAND_CODES)


if __name__ == "__main__":
    sys.exit(main())
