"""A small TCP proxy for the tests and the benchmarks: between a client and an API server (the replay server of
harness/apiserver.py, or a real kube-apiserver), it passes bytes, resets connections or drops them silently.

- ``pass``: bytes go both ways, as a plain TCP hop.
- ``reset``: every open connection is reset (RST, both sides), and every new one is accepted and reset at once,
  as an API server that restarts or a load balancer that refuses its backends does.
- ``drop``: a blackhole that answers for the peer: open connections freeze (nothing read, nothing forwarded,
  no FIN, no RST) and new ones are accepted and frozen too, so the client's connect succeeds and its request is
  never answered. TCP keepalive cannot see it (the proxy's kernel answers the probes). A frozen connection stays
  frozen when the mode goes back to ``pass``, as a flow a NAT or a firewall forgot: only new connections pass.

One thread runs a selector over every socket; ``mode`` may be changed from any thread.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from typing import Literal

Mode = Literal["pass", "reset", "drop"]
_LINGER_RST = struct.pack("ii", 1, 0)   # SO_LINGER on, 0 s: close() sends RST instead of FIN


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
    sock.close()


class TCPProxy:
    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream
        self._listener = socket.create_server((host, port), backlog=64)
        self._listener.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ)
        self._peer: dict[socket.socket, socket.socket] = {}   # each live socket -> the other end of its pair
        self._frozen: list[socket.socket] = []
        self._mode: Mode = "pass"
        self._changed: Mode | None = None
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._stop = False
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def mode(self) -> Mode:
        return self._mode

    @mode.setter
    def mode(self, mode: Mode) -> None:
        with self._lock:
            self._mode = mode
            self._changed = mode
        self._wake_w.send(b"x")

    def open_connections(self) -> int:
        """Pairs passing bytes now (frozen ones not counted)."""
        with self._lock:
            return len(self._peer) // 2

    def start(self) -> TCPProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop = True
        self._wake_w.send(b"x")
        self._thread.join(5)
        for sock in [*self._peer, *self._frozen, self._listener, self._wake_r, self._wake_w]:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> TCPProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the selector loop -------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop:
            for key, _ in self._sel.select(0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                elif sock is self._listener:
                    self._accept()
                elif sock in self._peer:
                    self._forward(sock)
            with self._lock:
                changed, self._changed = self._changed, None
            if changed == "reset":
                for sock in list(self._peer):
                    self._drop_pair(sock, reset=True)
            elif changed == "drop":
                for sock in list(self._peer):
                    self._freeze(sock)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except OSError:
            return
        self.accepted += 1
        mode = self._mode
        if mode == "reset":
            _reset(client)
            return
        if mode == "drop":
            self._frozen.append(client)
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _reset(client)
            return
        for s in (client, upstream):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._peer[client], self._peer[upstream] = upstream, client
        self._sel.register(client, selectors.EVENT_READ)
        self._sel.register(upstream, selectors.EVENT_READ)

    def _forward(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._drop_pair(sock, reset=True)
            return
        if not data:
            self._drop_pair(sock, reset=False)
            return
        other = self._peer[sock]
        try:
            other.setblocking(True)   # a short blocking write keeps the order of bytes without a buffer
            other.settimeout(5)
            other.sendall(data)
            other.setblocking(False)
        except OSError:
            self._drop_pair(sock, reset=True)

    def _unregister(self, sock: socket.socket) -> socket.socket | None:
        with self._lock:
            other = self._peer.pop(sock, None)
            if other is not None:
                self._peer.pop(other, None)
        for s in (sock, other):
            if s is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._sel.unregister(s)
        return other

    def _drop_pair(self, sock: socket.socket, reset: bool) -> None:
        other = self._unregister(sock)
        for s in (sock, other):
            if s is not None:
                if reset:
                    _reset(s)
                else:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()

    def _freeze(self, sock: socket.socket) -> None:
        other = self._unregister(sock)
        self._frozen.extend(s for s in (sock, other) if s is not None)
