#!/usr/bin/env python3
"""In-process cost of one HTTP review through the whole ASGI app, ours beside the bare FastAPI echo.

No sockets and no TLS: the same body is handed to each app's ASGI callable, so the figures separate
the app's own cost from the network's, and explain the wrk ratio of bench/webhook_load.py
(ratio ~ (t_net + t_echo) / (t_net + t_ours)).

    PYTHONPATH=. python bench/asgi_inprocess.py [--review FILE] [--rounds 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.echo_app import app as echo  # noqa: E402
from bench.webhook_load import DEFAULT_REVIEW  # noqa: E402
from webhook.admission import chain  # noqa: E402
from webhook.admission.response import Decision  # noqa: E402
from webhook.cluster.files import FilesSource  # noqa: E402
from webhook.cluster.sources import example_folder  # noqa: E402
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState  # noqa: E402
from webhook.server.app import create_server  # noqa: E402


def _scope(path: str, body: bytes) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "https", "path": path, "raw_path": path.encode(), "query_string": b"timeout=10s",
            "root_path": "", "headers": [(b"host", b"localhost"), (b"content-type", b"application/json"),
                                         (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8443), "state": {}}


async def _call(app: ASGIApp, path: str, body: bytes) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    await app(_scope(path, body), receive, send)
    return sent


async def best_per_call(call: Callable[[], Awaitable[object]], rounds: int) -> float:
    """µs of CPU per ``call()``: the best of 5 batches of ``rounds``, after 300 to warm up."""
    for _ in range(300):
        await call()
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(rounds):
            await call()
        best = min(best, (time.process_time() - start) / rounds)
    return best * 1e6


def review_and_state(doc: str) -> tuple[argparse.Namespace, bytes, ClusterState]:
    """The scripts' arguments (--review, --rounds), the review's bytes and the example cluster state."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--review", type=Path, default=DEFAULT_REVIEW)
    ap.add_argument("--rounds", type=int, default=3000)
    args = ap.parse_args()
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(example_folder(), state).load()
    return args, args.review.read_bytes(), state


async def _measure(app: ASGIApp, path: str, body: bytes, rounds: int) -> tuple[float, int, int]:
    us = await best_per_call(lambda: _call(app, path, body), rounds)
    sent = await _call(app, path, body)
    return us, sent[0]["status"], len(sent[1]["body"])


def main() -> int:
    args, body, state = review_and_state(__doc__)
    ours = create_server(state).asgi
    print(f"review: {args.review.name} ({len(body)} bytes); µs of CPU per request, best of 5 batches")
    for path in ("/mutate", "/validate"):
        for name, app in (("echo", echo), ("webhook", ours)):
            us, status, size = asyncio.run(_measure(app, path, body, args.rounds))
            print(f"  {name:<8}{path:<10}{us:8.1f} µs   (HTTP {status}, {size} byte answer)")
    # The split: everything but the rules (decode, envelope, metrics, encode, the ASGI edge), the chains
    # replaced by an empty answer for this measurement only.
    rules = chain.mutate, chain.validate
    # the rules stubbed for this measurement only: mypy holds the module's functions to their signatures
    chain.mutate = chain.validate = lambda *_a, **_k: Decision()  # type: ignore[assignment]
    try:
        for path in ("/mutate", "/validate"):
            us, status, size = asyncio.run(_measure(ours, path, body, args.rounds))
            print(f"  {'edge':<8}{path:<10}{us:8.1f} µs   (HTTP {status}, {size} byte answer; the webhook with "
                  "its chains replaced by an empty answer)")
    finally:
        chain.mutate, chain.validate = rules
    return 0


if __name__ == "__main__":
    sys.exit(main())
