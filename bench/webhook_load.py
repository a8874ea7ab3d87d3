#!/usr/bin/env python3
"""Throughput and latency of /mutate and /validate against a bare FastAPI uid echo, in one run.

Each server runs as one uvicorn worker pinned to CPU 0; wrk (Debian package `wrk`) runs pinned to CPU 1 over
keep-alive TLS. Prints rps, p50 and p99 for both and their ratio (issue 17's target: ratio >= 1.0).

Then a fixed-rate run (bench/fixed_rate.py, open loop) at --rate rps reports p99 (target <= 10 ms on one core).

    python bench/webhook_load.py [--duration 10] [--connections 32] [--review FILE] [--cluster-state DIR]
                            [--rate 1000] [--fixed-duration 10] [--baseline-tree DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REVIEW = ROOT / "examples" / "admissionreview-koord-batch.json"
LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("{body}", "rb"); wrk.body = f:read("*a"); f:close()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_ready(url: str, ca: Path, timeout: float = 30, path: str = "/healthz") -> None:
    ctx = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + path, context=ctx, timeout=1):
                return
        except OSError as exc:
            last = exc
            time.sleep(0.1)
    raise SystemExit(f"server at {url} did not start: {last!r}")


def stop_server(proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 10) -> None:
    """Stop a `serve` now: a second SIGINT skips the drain (and a tree from before the drain stops on the first)."""
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def pinned(cmd: list[str], cpu: str) -> list[str]:
    return (["taskset", "-c", cpu, *cmd]) if shutil.which("taskset") else cmd


def to_ms(value: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", value)
    assert m, value
    n = float(m.group(1))
    return {"us": n / 1000, "ms": n, "s": n * 1000}[m.group(2)]


def run_wrk(url: str, body: Path, duration: int, connections: int, workdir: Path) -> dict[str, float]:
    script = workdir / "post.lua"
    script.write_text(LUA.format(body=body))
    cmd = pinned(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), url], "1")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = to_ms(re.search(r"^\s+50%\s+(\S+)$", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = to_ms(re.search(r"^\s+99%\s+(\S+)$", out, re.M).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    if socket_errors:
        print(f"  wrk socket errors against {url}: {socket_errors.group(1)}")
    return {"rps": rps, "p50": p50, "p99": p99, "non2xx": float(errors.group(1)) if errors else 0.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--review", type=Path, default=DEFAULT_REVIEW)
    ap.add_argument("--cluster-state", type=Path)
    ap.add_argument("--endpoints", default="/mutate,/validate")
    ap.add_argument("--rounds", type=int, default=3, help="alternating wrk rounds per target; medians are shown")
    ap.add_argument("--rate", type=float, default=1000, help="fixed-rate run (0 to skip)")
    ap.add_argument("--fixed-duration", type=int, default=10)
    ap.add_argument("--baseline-tree", type=Path, metavar="DIR",
                    help="another checkout's webhook in place of the echo: ratio = this one / that one, measured "
                         "alternately on the same CPU (for before/after comparisons on a noisy machine)")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed: apt-get install wrk")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        sys.path.insert(0, str(ROOT))
        from webhook.tls.certs import ensure_localhost

        certs, _ = ensure_localhost(work / "certs")
        port_ours, port_echo = free_port(), free_port()
        state = ["--cluster-state", str(args.cluster_state)] if args.cluster_state else []
        serve_log = stack.enter_context(open(work / "serve.log", "w"))
        ours = subprocess.Popen(pinned([sys.executable, "-m", "webhook.cli.webhook", "serve", "--host", "127.0.0.1",
                                        "--port", str(port_ours), "--tls-cert-file", str(certs.cert),
                                        "--tls-private-key-file", str(certs.key), "--metrics-port", "0", *state], "0"),
                                cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=serve_log)
        if args.baseline_tree:
            baseline_env = {**os.environ, "PYTHONPATH": str(args.baseline_tree.resolve())}
            echo = subprocess.Popen(pinned([sys.executable, "-m", "webhook.cli.webhook", "serve", "--host",
                                            "127.0.0.1", "--port", str(port_echo), "--tls-cert-file",
                                            str(certs.cert), "--tls-private-key-file", str(certs.key), *state],
                                           "0"),
                                    cwd=work, env=baseline_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            echo = subprocess.Popen(pinned([sys.executable, "-m", "uvicorn", "bench.echo_app:app", "--host",
                                            "127.0.0.1", "--port", str(port_echo), "--ssl-certfile", str(certs.cert),
                                            "--ssl-keyfile", str(certs.key), "--no-access-log", "--log-level",
                                            "warning"], "0"),
                                    cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(f"https://localhost:{port_ours}", certs.ca_cert)
            wait_ready(f"https://localhost:{port_echo}", certs.ca_cert)
            print(f"review: {args.review.name} ({args.review.stat().st_size} bytes); wrk -t1 -c{args.connections} "
                  f"-d{args.duration}s over keep-alive TLS; servers pinned to CPU 0, wrk to CPU 1")
            print(f"medians of {args.rounds} alternating rounds")
            print(f"{'target':<22}{'rps':>10}{'p50 ms':>10}{'p99 ms':>10}{'non-2xx':>10}")
            worst = None
            for endpoint in args.endpoints.split(","):
                runs: dict[str, list[dict[str, float]]] = {"echo": [], "webhook": []}
                for _ in range(args.rounds):  # alternate, so a slow spell of the VM hits both alike
                    runs["echo"].append(run_wrk(f"https://127.0.0.1:{port_echo}{endpoint}?timeout=10s", args.review,
                                                args.duration, args.connections, work))
                    runs["webhook"].append(run_wrk(f"https://127.0.0.1:{port_ours}{endpoint}?timeout=10s",
                                                   args.review, args.duration, args.connections, work))
                med = {name: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50", "p99", "non2xx")}
                       for name, rs in runs.items()}
                for name in ("echo", "webhook"):
                    r = med[name]
                    label = "baseline" if name == "echo" and args.baseline_tree else name
                    print(f"{label + ' ' + endpoint:<22}{r['rps']:>10.0f}{r['p50']:>10.2f}{r['p99']:>10.2f}"
                          f"{r['non2xx']:>10.0f}   rps per round: "
                          + ", ".join(f"{x['rps']:.0f}" for x in runs[name]))
                ratio = med["webhook"]["rps"] / med["echo"]["rps"]
                worst = ratio if worst is None else min(worst, ratio)
                print(f"{'ratio ' + endpoint:<22}{ratio:>10.2f}")
            print(f"worst ratio: {worst:.2f} " + ("(this tree / the baseline tree)" if args.baseline_tree
                                                  else "(target >= 1.0)"))
            if args.rate:
                print(f"fixed rate {args.rate:.0f} rps for {args.fixed_duration}s (open loop, latency from the "
                      "scheduled send time; target p99 <= 10 ms on one core)")
                for endpoint in args.endpoints.split(","):
                    out = subprocess.run(pinned([sys.executable, str(ROOT / "bench" / "fixed_rate.py"),
                                                 f"https://localhost:{port_ours}{endpoint}?timeout=10s",
                                                 "--ca", str(certs.ca_cert), "--body", str(args.review),
                                                 "--rate", str(args.rate), "--duration", str(args.fixed_duration)],
                                                "1"), capture_output=True, text=True, env=env)
                    print(f"  webhook {endpoint}: {out.stdout.strip() or out.stderr.strip()[-300:]}")
        finally:
            for p in (ours, echo):
                stop_server(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
