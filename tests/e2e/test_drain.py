"""A rollout admits no pod unchecked: ``serve`` answers through its drain delay after SIGTERM, unready, over real
TLS to a real process, on kept-alive and fresh connections alike; then it exits 0, or at once on a second signal."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import load_fixture
from tests.serving import free_port

CLI = [sys.executable, "-m", "webhook.cli.webhook"]
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
ENV.pop("KUBERNETES_SERVICE_HOST", None)
# A request sent this close to the drain's end may meet the closing listener (no server can answer a connection
# it stops accepting, nor one whose TLS handshake has not finished when it stops); the tests judge those only for
# a wrong answer, never for a missing one. Wide, because a client thread in a long test run can stall for a
# garbage collection between starting a request and connecting.
EDGE = 1.0


@dataclass
class Serve:
    proc: subprocess.Popen[str]
    url: str
    verify: ssl.SSLContext


@contextlib.contextmanager
def serve(tmp_path: Path, drain: float) -> Iterator[Serve]:
    port = free_port()
    proc = subprocess.Popen([*CLI, "serve", "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0",
                             "--cert-dir", str(tmp_path / "certs"), "--drain-delay", str(drain)],
                            cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "serve did not become ready"
            if (tmp_path / "certs" / "ca.crt").exists():
                verify = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(url + "/readyz", verify=verify, timeout=1).status_code == 200:
                        break
            time.sleep(0.05)
        yield Serve(proc, url, verify)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


@dataclass
class Sent:
    at: float                  # monotonic time the request was started
    fresh: bool                # on a new connection (else a kept-alive one)
    status: int | None = None  # None: no answer (connection refused or reset)
    right_uid: bool = False
    closes: bool = False       # the answer said Connection: close
    error: str = ""            # the client's error, when there was no answer


def _review(uid: str) -> bytes:
    review = load_fixture("admission/v1-mutate-create-plain.json")
    review["request"]["uid"] = uid
    return json.dumps(review).encode()


def _send(client: httpx.Client, url: str, fresh: bool, log: list[Sent]) -> None:
    uid = str(uuid.uuid4())
    sent = Sent(time.monotonic(), fresh)
    try:
        r = client.post(url + "/mutate?timeout=10s", content=_review(uid),
                        headers={"content-type": "application/json"})
        sent.status = r.status_code
        sent.right_uid = r.status_code == 200 and r.json()["response"]["uid"] == uid
        sent.closes = r.headers.get("connection", "").lower() == "close"
    except httpx.TransportError as exc:
        sent.error = f"{type(exc).__name__}: {exc}"
    log.append(sent)


def _load(srv: Serve, stop: threading.Event, log: list[Sent]) -> list[threading.Thread]:
    """Three clients on kept-alive connections and two that open a connection for every review."""
    def kept_alive() -> None:
        with httpx.Client(verify=srv.verify, timeout=5) as client:
            while not stop.is_set():
                _send(client, srv.url, False, log)

    def fresh() -> None:
        while not stop.is_set():
            with httpx.Client(verify=srv.verify, timeout=5) as client:
                _send(client, srv.url, True, log)

    threads = [threading.Thread(target=f, daemon=True) for f in (kept_alive, kept_alive, kept_alive, fresh, fresh)]
    for t in threads:
        t.start()
    return threads


def test_every_review_sent_before_the_drain_ends_is_answered(tmp_path: Path) -> None:
    drain = 3.0
    with serve(tmp_path, drain) as srv:
        log: list[Sent] = []
        stop = threading.Event()
        threads = _load(srv, stop, log)
        time.sleep(0.5)
        term = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(drain + 1.0)  # past the drain's end: the listeners close meanwhile
        stop.set()
        for t in threads:
            t.join(timeout=10)
        assert srv.proc.wait(timeout=30) == 0
    before_end = [s for s in log if s.at < term + drain - EDGE]
    draining = [s for s in before_end if s.at > term + 0.05]
    assert len([s for s in draining if s.fresh]) >= 5 and len([s for s in draining if not s.fresh]) >= 5, \
        "the load did not reach into the drain"
    failed = [s for s in before_end if s.status != 200 or not s.right_uid]
    assert not failed, (f"{len(failed)} of {len(before_end)} reviews sent before the drain ended were not answered: "
                        + "; ".join(f"{s.at - term:+.3f} s {'fresh' if s.fresh else 'kept'} {s.status} {s.error}"
                                    for s in failed))
    # Every answer during the drain closes its connection, so a kept-alive client moves to a replica that stays.
    assert all(s.closes for s in draining)
    assert not any(s.closes for s in before_end if s.at < term - EDGE)  # before it, connections are kept
    # Later reviews may find no listener, but one that is answered is answered right.
    assert all(s.right_uid for s in log if s.status is not None)


def test_readyz_turns_503_at_once_and_the_process_exits_0(tmp_path: Path) -> None:
    with serve(tmp_path, 1.5) as srv:
        srv.proc.send_signal(signal.SIGTERM)
        with httpx.Client(verify=srv.verify, timeout=5) as client:
            ready = client.get(srv.url + "/readyz")
            healthy = client.get(srv.url + "/healthz")
        assert ready.status_code == 503 and "shutting down" in ready.text
        assert healthy.status_code == 200  # alive: the kubelet must not restart it meanwhile
        assert srv.proc.wait(timeout=30) == 0
        err = srv.proc.stderr.read() if srv.proc.stderr else ""
    assert "drain delay over" in err and "Traceback" not in err


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_stops_at_once(tmp_path: Path, second: signal.Signals) -> None:
    drain = 60.0
    with serve(tmp_path, drain) as srv:
        srv.proc.send_signal(signal.SIGTERM)
        with httpx.Client(verify=srv.verify, timeout=5) as client:
            assert client.get(srv.url + "/readyz").status_code == 503  # the drain has begun
        srv.proc.send_signal(second)
        assert srv.proc.wait(timeout=drain / 4) == 0  # long before the drain would have ended


@pytest.mark.parametrize(("drain", "sig"), [(0.0, signal.SIGTERM), (60.0, signal.SIGINT)],
                         ids=["--drain-delay 0", "Ctrl-C (SIGINT), whatever the delay"])
def test_no_drain_stops_at_once(tmp_path: Path, drain: float, sig: signal.Signals) -> None:
    """Nothing to drain for: with no delay, or for a person at a terminal (only the kubelet's SIGTERM drains)."""
    with serve(tmp_path, drain) as srv:
        srv.proc.send_signal(sig)
        assert srv.proc.wait(timeout=15) == 0
        err = srv.proc.stderr.read() if srv.proc.stderr else ""
    assert "shutting down: /readyz" not in err
