"""Serving-certificate hot reload: swap the pair on the live ``ssl.SSLContext`` when the files change.

Modelled on controller-runtime's certwatcher: file events (watchfiles) on the folders that hold the
certificate and key, plus a slow poll as a safety net; a reload whose bytes are unchanged is skipped; a
broken new pair is logged and the old one keeps serving.

The parent folders are watched, not the files: a mounted Secret changes by swapping its ``..data``
symlink, so the file names never see an event of their own.

``load_cert_chain`` runs on the server's event loop thread, between handshakes. OpenSSL drops the old
key as soon as a new certificate is set, so a half-done load seen by a concurrent handshake (or a load
that fails half-way) would break connections. The new pair is therefore checked first, by OpenSSL in scratch
contexts (``webhook.tls.pair``: parses, key matches, in date; ``cryptography`` is loaded only to explain a
pair that fails), and the live context loads the very bytes that were checked (from memory files), never a
file that may have changed in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import signal
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from prometheus_client import CollectorRegistry, Counter, Gauge

from webhook.tls.pair import CertsError, Served, served

log = logging.getLogger("webhook.tls.watch")
logging.getLogger("watchfiles.main").setLevel(logging.WARNING)  # it logs every batch of changes at INFO
POLL_SECONDS = 10.0  # controller-runtime's default watch interval


class CertWatcher:
    """Reload ``cert``/``key`` into ``context`` when they change; run ``run()`` as a task on the server loop."""

    def __init__(self, context: ssl.SSLContext, cert: Path, key: Path, poll_seconds: float = POLL_SECONDS,
                 registry: CollectorRegistry | None = None) -> None:
        self.context = context
        self.cert, self.key = Path(cert), Path(key)
        self.poll_seconds = poll_seconds
        self._loaded: tuple[bytes, bytes] | None = None
        self._stop = asyncio.Event()
        self.reloads = Counter("colocation_webhook_certificate_reloads", "Serving certificate reload attempts",
                               ["outcome"], registry=registry)
        self.expiry = Gauge("colocation_webhook_certificate_expiry_timestamp_seconds",
                            "notAfter of the certificate being served", registry=registry)

    # -- the check-and-swap -------------------------------------------------------------------
    def reload(self, initial: bool = False) -> bool:
        """Load the files into the live context if they changed and are a good pair; True when swapped.

        Call on the event loop thread (``run`` does). ``initial``: the first call, at start-up, loads the
        files once more so that what is served and what is remembered as served are the same bytes."""
        try:
            pair = self.cert.read_bytes(), self.key.read_bytes()
        except OSError as exc:
            self.reloads.labels("error").inc()
            log.error("cannot read the new TLS pair (%s); still serving the previous certificate", exc)
            return False
        if pair == self._loaded:
            return False
        try:
            with _memory_files(*pair) as (cert_file, key_file):
                leaf = _checked(cert_file, key_file, *pair)
                self.context.load_cert_chain(cert_file, key_file)
        except (CertsError, ssl.SSLError, OSError) as exc:
            self.reloads.labels("error").inc()
            log.error("the new TLS pair %s / %s is not usable: %s; still serving the previous certificate",
                      self.cert, self.key, exc)
            # Remember it so a broken pair is reported once, not on every poll.
            self._loaded = pair
            return False
        self._loaded = pair
        self.expiry.set(leaf.not_after)
        if initial:
            return True
        self.reloads.labels("reloaded").inc()
        log.info("reloaded the TLS certificate %s (serial %s, valid until %s)", self.cert, leaf.serial.lower(),
                 dt.datetime.fromtimestamp(leaf.not_after, dt.UTC).isoformat())
        return True

    # -- the watch loop -----------------------------------------------------------------------
    async def run(self) -> None:
        """Watch the folders (file events, and every ``poll_seconds`` regardless) until ``stop``."""
        import watchfiles

        while not self._stop.is_set():
            folders = self._folders()
            try:
                async for _ in watchfiles.awatch(*folders, watch_filter=None, debounce=300, recursive=False,
                                                 stop_event=self._stop, rust_timeout=int(self.poll_seconds * 1000),
                                                 yield_on_timeout=True):
                    self.reload()  # an event or a poll timeout: the check is cheap either way
            except Exception as exc:  # e.g. the folder vanished: poll until it is back
                log.warning("watching %s failed (%s); polling every %.0f s", folders, exc, self.poll_seconds)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.poll_seconds)
                self.reload()

    def stop(self) -> None:
        self._stop.set()

    def _folders(self) -> list[str]:
        """The folders holding the files; a symlink's target folder too when it lies elsewhere (a Secret's
        ``..data/`` target is inside the folder and changes at each update, so it is not watched)."""
        found: set[Path] = set()
        for f in (self.cert, self.key):
            here = f.absolute().parent
            found.add(here)
            target = f.resolve().parent
            if here not in target.parents:
                found.add(target)
        return sorted(str(d) for d in found if d.is_dir())


def pair_unusable(cert: Path, key: Path) -> str | None:
    """Why ``cert``/``key`` cannot be served yet, or None."""
    try:
        pair = cert.read_bytes(), key.read_bytes()
    except FileNotFoundError as exc:
        return f"{exc.filename} does not exist yet"
    except OSError as exc:
        return f"cannot read {exc.filename}: {exc.strerror}"
    try:
        with _memory_files(*pair) as (cert_file, key_file):
            _checked(cert_file, key_file, *pair)
    except (CertsError, OSError) as exc:
        return f"{cert} / {key}: {exc}"
    return None


def _checked(cert_file: str, key_file: str, cert_pem: bytes, key_pem: bytes) -> Served:
    """The pair's expiry and serial if OpenSSL serves it and it is in date; else CertsError in plain words."""
    try:
        return served(cert_file, key_file, cert_pem)
    except (ssl.SSLError, ValueError) as exc:
        from webhook.tls.certs import check_pair  # cryptography, loaded only to say what is wrong

        check_pair(cert_pem, key_pem)
        raise CertsError(f"OpenSSL refuses it: {exc}") from None


