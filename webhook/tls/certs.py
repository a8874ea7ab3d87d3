"""Serving certificates: a self-signed CA and a SAN serving certificate (cryptography).

Used by ``serve`` (localhost certificates when no TLS flags are given), ``certs generate`` /
``certs ca-bundle`` (the in-cluster Service certificate and the ``caBundle``) and the certificate
watcher (``check_pair``). SANs are always set: apiservers since 1.19 refuse CN-only certificates.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
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
    return dt.datetime.now(dt.UTC)


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
    mode = 0o600 if private else 0o644
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)  # O_CREAT's mode does not apply to a leftover temp file
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _new_ca(days: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
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
    return ca_key, ca


@dataclass(frozen=True)
class Issued:
    """A serving pair and its CA as PEM bytes; ``ca_key`` is None when an existing CA signed it."""

    ca_cert: bytes
    ca_key: bytes | None
    cert: bytes
    key: bytes


_PEM = serialization.Encoding.PEM
_KEY_FORMAT = (_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def issue(names: list[str], days: int = 365, common_name: str | None = None,
          ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None = None, client: bool = False) -> Issued:
    """A serving certificate for ``names`` (DNS names or IPs), in memory, signed by ``ca`` (key,
    certificate) or by a new CA of the same lifetime; ``client``: a client certificate instead (the apiserver's,
    for ``serve --client-ca-file``)."""
    now = _now()
    new_ca = ca is None
    ca_key, ca_cert = _new_ca(days) if ca is None else ca
    # The leaf never outlives its CA: the apiserver would reject the chain from that day on.
    not_after = min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or names[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(_san(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client
                                              else ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return Issued(ca_cert=ca_cert.public_bytes(_PEM), ca_key=ca_key.private_bytes(*_KEY_FORMAT) if new_ca else None,
                  cert=leaf.public_bytes(_PEM), key=key.private_bytes(*_KEY_FORMAT))


def generate(folder: Path, names: list[str], days: int = 365, common_name: str | None = None,
             ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None = None) -> CertPaths:
    """Create a serving certificate for ``names`` (DNS names or IPs) under ``folder``, signed by ``ca``
    (key, certificate) or by a new CA written next to it."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = CertPaths(folder)
    pair = issue(names, days=days, common_name=common_name, ca=ca)
    if pair.ca_key is not None:
        _write(paths.ca_key, pair.ca_key, private=True)
        _write(paths.ca_cert, pair.ca_cert, private=False)
    _write(paths.key, pair.key, private=True)
    _write(paths.cert, pair.cert, private=False)
    return paths


def pair_problem(cert_pem: bytes, key_pem: bytes, ca_pem: bytes, names: list[str],
                 renew_before: dt.timedelta = RENEW_BEFORE) -> str | None:
    """Why the serving pair cannot be kept, or None when it can: it parses, the key matches, ``ca_pem``
    issued it, it covers ``names`` and has more than ``renew_before`` left."""
    try:
        leaf = check_pair(cert_pem, key_pem)
    except CertsError as exc:
        return str(exc)
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError:
        return "the CA certificate does not parse"
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "the certificate was not issued by the CA certificate next to it"
    if leaf.not_valid_after_utc - renew_before < _now():
        ends = leaf.not_valid_after_utc
        return f"the certificate expires on {ends:%Y-%m-%d %H:%M} UTC, within {renew_before.days} days"
    missing = [n for n in names if n not in san_names_of(leaf)]
    if missing:
        return f"the certificate does not name {', '.join(missing)}"
    return None


def valid_pair(paths: CertPaths, names: list[str]) -> bool:
    """True when the certificate, key and CA exist and ``pair_problem`` finds nothing wrong."""
    try:
        files = paths.cert.read_bytes(), paths.key.read_bytes(), paths.ca_cert.read_bytes()
    except OSError:
        return False
    return pair_problem(*files, names) is None


def ensure_localhost(folder: Path) -> tuple[CertPaths, bool]:
    """Reuse a valid localhost pair under ``folder`` or create one; returns (paths, created)."""
    names = ["localhost", "127.0.0.1", "::1"]
    paths = CertPaths(folder)
    if valid_pair(paths, names):
        return paths, False
    return generate(folder, names), True


# -- certs generate / ca-bundle ----------------------------------------------------------------
class CertsError(Exception):
    """A certificate folder that cannot be used as asked; the message says what to do."""


