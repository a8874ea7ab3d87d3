#!/usr/bin/env python3
"""The webhook under hostile load (issue 12, §1): memory, /healthz and ordinary reviews while large reviews arrive
at once, and how long slow clients hold connections.

Starts `colocation-webhook serve` from a checkout (--tree, default this one; give another checkout to measure it
"before") pinned to CPU 0, the clients pinned to CPU 1, then for each kind of large review:

- sends --burst (8) of them at once on fresh TLS connections, --rounds times, 3 s apart;
- meanwhile probes /healthz as the kubelet does (a new TLS connection each time) every 20 ms, and sends the
  recorded koord-batch review over a kept-alive connection 20 times a second, as an apiserver would;
- samples the server's RSS every 20 ms: idle before, the peak, and 5 s after the last burst.

The large reviews: `hostile`, a koord-batch pod of 23 500 minimal containers (3.1 MB, the issue's finding);
`at-the-caps`, the largest review the webhook answers with a patch: 1 000 containers (its --max-containers
default) padded with environment variables to 3 MB. Last, --slow (200) clients open TLS connections and send
their request headers one byte a second: how long the server keeps them, and /healthz meanwhile.

Targets: peak RSS well under the manifests' 256 MiB limit, RSS after within 10 % of idle, /healthz p99 <= 50 ms,
every ordinary review answered within the apiserver's 3 s timeout.

--namespaces N runs the server on a large cluster instead of the embedded example: `--kubeconfig` to a local API
server holding N namespaces, N/2 ResourceQuotas, 1 000 profiles and 206 PriorityClasses (bench/state_memory.py's
objects). --memory-limit sets the server's memory cgroup limit (the Deployment's `limits.memory`): the kernel
enforces it, and the server's own guard reads it (issue 17: peak <= 75 % of the limit, at 10 000 namespaces).

    python bench/hostile_load.py [--tree DIR] [--burst 8] [--rounds 3] [--slow 200] [--kinds hostile,at-the-caps]
                                 [--namespaces 10000] [--memory-limit 256Mi]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.large_reviews import Memory, exchange, large_review, post  # noqa: E402
from bench.state_memory import cluster  # noqa: E402
from bench.webhook_load import DEFAULT_REVIEW, free_port, pinned, stop_server, wait_ready  # noqa: E402
from webhook.core.quantity import parse_quantity  # noqa: E402

APISERVER_TIMEOUT = 3.0  # the manifests' timeoutSeconds


def percentile(data: list[float], p: float) -> float:
    if not data:
        return float("nan")
    data = sorted(data)
    return data[min(len(data) - 1, round(p / 100 * (len(data) - 1)))]


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


@dataclass
class Watch:
    """What the background probes saw."""

    healthz_ms: list[float] = field(default_factory=list)
    healthz_failed: int = 0
    ordinary_s: list[float] = field(default_factory=list)
    ordinary_failed: dict[str, int] = field(default_factory=dict)
    rss_kib: list[tuple[float, int]] = field(default_factory=list)


async def probe_healthz(port: int, ctx: ssl.SSLContext, watch: Watch, stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        try:
            status, _ = await asyncio.wait_for(exchange(port, ctx, HEALTHZ), 10)
            if status != 200:
                raise OSError(status)
            watch.healthz_ms.append((time.perf_counter() - t) * 1000)
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            watch.healthz_failed += 1
        await asyncio.sleep(max(0.0, 0.02 - (time.perf_counter() - t)))


async def ordinary_reviews(port: int, ctx: ssl.SSLContext, body: bytes, watch: Watch, stop: asyncio.Event) -> None:
    """The recorded review, 20 a second, each on its own schedule (a slow answer does not delay the next)."""

    async def one() -> None:
        t = time.perf_counter()
        try:
            status, _ = await asyncio.wait_for(exchange(port, ctx, post("/mutate?timeout=3s", body)), 30)
            elapsed = time.perf_counter() - t
            if status != 200:
                watch.ordinary_failed[str(status)] = watch.ordinary_failed.get(str(status), 0) + 1
            elif elapsed > APISERVER_TIMEOUT:
                watch.ordinary_failed["late"] = watch.ordinary_failed.get("late", 0) + 1
            watch.ordinary_s.append(elapsed)
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            watch.ordinary_failed[type(exc).__name__] = watch.ordinary_failed.get(type(exc).__name__, 0) + 1

    tasks = []
    while not stop.is_set():
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(0.05)
    await asyncio.gather(*tasks)


async def sample_memory(memory: Memory, pid: int, watch: Watch, stop: asyncio.Event) -> None:
    while not stop.is_set():
        watch.rss_kib.append((time.monotonic(), memory.kib(pid)))
        await asyncio.sleep(0.02)


async def burst_run(port: int, ctx: ssl.SSLContext, pid: int, memory: Memory, kind: str, burst: int,
                    rounds: int) -> None:
    body = large_review(kind)
    ordinary = DEFAULT_REVIEW.read_bytes()
    for _ in range(20):  # warm up: imports, memos, TLS session set-up
        await exchange(port, ctx, post("/mutate", ordinary))
    await asyncio.sleep(2)
    idle = memory.kib(pid)
    memory.reset_peak()
    watch, stop = Watch(), asyncio.Event()
    background = [asyncio.create_task(probe_healthz(port, ctx, watch, stop)),
                  asyncio.create_task(ordinary_reviews(port, ctx, ordinary, watch, stop)),
                  asyncio.create_task(sample_memory(memory, pid, watch, stop))]
    await asyncio.sleep(1)
    statuses: dict[int, int] = {}
    times: list[float] = []
    answer_bytes = 0

    async def large() -> None:
        nonlocal answer_bytes
        t = time.perf_counter()
        status, answer = await exchange(port, ctx, post("/mutate?timeout=3s", body))
        times.append(time.perf_counter() - t)
        statuses[status] = statuses.get(status, 0) + 1
        answer_bytes = max(answer_bytes, len(answer))

    for n in range(rounds):
        await asyncio.gather(*(large() for _ in range(burst)))
        if n < rounds - 1:
            await asyncio.sleep(3)
    await asyncio.sleep(5)
    stop.set()
    await asyncio.gather(*background)
    after = memory.kib(pid)
    peak = memory.peak_kib() or max(r for _, r in watch.rss_kib)
    mib = 1024
    print(f"{kind}: {burst} x {len(body) / 1e6:.1f} MB reviews at once, {rounds} rounds")
    print(f"  large reviews: HTTP status {dict(sorted(statuses.items()))}, answer up to {answer_bytes} bytes, "
          f"time p50 {statistics.median(times):.2f} s, max {max(times):.2f} s")
    print(f"  memory: idle {idle / mib:.1f} MiB, peak {peak / mib:.1f} MiB, "
          f"5 s after {after / mib:.1f} MiB "
          f"({(after - idle) / idle * 100:+.1f} % of idle)")
    print(f"  /healthz (new TLS connection each, every 20 ms): {len(watch.healthz_ms)} ok, {watch.healthz_failed} "
          f"failed; p50 {percentile(watch.healthz_ms, 50):.1f} ms, p99 {percentile(watch.healthz_ms, 99):.1f} ms, "
          f"max {max(watch.healthz_ms, default=float('nan')):.1f} ms")
    print(f"  ordinary reviews (20/s, a new TLS connection each): {len(watch.ordinary_s)} answered, "
          f"failed or later than {APISERVER_TIMEOUT:g} s: {watch.ordinary_failed or 0}; "
          f"p50 {percentile(watch.ordinary_s, 50) * 1000:.1f} ms, "
          f"p99 {percentile(watch.ordinary_s, 99) * 1000:.1f} ms, "
          f"max {max(watch.ordinary_s, default=float('nan')) * 1000:.1f} ms")


async def slow_clients(port: int, ctx: ssl.SSLContext, n: int, cap: float = 30.0) -> None:
    """``n`` clients sending their headers a byte a second: how long until the server closes each."""
    held: list[float] = []

    async def slow() -> None:
        t = time.perf_counter()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
        except OSError:
            return
        try:
            request = post("/mutate", b"{}")
            for byte in request:
                writer.write(bytes([byte]))
                await writer.drain()
                with contextlib.suppress(asyncio.TimeoutError):
                    if await asyncio.wait_for(reader.read(1), 1.0) == b"" or reader.at_eof():
                        break  # the server closed it
                if time.perf_counter() - t > cap:
                    break
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            held.append(time.perf_counter() - t)
            writer.close()

    watch, stop = Watch(), asyncio.Event()
    probe = asyncio.create_task(probe_healthz(port, ctx, watch, stop))
    await asyncio.gather(*(slow() for _ in range(n)))
    stop.set()
    await probe
    print(f"slow clients: {n} TLS connections sending headers at 1 byte/s (capped at {cap:g} s): held "
          f"p50 {statistics.median(held):.1f} s, max {max(held):.1f} s; /healthz meanwhile p99 "
          f"{percentile(watch.healthz_ms, 99):.1f} ms, {watch.healthz_failed} failed")


@contextlib.contextmanager
def server(tree: Path, work: Path, memory: Memory | None = None,
           kubeconfig: Path | None = None) -> Iterator[tuple[int, int, Path]]:
    sys.path.insert(0, str(ROOT))
    from webhook.tls.certs import ensure_localhost

    certs, _ = ensure_localhost(work / "certs")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "webhook.cli.webhook", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--tls-cert-file", str(certs.cert), "--tls-private-key-file", str(certs.key)]
    usage = subprocess.run([sys.executable, "-m", "webhook.cli.webhook", "serve", "--help"], env=env, cwd=work,
                           capture_output=True, text=True).stdout
    if "--metrics-port" in usage:
        cmd += ["--metrics-port", str(free_port()), "--log-level", "warning"]
    if kubeconfig is not None:
        cmd += ["--kubeconfig", str(kubeconfig)]
    log = open(os.environ.get("SERVE_LOG", work / "serve.log"), "w")  # noqa: SIM115  # closed below
    proc = subprocess.Popen(pinned(cmd, "0"), cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=log,
                            preexec_fn=memory.join if memory is not None else None)
    try:
        try:
            # with a cluster to list: /readyz, so the reviews below are answered from the whole state
            wait_ready(f"https://localhost:{port}", certs.ca_cert, 120, "/readyz" if kubeconfig else "/healthz")
        except SystemExit:
            log.flush()
            print((work / "serve.log").read_text()[-2000:], file=sys.stderr)
            raise
        yield port, proc.pid, certs.ca_cert
    finally:
        stop_server(proc, timeout=15)
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout to run (default: this one)")
    ap.add_argument("--burst", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slow", type=int, default=200, help="slow clients (0 to skip)")
    ap.add_argument("--kinds", default="hostile,at-the-caps")
    ap.add_argument("--namespaces", type=int, default=0, help="a cluster of this size through --kubeconfig")
    ap.add_argument("--memory-limit", default="", help="the server's memory cgroup limit, e.g. 256Mi")
    args = ap.parse_args()
    limit = int(parse_quantity(args.memory_limit)) if args.memory_limit else 0
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {1})  # the clients on CPU 1, the server on CPU 0
    print(f"server: {args.tree.resolve()} (pinned to CPU 0); clients pinned to CPU 1")
    for kind in args.kinds.split(","):
        memory = Memory()
        if limit:
            memory.limit(limit)
        if kind == args.kinds.split(",")[0]:
            print(f"memory: {memory.describe()}" + (f", limit {args.memory_limit}" if limit else ""))
            if args.namespaces:
                print(f"cluster: {args.namespaces} namespaces, {args.namespaces // 2} quotas, 1000 profiles, "
                      "206 PriorityClasses (--kubeconfig to a local API server)")
        try:
            with contextlib.ExitStack() as stack:
                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                config = stack.enter_context(cluster(tmp, args.namespaces)) if args.namespaces else None
                port, pid, ca = stack.enter_context(server(args.tree, tmp, memory, config))
                ctx = ssl.create_default_context(cafile=str(ca))
                asyncio.run(burst_run(port, ctx, pid, memory, kind, args.burst, args.rounds))
                if limit:
                    print(f"  peak {memory.peak_kib() or 0:.0f} KiB is {(memory.peak_kib() or 0) * 1024 / limit:.0%} "
                          f"of the limit; OOM kills: {memory.oom_kills()}")
        finally:
            memory.remove()
    if args.slow:
        with tempfile.TemporaryDirectory() as slow_tmp, server(args.tree, Path(slow_tmp)) as (port, _, ca):
            ctx = ssl.create_default_context(cafile=str(ca))
            asyncio.run(slow_clients(port, ctx, args.slow))
    return 0


if __name__ == "__main__":
    sys.exit(main())