def wait_for_pair(cert: Path, key: Path, poll_seconds: float = 1.0, stop: threading.Event | None = None) -> bool:
    """Block until ``cert`` and ``key`` exist and are a usable pair (True), or SIGTERM/SIGINT (False).

    For a Deployment that mounts its TLS Secret before the Secret exists (the install's bootstrap Job
    or cert-manager creates it): the process waits, logging once why, instead of exiting and being
    restarted in a loop."""
    stop = stop or threading.Event()
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        reported = None
        while (reason := pair_unusable(cert, key)) is not None:
            if reason != reported:
                log.warning("waiting for the TLS certificate (--wait-for-certs): %s; checking every %g s",
                            reason, poll_seconds)
                reported = reason
            if stop.wait(poll_seconds):
                log.info("stopped while waiting for the TLS certificate")
                return False
        if reported is not None:
            log.info("the TLS certificate %s is there", cert)
        return True
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _memory_files(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """Paths that read exactly ``cert`` and ``key``: memfds on Linux (no writable disk needed, the
    root filesystem is read-only in the Deployment), else a private temporary folder."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds = []
        try:
            for data in (cert, key):
                fd = os.memfd_create("colocation-webhook-tls", os.MFD_CLOEXEC)
                fds.append(fd)
                with open(fd, "wb", closefd=False) as f:
                    f.write(data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory() as tmp:  # mode 0700
        paths = []
        for name, data in (("tls.crt", cert), ("tls.key", key)):
            p = Path(tmp) / name
            p.write_bytes(data)
            paths.append(str(p))
        yield paths[0], paths[1]


class WatchingServer(uvicorn.Server):
    """A uvicorn server that runs a ``CertWatcher`` on its own event loop while it serves."""

    def __init__(self, config: uvicorn.Config, watcher: CertWatcher | None) -> None:
        super().__init__(config)
        self.watcher = watcher
        self._watch_task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """What uvicorn's ``serve`` wraps the serving in: SIGTERM and SIGINT to ``handle_exit`` while it serves,
        the previous handlers back after. uvicorn's own then raises the captured signal again, which kubelet and
        shells read as a crash (exit -15): a clean shutdown exits 0."""
        if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.watcher is not None and self.started:
            self.watcher.reload(initial=True)
            self._watch_task = asyncio.create_task(self.watcher.run(), name="certwatch")

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.watcher is not None:
            self.watcher.stop()
        if self._watch_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._watch_task, 5)
        await super().shutdown(sockets=sockets)
