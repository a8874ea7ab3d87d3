"""A log handler that keeps every record at INFO and above, for a check of what a program logged and when:
bench/live_staleness.py and tests/test_live_real_apiserver.py read the live source's lines with it.
"""

from __future__ import annotations

import logging


class Lines(logging.Handler):
    """Every record at INFO and above, with the time it was made."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def since(self, t: float) -> list[logging.LogRecord]:
        return [r for r in list(self.records) if r.created >= t]
