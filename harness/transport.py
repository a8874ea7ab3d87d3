"""An in-memory transport for an asyncio protocol: what the protocol writes is kept, nothing is sent.

bench/protocol_inprocess.py drives the server's HTTP protocol through it without a socket, and
tests/test_uvicorn_internals.py drives part of a request through the real protocol with it.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Transport(asyncio.Transport):
    """What a protocol writes to, kept: the answers' bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8443), "peername": ("127.0.0.1", 40000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
