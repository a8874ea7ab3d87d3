"""Serving certificates: a self-signed CA and a SAN serving certificate (cryptography).

Used by ``serve`` (localhost certificates when no TLS flags are given) and ``certs generate``.
SANs are always set: apiservers since 1.19 refuse CN-only certificates.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
RENEW_BEFORE = dt.timedelta(days=7)


@dataclass(frozen=True)
class CertPaths:
    folder: Path

    @property
    def ca_cert(self) -> Path:
        return self.folder / CA_CERT

    @property
    def ca_key(self) -> Path:
        return self.folder / CA_KEY

    @property
    def cert(self) -> Path:
        return self.folder / TLS_CERT

    @property
    def key(self) -> Path:
        return self.folder / TLS_KEY


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for n in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


def _write(path: Path, data: bytes, private: bool) -> None:
    """Write atomically (temp file + rename) so a reader never sees half a key."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def generate(folder: Path, names: list[str], days: int = 365, common_name: str | None = None) -> CertPaths:
    """Create a CA and a serving certificate for ``names`` (DNS names or IPs) under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = CertPaths(folder)
    now = _now()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "colocation-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(_san(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_fmt = (pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    _write(paths.ca_key, ca_key.private_bytes(*key_fmt), private=True)
    _write(paths.ca_cert, ca.public_bytes(pem), private=False)
    _write(paths.key, key.private_bytes(*key_fmt), private=True)
    _write(paths.cert, leaf.public_bytes(pem), private=False)
    return paths


def valid_pair(paths: CertPaths, names: list[str]) -> bool:
    """True when the certificate and key exist, parse, match, cover ``names`` and are not near expiry."""
    try:
        cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
        key = serialization.load_pem_private_key(paths.key.read_bytes(), password=None)
        x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
    except (OSError, ValueError, TypeError):
        return False
    if cert.public_key().public_numbers() != key.public_key().public_numbers():  # type: ignore[union-attr]
        return False
    if cert.not_valid_after_utc - RENEW_BEFORE < _now():
        return False
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have = {str(v) for v in san.get_values_for_type(x509.DNSName)}
    have |= {str(v) for v in san.get_values_for_type(x509.IPAddress)}
    return set(names) <= have


def ensure_localhost(folder: Path) -> tuple[CertPaths, bool]:
    """Reuse a valid localhost pair under ``folder`` or create one; returns (paths, created)."""
    names = ["localhost", "127.0.0.1", "::1"]
    paths = CertPaths(folder)
    if valid_pair(paths, names):
        return paths, False
    return generate(folder, names), True
