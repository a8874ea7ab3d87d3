#!/usr/bin/env python3
"""Fixed-rate (open-loop) load over keep-alive TLS, for p99 at a given rate and for the soak.

wrk only runs closed-loop and Debian ships no wrk2, so this is a small asyncio generator.
Latency is measured from each request's *scheduled* send time, so a stalled server cannot hide
its queueing (no coordinated omission). Used by bench/webhook_load.py (1000 rps, p99 target <= 10 ms) and
bench/soak.py; run alone against any server:

    python bench/fixed_rate.py URL --ca certs/ca.crt --body review.json [--rate 1000] [--duration 10]
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit


@dataclass
class Result:
    sent: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    late_starts: int = 0  # requests the generator itself queued > 1 ms late

    def percentile(self, p: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        data = sorted(self.latencies_ms)
        return data[min(len(data) - 1, round(p / 100 * (len(data) - 1)))]

    def summary(self) -> str:
        errs = sum(self.errors.values())
        return (f"sent {self.sent}, ok {self.ok}, errors {errs} {dict(self.errors) if errs else ''}; "
                f"p50 {self.percentile(50):.2f} ms, p99 {self.percentile(99):.2f} ms, "
                f"max {max(self.latencies_ms, default=float('nan')):.2f} ms, "
                f"mean {statistics.fmean(self.latencies_ms) if self.latencies_ms else float('nan'):.2f} ms; "
                f"generator late {self.late_starts}")


Check = Callable[[bytes], str | None]  # an answer's body -> what is wrong with it, or None


async def _connection(host: str, port: int, ctx: ssl.SSLContext, server_name: str, request: bytes,
                      queue: asyncio.Queue[float | None], result: Result, check: Check | None) -> None:
    """One keep-alive connection taking scheduled send times from ``queue`` until it gets None."""
    reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=server_name)
    try:
        while True:
            scheduled = await queue.get()
            if scheduled is None:
                return
            problem = None
            try:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                payload = await reader.readexactly(length)
                if status != 200:
                    problem = f"http {status}"
                elif check is not None:
                    problem = check(payload)
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                problem = type(exc).__name__
                writer.close()
                reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=server_name)
            result.latencies_ms.append((time.perf_counter() - scheduled) * 1000)
            if problem is None:
                result.ok += 1
            else:
                result.errors[problem] = result.errors.get(problem, 0) + 1
    finally:
        writer.close()


async def run(url: str, body: bytes, ca: Path, rate: float, duration: float, connections: int = 32,
              check: Check | None = None) -> Result:
    """Send ``rate`` requests per second for ``duration`` seconds; ``check(body)`` may flag bad answers.

    Hand-written HTTP/1.1 over asyncio streams: an httpx client's CPU per request (docs/benchmarks.md)
    would make the generator, not the server, the bottleneck at 1000 rps.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or 443
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    request = (f"POST {target} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    ctx = ssl.create_default_context(cafile=str(ca))
    result = Result()
    queue: asyncio.Queue[float | None] = asyncio.Queue()
    workers = [asyncio.create_task(_connection("127.0.0.1", port, ctx, host, request, queue, result, check))
               for _ in range(connections)]
    await asyncio.sleep(0.2)  # let the TLS handshakes finish before the clock starts
    total = int(rate * duration)
    start = time.perf_counter() + 0.05
    for i in range(total):
        scheduled = start + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.001:
            result.late_starts += 1
        queue.put_nowait(scheduled)
        result.sent += 1
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--ca", type=Path, required=True)
    ap.add_argument("--body", type=Path, required=True)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--duration", type=float, default=10)
    args = ap.parse_args()
    result = asyncio.run(run(args.url, args.body.read_bytes(), args.ca, args.rate, args.duration))
    print(result.summary())
    return 0 if not result.errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
