#!/usr/bin/env python3
"""A rolling restart of two webhook servers behind a Service, replayed on loopback: reviews failed.

A local TCP proxy stands for the Service: it sends each new connection to the backend it currently routes to, and
an open connection stays with its backend until either side closes it, as kube-proxy's conntrack keeps it.
Reviews go through it at `--rate` per second as the apiserver sends them: one pool of kept-alive connections, each
call started on time whatever the earlier ones are doing, with the apiserver's timeout (`--timeout`, the
manifests' timeoutSeconds) and a uid of its own.

The rollout: a new server starts and becomes ready; the old one gets SIGTERM while the routing still points at it
for `--lag` seconds, as the endpoints change reaches the apiserver after the kubelet's SIGTERM; then the same the
other way round, so each of the two servers is restarted once. It runs with `--drain-delay 0` (stop at once, as
before the drain existed) and with the shipped drain delay. Every review that fails (no answer, an error status,
a wrong uid) is one the apiserver would admit unchecked under `failurePolicy: Ignore`.

    python bench/rollout.py [--rate 50] [--lag 2] [--drain-delays 0,10]

Loopback only; bounded: about 12 s per server restarted with a 10 s drain.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.webhook_load import free_port  # noqa: E402

REVIEW = json.loads((ROOT / "examples" / "admissionreview-koord-batch.json").read_bytes())


@dataclass
class Backend:
    name: str
    port: int
    proc: subprocess.Popen[bytes]


@dataclass
class Proxy:
    """The Service: a new connection goes to ``current``; an open one stays with the backend it went to."""

    current: Backend | None = None

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            if self.current is None:
                return
            try:
                server_r, server_w = await asyncio.open_connection("127.0.0.1", self.current.port)
            except OSError:  # the terminating pod's address is there, its process has stopped listening
                return
            await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))
        except asyncio.CancelledError:  # the proxy stops; asyncio's stream callback would log a cancelled handler
            pass
        finally:
            client_w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def _start_proxy(proxy: Proxy, port: int) -> Callable[[], None]:
    """Serve ``proxy`` on ``port`` in a thread of its own; returns what stops it."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    done = asyncio.Event()

    async def serve() -> None:
        server = await asyncio.start_server(proxy.handle, "127.0.0.1", port)
        started.set()
        await done.wait()
        server.close()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in pending:  # connections still piped or held unanswered
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    started.wait(10)

    def stop() -> None:
        loop.call_soon_threadsafe(done.set)
        thread.join(timeout=10)

    return stop


def _start(name: str, certs: Path, drain: float) -> Backend:
    """A `serve` process, once its /readyz answers 200."""
    port = free_port()
    cmd = [sys.executable, "-m", "webhook.cli.webhook", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--metrics-port", "0", "--cert-dir", str(certs), "--drain-delay", str(drain)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=1) as r:
                if r.status == 200:
                    return Backend(name, port, proc)
        time.sleep(0.05)
    raise SystemExit(f"server {name} did not become ready")


@dataclass
class Tally:
    sent: int = 0
    answered: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _client(url: str, ca: Path, rate: float, timeout: float, stop: threading.Event, tally: Tally) -> None:
    """The apiserver's calls: one connection pool, a call started every 1/``rate`` s whatever the earlier ones
    are doing (each pod create waits on its own call), until ``stop``."""

    async def call(client: httpx.AsyncClient) -> None:
        review = json.loads(json.dumps(REVIEW))
        uid = review["request"]["uid"] = str(uuid.uuid4())
        outcome = "answered"
        try:
            r = await client.post(url + "/mutate?timeout=3s", content=json.dumps(review),
                                  headers={"content-type": "application/json"})
            if r.status_code != 200:
                outcome = f"HTTP {r.status_code}"
            elif r.json()["response"]["uid"] != uid:
                outcome = "wrong uid"
        except httpx.TimeoutException:
            outcome = "timeout"
        except httpx.TransportError as exc:
            outcome = type(exc).__name__
        with tally.lock:
            tally.sent += 1
            if outcome == "answered":
                tally.answered += 1
            else:
                tally.failed[outcome] += 1

    async def calls() -> None:
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(ca)), timeout=timeout) as client:
            running: set[asyncio.Task[None]] = set()
            due = time.monotonic()
            while not stop.is_set():
                task = asyncio.create_task(call(client))
                running.add(task)
                task.add_done_callback(running.discard)
                due += 1 / rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            await asyncio.gather(*running)

    asyncio.run(calls())


def rollout(drain: float, rate: float, lag: float, timeout: float, work: Path) -> tuple[Tally, float]:
    """Replica a serves; b starts and is ready; a gets SIGTERM and the routing moves to b ``lag`` s later; a starts
    again, and the same the other way round: each of the two servers restarted once, the routing always one step
    behind, as the endpoints change reaches the apiserver after the kubelet's SIGTERM."""
    certs = work / "certs"
    proxy = Proxy()
    port = free_port()
    stop_proxy = _start_proxy(proxy, port)
    serving = proxy.current = _start("a", certs, drain)
    tally, stop = Tally(), threading.Event()
    client = threading.Thread(target=_client, args=(f"https://localhost:{port}", certs / "ca.crt", rate, timeout,
                                                     stop, tally), daemon=True)
    client.start()
    started = time.monotonic()
    time.sleep(1)
    for name in ("b", "a"):
        new = _start(name, certs, drain)
        serving.proc.send_signal(signal.SIGTERM)  # the kubelet's SIGTERM and the endpoints change start together
        time.sleep(lag)
        proxy.current = new                       # the change has reached the apiserver's path
        serving.proc.wait(timeout=drain + 30)
        serving = new
        time.sleep(1)
    stop.set()
    client.join(timeout=timeout + 5)
    elapsed = time.monotonic() - started
    serving.proc.send_signal(signal.SIGINT)
    if drain:  # a second signal: no one to drain for at the end
        time.sleep(0.2)
        serving.proc.send_signal(signal.SIGINT)
    serving.proc.wait(timeout=30)
    stop_proxy()
    return tally, elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=50, help="reviews per second (default 50)")
    ap.add_argument("--lag", type=float, default=2, help="seconds from SIGTERM to the backend leaving the routing")
    ap.add_argument("--timeout", type=float, default=3, help="the apiserver's timeout for one call (default 3 s)")
    ap.add_argument("--drain-delays", default="0,10", help="serve --drain-delay values to compare (default 0,10)")
    args = ap.parse_args()
    print(f"rolling restart of 2 servers, {args.rate:g} reviews/s, endpoints lag {args.lag:g} s, "
          f"timeout {args.timeout:g} s")
    print(f"{'--drain-delay':>14} {'sent':>6} {'answered':>9} {'failed':>7}  {'seconds':>7}  failures by kind")
    for drain in (float(d) for d in args.drain_delays.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            tally, elapsed = rollout(drain, args.rate, args.lag, args.timeout, Path(tmp))
        kinds = ", ".join(f"{k} {v}" for k, v in tally.failed.most_common()) or "-"
        print(f"{drain:>14g} {tally.sent:>6} {tally.answered:>9} {sum(tally.failed.values()):>7}  {elapsed:>7.1f}  "
              f"{kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
