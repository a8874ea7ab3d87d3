"""What the webhook's TLS port accepts.

TLS 1.3, and TLS 1.2 with forward-secret AEAD suites only (ECDHE with AES-GCM or ChaCha20-Poly1305: Mozilla's
"intermediate" profile without DHE, and what Go's crypto/tls, the apiserver's client, offers first). Every TLS 1.3
suite is AEAD, so OpenSSL's defaults stay for 1.3.

With a client CA (``--client-ca-file``) the server asks every client for a certificate and verifies one that is
given against that CA; one that does not verify fails the handshake. A client that gives none still connects
(OpenSSL's CERT_OPTIONAL): the kubelet's HTTPS probes present no certificate, and /healthz and /readyz must answer
them. The review paths then refuse such a connection (``ReviewGate``), so only a client holding a
certificate from that CA, the apiserver, gets a review answered.
"""

from __future__ import annotations

import ssl
from pathlib import Path

AEAD_CIPHERS = ":".join((
    "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
))


class ClientCAError(Exception):
    """The client CA file cannot be used; the message says why."""


def apply_policy(context: ssl.SSLContext, client_ca: Path | None = None) -> None:
    """Restrict a server ``context`` (its certificate already loaded) to the policy above, trusting
    ``client_ca`` for client certificates when given. A later ``load_cert_chain`` (the hot reload) keeps all of it:
    the versions, suites and trusted client CAs live in the context, not in its certificate."""
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(AEAD_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    if client_ca is None:
        context.verify_mode = ssl.CERT_NONE
        return
    try:
        data = client_ca.read_bytes()
    except OSError as exc:
        raise ClientCAError(f"{client_ca}: cannot read: {exc.strerror or exc}") from None
    try:
        pem = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise ClientCAError(f"{client_ca}: not a PEM file (byte {exc.start} is not ASCII text)") from None
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise ClientCAError(f"{client_ca}: no PEM certificate in it")
    try:
        context.load_verify_locations(cadata=pem)
    except ssl.SSLError as exc:
        raise ClientCAError(f"{client_ca}: not a usable CA certificate: {exc.reason or exc}") from None
    context.verify_mode = ssl.CERT_OPTIONAL