def service_names(service: str, namespace: str) -> list[str]:
    """The names the apiserver may use for ``service`` in ``namespace`` (it dials ``S.NS.svc``)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def san_names(path: Path) -> list[str]:
    """The DNS and IP SANs of the certificate at ``path`` (empty when it has none)."""
    return san_names_of(x509.load_pem_x509_certificate(path.read_bytes()))


def san_names_of(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(v) for v in san.get_values_for_type(x509.DNSName)] + \
        [str(v) for v in san.get_values_for_type(x509.IPAddress)]


CA_MIN_REMAINING = dt.timedelta(days=30)


def _usable_ca(paths: CertPaths) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None:
    """The CA under ``paths`` when it parses, its key matches and it has 30 days left (the new leaf
    ends with it at the latest)."""
    try:
        cert = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
        key = serialization.load_pem_private_key(paths.ca_key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or cert.public_key() != key.public_key():
        return None
    if cert.not_valid_after_utc < _now() + CA_MIN_REMAINING:
        return None
    return key, cert


MAX_DAYS = 36500  # a hundred years; far more overflows the date type (year 9999)


def days_error(days: int) -> str | None:
    """What is wrong with a validity of ``days`` (``--days``), or None."""
    if days < 1:
        return f"--days must be at least 1, got {days}"
    if days > MAX_DAYS:
        return f"--days must be at most {MAX_DAYS}, got {days}"
    return None


def generate_for_service(folder: Path, service: str, namespace: str, days: int = 365, force: bool = False,
                         new_ca: bool = False) -> tuple[CertPaths, str]:
    """``certs generate``: a serving pair for the in-cluster Service; returns (paths, what was done).

    A valid pair already there is kept (same names) or refused (other names) unless ``force``. With
    ``force`` the existing CA is reused when it is still good, so the ``caBundle`` stays the same and
    running servers pick the new pair up without any window of distrust.
    """
    if (why := days_error(days)) is not None:
        raise CertsError(why)
    names = service_names(service, namespace)
    paths = CertPaths(folder)
    if not force and paths.cert.exists() and paths.key.exists():
        have = _names_if_valid(paths)
        if have is not None and set(names) <= set(have):
            return paths, f"kept the valid pair in {folder} for {', '.join(names)} (--force replaces it)"
        if have is not None:
            raise CertsError(f"{folder} already holds a valid certificate for {', '.join(have)}; "
                             "use --force to replace it, or choose another --out")
    ca = None if new_ca else _usable_ca(paths)
    generate(folder, names, days=days, common_name=f"{service}.{namespace}.svc", ca=ca)
    how = "signed by the existing CA (caBundle unchanged)" if ca is not None else "with a new CA"
    until = x509.load_pem_x509_certificate(paths.cert.read_bytes()).not_valid_after_utc
    return paths, f"wrote a certificate for {', '.join(names)} valid until {until:%Y-%m-%d} {how} to {folder}"


def _names_if_valid(paths: CertPaths) -> list[str] | None:
    if not valid_pair(paths, []):
        return None
    return san_names(paths.cert)


def ca_bundle(folder: Path) -> str:
    """``certs ca-bundle``: the base64 of the CA certificate PEM, as ``caBundle`` wants it."""
    path = CertPaths(folder).ca_cert
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CertsError(f"{path}: not found; run `colocation-webhook certs generate` first") from None
    except OSError as exc:
        raise CertsError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        x509.load_pem_x509_certificate(data)
    except ValueError:
        raise CertsError(f"{path}: not a PEM certificate") from None
    return base64.b64encode(data).decode()


def check_pair(cert_pem: bytes, key_pem: bytes) -> x509.Certificate:
    """Raise ``CertsError`` naming what is wrong unless the PEM pair parses, matches and is in date.

    Returns the leaf certificate (the first one in ``cert_pem``)."""
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as exc:
        raise CertsError(f"the certificate does not parse: {exc}") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertsError(f"the private key does not parse: {exc}") from None
    leaf = chain[0]
    if leaf.public_key() != key.public_key():
        raise CertsError("the private key does not match the certificate")
    now = _now()
    if not leaf.not_valid_before_utc <= now <= leaf.not_valid_after_utc:
        raise CertsError(f"the certificate is not valid now (valid {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} "
                         f"to {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC)")
    return leaf
