#!/usr/bin/env python3
"""Soak: the webhook at a fixed rate for a long time; errors and resident-memory growth.

Starts `colocation-webhook serve` pinned to CPU 0, warms it up, samples its RSS, then drives /mutate and
/validate alternately at --rate rps (bench/fixed_rate.py, open loop, pinned to CPU 1) for --duration
seconds, sampling RSS every --sample seconds. Targets: 0 errors, RSS growth under 10 %.

    python bench/soak.py [--duration 600] [--rate 1000] [--review FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fixed_rate import run as fixed_rate  # noqa: E402
from bench.webhook_load import DEFAULT_REVIEW, free_port, pinned, stop_server, wait_ready  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--warmup", type=float, default=20)
    ap.add_argument("--sample", type=float, default=30)
    ap.add_argument("--review", type=Path, default=DEFAULT_REVIEW)
    args = ap.parse_args()
    from webhook.tls.certs import ensure_localhost

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {1})  # the generator runs in this process, on CPU 1
    with tempfile.TemporaryDirectory() as tmp:
        certs, _ = ensure_localhost(Path(tmp) / "certs")
        port = free_port()
        server = subprocess.Popen(pinned([sys.executable, "-m", "webhook.cli.webhook", "serve", "--host", "127.0.0.1",
                                          "--port", str(port), "--tls-cert-file", str(certs.cert),
                                          "--tls-private-key-file", str(certs.key), "--metrics-port", "0"], "0"),
                                  cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(f"https://localhost:{port}", certs.ca_cert)
            body = args.review.read_bytes()

            def ok(payload: bytes) -> str | None:
                return None if b'"response":{"uid"' in payload else "not an AdmissionReview answer"

            url = f"https://localhost:{port}/mutate?timeout=10s"
            asyncio.run(fixed_rate(url, body, certs.ca_cert, args.rate, args.warmup, check=ok))
            base = rss_kib(server.pid)
            samples = [(0.0, base)]
            stop = threading.Event()
            t0 = time.monotonic()

            def sampler() -> None:
                while not stop.wait(args.sample):
                    samples.append((time.monotonic() - t0, rss_kib(server.pid)))

            threading.Thread(target=sampler, daemon=True).start()
            half = args.duration / 2
            results = [asyncio.run(fixed_rate(f"https://localhost:{port}{ep}?timeout=10s", body, certs.ca_cert,
                                              args.rate, half, check=ok)) for ep in ("/mutate", "/validate")]
            stop.set()
            end = rss_kib(server.pid)
        finally:
            stop_server(server)
    errors = sum(sum(r.errors.values()) for r in results)
    sent = sum(r.sent for r in results)
    print(f"soak: {sent} requests at {args.rate:.0f} rps over {args.duration:.0f}s (after {args.warmup:.0f}s warm-up)")
    for name, r in zip(("/mutate", "/validate"), results, strict=False):
        print(f"  {name}: {r.summary()}")
    points = [*samples, (args.duration, end)]
    print("  RSS samples (s, MiB): " + ", ".join(f"{t:.0f}:{k / 1024:.1f}" for t, k in points))
    growth = (end - base) / base * 100
    print(f"errors: {errors} (target 0); RSS {base / 1024:.1f} -> {end / 1024:.1f} MiB, growth {growth:+.1f} % "
          "(target < 10 %)")
    return 0 if errors == 0 and growth < 10 else 1


if __name__ == "__main__":
    sys.exit(main())
