"""What both console scripts share: logging set-up, the usage-error contract and the entry point."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from webhook import __version__
from webhook.cli import interrupt
from webhook.compiled import rules_status
from webhook.core import names

if TYPE_CHECKING:
    from webhook.cluster.sources import Source
    from webhook.cluster.state import ClusterState

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130       # as a shell reports Ctrl-C
EXIT_STDOUT_CLOSED = 141     # as a shell reports a process ended by SIGPIPE (`| head`, `| grep -q`)


class UsageError(Exception):
    """Unusable input: printed as one line on stderr, exit code 2."""


class HelpFormatter(argparse.HelpFormatter):
    """A description with line breaks is kept as written (a command table), one without is wrapped; every
    flag's help ends with its default, where it has one."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text.strip():
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (action.option_strings and action.default not in (None, False, argparse.SUPPRESS)
                and "%(default)" not in text):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """An argument parser whose subcommands share the help formatter and whose errors exit 2 with one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


# What two codes mean whichever command ends in them (run_main's).
INTERRUPTED = "interrupted (Ctrl-C) before the work was done"
STDOUT_CLOSED = "stdout closed by its reader before all was written (| head, | grep -q)"


def exit_codes(codes: dict[int, str]) -> str:
    """The ``--help`` epilog listing the exit codes of a program or of one command: each command lists its own,
    with what they mean for it."""
    return "exit codes:\n" + "".join(f"  {code:<4} {text}\n" for code, text in codes.items())


def first_positional(argv: list[str]) -> str | None:
    """The command a command line names: its first word that is no option (the programs' own options, --help and
    --version, take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def program_parser(prog: str, description: str,
                   codes: dict[int, str]) -> tuple[Parser, argparse._SubParsersAction[Parser]]:
    """The top-level parser of a console script: ``--version``, required subcommands (argparse lists them with
    their help), and the exit codes as the epilog."""
    p = Parser(prog=prog, description=description, epilog=exit_codes(codes))
    p.add_argument("--version", action="version", version=f"{prog} {__version__}\n{rules_status()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")
    return p, sub


LOG_LEVELS = ("debug", "info", "warning", "error")


class _UTCFormatting:
    """RFC 3339 timestamps in UTC with milliseconds (2026-11-21T09:30:00.123Z), whatever the host's zone."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # logging's
        moment = dt.datetime.fromtimestamp(record.created, dt.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class TextFormatter(_UTCFormatting, logging.Formatter):
    pass


def _json_formatter() -> logging.Formatter:
    from pythonjsonlogger.json import JsonFormatter

    class Json(_UTCFormatting, JsonFormatter):
        def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
            # uvicorn adds an ANSI-coloured copy of some messages for its own console formatter; a log line
            # is no terminal.
            log_data.pop("color_message", None)
            return log_data

    return Json("%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"asctime": "time", "levelname": "level"})


def setup_logging(fmt: str = "text", level: str | int = "info") -> None:
    """``text`` for people, ``json`` for log pipelines (one JSON object a line); always on stderr, timestamps in
    RFC 3339 UTC; ``level`` one of LOG_LEVELS."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_json_formatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)


def _whole(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid {what} {value!r}") from None


def _number_of_seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds {value!r}") from None


# argparse types. argparse prefixes their texts with the flag ("argument --metrics-port: must be 0..65535, got 70000").
def port(value: str) -> int:
    """A TCP port, 0 for none."""
    number = _whole(value, "port")
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, got {value}")
    return number


def listen_port(value: str) -> int:
    """A TCP port to listen on (uvloop would take 70000 as 4464, and 0 as any port)."""
    number = _whole(value, "port")
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be 1..65535, got {value}")
    return number


def positive(value: str) -> int:
    """A whole number above 0."""
    number = _whole(value, "number")
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return number


def seconds(value: str) -> float:
    """A number of seconds above 0."""
    number = _number_of_seconds(value)
    if not 0 < number < float("inf"):
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {value}")
    return number


def non_negative_seconds(value: str) -> float:
    """A number of seconds, 0 included."""
    number = _number_of_seconds(value)
    if not 0 <= number < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a non-negative number of seconds, got {value}")
    return number


# Names the API could never hold would match nothing or fail late; the checks and texts are apimachinery's.
def _dns_name(value: str, errors: list[str]) -> str:
    if errors:
        raise argparse.ArgumentTypeError(f'Invalid value: "{value}": {errors[0]}')
    return value


def namespace(value: str) -> str:
    """A namespace name (an RFC 1123 label)."""
    return _dns_name(value, names.dns1123_label(value))


def object_name(value: str) -> str:
    """A name of most kinds: a ConfigMap, a Secret, a webhook configuration (an RFC 1123 subdomain)."""
    return _dns_name(value, names.dns1123_subdomain(value))


def service_name(value: str) -> str:
    """A Service name (an RFC 1035 label)."""
    return _dns_name(value, names.dns1035_label(value))


def _socket_error(exc: OSError) -> str:
    """Why a bind failed, without create_server's "(while attempting to bind ...)" (a name that does not resolve
    has a resolver's code for errno, not an errno)."""
    if exc.errno is not None and exc.errno > 0:
        return os.strerror(exc.errno)
    return (exc.strerror or str(exc)).split(" (while attempting")[0]


def check_host(host: str, flag: str = "--host") -> None:
    """That ``host`` is an address or name this machine can listen on, before anything is made for it (serve's
    own certificate names it): bound on a port of the system's choosing and closed at once. A UsageError naming
    ``flag`` otherwise."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        socket.create_server((host, 0), family=family).close()
    except OSError as exc:
        raise UsageError(f"{flag} {host}: cannot listen on it: {_socket_error(exc)}") from None


def listen(host: str, port: int, flag: str) -> socket.socket:
    """A listening TCP socket, bound before anything says it serves: a port in use is a UsageError naming
    ``flag``, not a failure after start-up."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        raise UsageError(f"{flag} {port}: cannot listen on {host}: {_socket_error(exc)}") from None


def _insecure(kubeconfig: str) -> bool:
    """Whether the kubeconfig's current context turns the server's certificate check off
    (``insecure-skip-tls-verify``). Read here, not through the client's loader, which would run an exec
    credential plugin a second time; a kubeconfig that does not read is the source's to report."""
    from webhook.cluster.yaml_input import load

    try:
        with open(kubeconfig, "rb") as f:
            doc = load(f.read().decode("utf-8"))  # an alias bomb refused, not walked below
        contexts = {c["name"]: c.get("context") or {} for c in doc.get("contexts") or []}
        cluster = contexts[doc["current-context"]].get("cluster")
        clusters = {c["name"]: c.get("cluster") or {} for c in doc.get("clusters") or []}
        return clusters[cluster].get("insecure-skip-tls-verify") is True
    except Exception:  # not a kubeconfig this can read: no warning, and the loader says what is wrong
        return False


_UNVERIFIED_SAID: list[str] = []


def unverified_tls(kubeconfig: str | None, say: Callable[[str], None]) -> None:
    """One line, once per process, when the kubeconfig skips the API server's certificate check; and urllib3's
    ``InsecureRequestWarning`` silenced, which it gives on every request (``always``: dozens of two-line warnings
    on a paginated audit, and on every watch of ``serve``)."""
    if not kubeconfig or kubeconfig in _UNVERIFIED_SAID or not _insecure(kubeconfig):
        return
    import warnings

    from urllib3.exceptions import InsecureRequestWarning

    warnings.filterwarnings("ignore", category=InsecureRequestWarning)
    _UNVERIFIED_SAID.append(kubeconfig)
    say(f"--kubeconfig {kubeconfig}: insecure-skip-tls-verify is set: the API server's certificate is not "
        "checked, and whoever answers at its address is taken for it")


def stderr_warning(prog: str) -> Callable[[str], None]:
    """``say`` for a command that prints rather than logs: ``prog: warning: text`` on stderr."""
    return lambda text: print(f"{prog}: warning: {text}", file=sys.stderr)


def wait_synced(state: ClusterState, timeout: float, first_error: bool = False) -> None:
    """Block until every kind of ``state`` completed its first list, or raise a UsageError saying which did not;
    ``first_error``: at a kind's first failure, with its reason (the source goes on retrying otherwise)."""
    deadline = time.monotonic() + timeout
    while not state.ready:
        if first_error and (error := state.sync_error()) is not None:
            raise UsageError(error)
        if time.monotonic() > deadline:
            raise UsageError(f"the cluster state did not sync within {timeout:g} s: "
                             f"{state.not_ready_reason() or 'not synced'}")
        time.sleep(0.05)


class _Unsynced(logging.Filter):
    """The live source's line for a kind whose first list failed (webhook/cluster/freshness.py, failed_line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (": not synced: " in message and message.endswith("; retrying"))


def list_first(state: ClusterState, source: Source, timeout: float, where: str) -> None:
    """Start ``source`` and wait for every kind's first list, for a command that answers once: its first failure
    ends the command, in one line naming ``where`` (the kubeconfig) and the API server's error, as kubectl does,
    where the source's own lines were one per kind and a wait for ``timeout``. The source is stopped on failure;
    on success it is the caller's to stop."""
    live = logging.getLogger("webhook.cluster.live")
    quiet = _Unsynced()
    live.addFilter(quiet)   # the source says a kind's failure, and retries; this command says it once, and stops
    try:
        source.start()
        wait_synced(state, timeout, first_error=True)
    except UsageError as exc:
        source.stop()
        raise UsageError(f"{where}: {exc}") from None
    except BaseException:
        source.stop()
        raise
    finally:
        live.removeFilter(quiet)


def found_kubeconfig(prog: str) -> tuple[str | None, str]:
    """The kubeconfig kubectl reads when given no cluster flag, for a command that needs a cluster, and where it
    was looked for (for the error when there is none): the files ``$KUBECONFIG`` lists (``:``-separated), else
    ``~/.kube/config`` (client-go tools/clientcmd/loader.go, NewDefaultClientConfigLoadingRules). kubectl merges
    the files of $KUBECONFIG; the client here loads one, the first that exists, and the stderr line that says
    which file is used says so."""
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        found = next((p for p in listed if os.path.isfile(p)), None)
        how = "the first file of $KUBECONFIG that exists" + (
            f"; kubectl merges the {len(listed)} files it names, this reads that one alone" if len(listed) > 1 else "")
        looked = f"$KUBECONFIG names no file that exists: {os.environ['KUBECONFIG']}"
    else:   # as kubectl: ~/.kube/config only without $KUBECONFIG
        home = Path.home() / ".kube" / "config"
        found = str(home) if home.is_file() else None
        how, looked = "~/.kube/config, with no $KUBECONFIG", f"no $KUBECONFIG, and no {home}"
    if found is not None:
        print(f"{prog}: no cluster flag: using the kubeconfig {found} as kubectl would ({how})", file=sys.stderr)
    return found, looked


def _stdout_closed(prog: str) -> int:
    # The reader went away (| head, | grep -q): what is left unwritten has no one to read it. stdout goes to
    # /dev/null so that the interpreter's own flush at exit does not fail a second time.
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    with contextlib.suppress(OSError):
        print(f"{prog}: stdout was closed by its reader before all was written", file=sys.stderr)
    return EXIT_STDOUT_CLOSED


def _interrupted(exc: BaseException) -> bool:
    """A KeyboardInterrupt, or an error it caused: an interrupt inside a class body's ``__set_name__`` (a dataclass
    field, while fastapi imports) reaches us as ``RuntimeError: Error calling __set_name__`` caused by it (3.11)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def run_main(prog: str, parser: Callable[[], argparse.ArgumentParser], argv: list[str] | None,
             codes: Mapping[str, Mapping[int, str]]) -> int:
    """Parse, run the chosen subcommand, and end in one stderr line and a documented exit code whatever happens
    to the input (UsageError: 2), the output (stdout closed by its reader: 141) or the process (Ctrl-C: 130, or 0
    for a command whose ``codes`` have no 130, which serves until stopped). ``codes``: each command's exit codes
    (its --help's), by command line ("serve", "certs generate")."""
    command = first_positional(sys.argv[1:] if argv is None else argv)
    try:
        interrupt.take_over()   # an interrupt while the program imported all this is raised here
        args = parser().parse_args(argv)
        code = int(args.func(args))
        sys.stdout.flush()
    except BaseException as exc:
        interrupt.finished()
        if isinstance(exc, UsageError):
            print(f"{prog}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(exc, BrokenPipeError):
            return _stdout_closed(prog)
        if not _interrupted(exc):
            raise   # argparse's SystemExit (--help, a flag error), and a bug: as they are
        serves = any(name.split()[0] == command and EXIT_INTERRUPTED not in c for name, c in codes.items())
        with contextlib.suppress(OSError):  # one line, so that a 130 is never mistaken for a crash or for done
            print(f"{prog}: {'stopped (Ctrl-C)' if serves else INTERRUPTED}", file=sys.stderr)
        return 0 if serves else EXIT_INTERRUPTED
    interrupt.finished()
    return code
