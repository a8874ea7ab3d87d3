"""What both console scripts share: logging set-up, the usage-error contract and the entry point."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from webhook import __version__

EXIT_USAGE = 2


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


def program_parser(prog: str, description: str) -> tuple[Parser, argparse._SubParsersAction[Parser]]:
    """The top-level parser of a console script: ``--version`` and required subcommands."""
    p = Parser(prog=prog, description=description)
    p.add_argument("--version", action="version", version=f"{prog} {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser, metavar="COMMAND")
    return p, sub


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
