"""A serving pair checked by OpenSSL through the ssl module alone: it parses, the key matches, it is in date.

``serve`` checks its pair at start and at every reload. Doing that with ``cryptography`` would load that library
(as much memory as a large cluster state: docs/benchmarks.md) into a process that otherwise never needs it.
OpenSSL does each check here: loading the pair into a server context (parse, key match), then a handshake in
memory with a client that trusts exactly that certificate (``VERIFY_X509_PARTIAL_CHAIN``), which checks its
dates and hands back its decoded fields. Only when a check fails does the caller load ``cryptography``
(``webhook.tls.certs.check_pair``) to say what is wrong in plain words. Written by hand because no library
checks a pair without loading an X.509 parser of its own.
"""

from __future__ import annotations

import contextlib
import ssl
from dataclasses import dataclass

_BEGIN, _END = b"-----BEGIN CERTIFICATE-----", b"-----END CERTIFICATE-----"


class CertsError(Exception):
    """A certificate or folder that cannot be used as asked; the message says what is wrong or what to do."""


@dataclass(frozen=True, slots=True)
class Served:
    """What is logged and exported of a pair being served."""

    not_after: float  # seconds since the epoch
    serial: str       # hex digits, as OpenSSL prints them


def served(cert_file: str, key_file: str, cert_pem: bytes) -> Served:
    """The leaf's validity end and serial when ``cert_file``/``key_file`` (``cert_pem`` being the former's bytes)
    are a pair OpenSSL serves and the leaf is in date; ``ssl.SSLError``/``OSError``/``ValueError`` otherwise."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    start = cert_pem.find(_BEGIN)
    end = cert_pem.find(_END, start)
    if start < 0 or end < 0:
        raise ValueError("no PEM certificate")
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # the leaf itself is the trust anchor
    client.load_verify_locations(cadata=cert_pem[start:end + len(_END)].decode("ascii"))
    # Two pairs of memory BIOs: what each side writes, then hands to the other to read.
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    c = client.wrap_bio(client_in, client_out)
    s = server.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(8):  # TLS 1.3 takes two round trips; a bound, not a loop that could spin
        try:
            c.do_handshake()  # raises SSLCertVerificationError for a leaf out of date
            break
        except ssl.SSLWantReadError:
            pass
        server_in.write(client_out.read())
        with contextlib.suppress(ssl.SSLWantReadError):
            s.do_handshake()
        client_in.write(server_out.read())
    else:
        raise ssl.SSLError("the TLS handshake with the pair did not complete")
    peer = c.getpeercert()
    if not peer:
        raise ssl.SSLError("the handshake gave no certificate")
    return Served(float(ssl.cert_time_to_seconds(str(peer["notAfter"]))), str(peer.get("serialNumber", "")))
