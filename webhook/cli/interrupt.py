"""Ctrl-C while a program starts, and once its work is done.

A console script imports the whole command line before it calls ``main`` (pip's wrapper: ``from webhook.cli.webhook
import main``), a fifth of a second in which an interrupt ended in a KeyboardInterrupt traceback out of whichever
import it fell in. ``guard`` runs first thing in ``webhook/__init__.py``: in a program's process only, the interrupt
is noted instead; ``take_over`` (run_main, webhook/cli/common.py) puts Python's handler back and raises it there,
where it ends in the command's one line and its code. ``finished``: once the code is decided, an interrupt while the
interpreter ends (threads joined, atexit) changes nothing. A library import (pytest's) keeps Python's handler.

Standard library only, and little of it: it runs before anything else of the package.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
from types import FrameType

# the console scripts (pyproject.toml [project.scripts]) and the modules `python -m` runs them as
PROGRAMS = {"colocation-webhook": "webhook.cli.webhook", "colocation-agent": "webhook.cli.agent"}
_noted: list[int] = []       # the interrupts that came while the program started
_guarding: list[bool] = []   # whether ``guard`` holds SIGINT


def running_program() -> bool:
    """Whether this process runs one of the programs: its console script, or ``python -m`` of its module
    (``sys.argv[0]`` is still ``-m`` while the module's packages are imported: ``sys.orig_argv`` names it)."""
    if sys.argv and os.path.basename(sys.argv[0]) in PROGRAMS:
        return True
    return any(flag == "-m" and module in PROGRAMS.values() for flag, module in itertools.pairwise(sys.orig_argv))


def _note(signum: int, frame: FrameType | None) -> None:
    _noted.append(signum)


def guard() -> None:
    """In a program's process, until ``take_over``: an interrupt is noted, not raised in an import."""
    if (_guarding or not running_program() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        return   # Python's handler only: SIGINT ignored by the parent (nohup, a job without a terminal) stays so
    signal.signal(signal.SIGINT, _note)
    _guarding.append(True)


def take_over() -> None:
    """Python's handler back, and an interrupt noted while the program started raised here (KeyboardInterrupt)."""
    if not _guarding:
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _guarding.clear()
    if _noted:
        _noted.clear()
        raise KeyboardInterrupt


def finished() -> None:
    """The outcome is decided: in a program's process, SIGINT is ignored from here to the exit."""
    if running_program():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
