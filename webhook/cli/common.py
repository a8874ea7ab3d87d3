"""What both console scripts share: logging set-up, the usage-error contract and the entry point."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

EXIT_USAGE = 2


class UsageError(Exception):
    """Unusable input: printed as one line on stderr, exit code 2."""


def setup_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """``text`` for people, ``json`` for log pipelines; always on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s",
                                           rename_fields={"asctime": "time", "levelname": "level"}))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def run_main(prog: str, parser: Callable[[], argparse.ArgumentParser], argv: list[str] | None) -> int:
    """Parse, run the chosen subcommand, and turn a UsageError into one stderr line and exit 2."""
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
