"""Serving certificates: a self-signed CA and a SAN serving certificate (cryptography).

Used by ``serve`` (localhost certificates when no TLS flags are given), ``certs generate`` /
``certs ca-bundle`` (the in-cluster Service certificate and the ``caBundle``) and the certificate
watcher (``check_pair``). SANs are always set: apiservers since 1.19 refuse CN-only certificates.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.tls.pair import CertsError as CertsError  # re-exported: callers that make pairs catch it here

CA_CERT, CA_KEY = "ca.crt", "ca.key"
RENEW_BEFORE = dt.timedelta(days=7)


@dataclass(frozen=True)
class CertPaths:
    """The files of a certificate folder: the CA (``ca.crt``, ``ca.key``) and a serving pair, ``tls.crt`` /
    ``tls.key`` (what ``certs generate`` and a Secret hold) unless ``leaf`` names another (``serve``'s own pair,
    ``localhost.crt`` / ``localhost.key``)."""

    folder: Path
    leaf: str = "tls"

    @property
    def ca_cert(self) -> Path:
        return self.folder / CA_CERT

    @property
    def ca_key(self) -> Path:
        return self.folder / CA_KEY

    @property
    def cert(self) -> Path:
        return self.folder / f"{self.leaf}.crt"

    @property
    def key(self) -> Path:
        return self.folder / f"{self.leaf}.key"


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


def _write_files(files: list[tuple[Path, bytes, bool]]) -> None:
    """Write (path, data, private) in order; a failure is a CertsError naming the file."""
    for path, data, private in files:
        try:
            _write(path, data, private)
        except OSError as exc:
            raise CertsError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _issued_files(paths: CertPaths, pair: Issued) -> list[tuple[Path, bytes, bool]]:
    """What to write for ``pair``: the CA first when it is new, then the serving pair, each key before its
    certificate."""
    files = [(paths.ca_key, pair.ca_key, True), (paths.ca_cert, pair.ca_cert, False)] if pair.ca_key else []
    return [*files, (paths.key, pair.key, True), (paths.cert, pair.cert, False)]


def generate(folder: Path, names: list[str], days: int = 365, common_name: str | None = None,
             ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None = None) -> CertPaths:
    """Create a serving certificate for ``names`` (DNS names or IPs) under ``folder``, signed by ``ca``
    (key, certificate) or by a new CA written next to it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CertsError(f"{folder}: cannot create the folder: {exc.strerror or exc}") from None
    paths = CertPaths(folder)
    _write_files(_issued_files(paths, issue(names, days=days, common_name=common_name, ca=ca)))
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


CA_MIN_REMAINING = dt.timedelta(days=30)
CA = tuple[ec.EllipticCurvePrivateKey, x509.Certificate]


def existing_ca(paths: CertPaths) -> CA | None:
    """The CA under ``paths`` (key, certificate); None when neither file is there. Raises ``CertsError`` saying
    why a CA that is there cannot sign: a file missing or unreadable, a key that does not match, less than 30
    days left (a new leaf ends with its CA at the latest)."""
    cert_file, key_file = paths.ca_cert, paths.ca_key
    if not cert_file.exists() and not key_file.exists():
        return None
    try:
        cert_pem, key_pem = cert_file.read_bytes(), key_file.read_bytes()
    except OSError as exc:
        other = cert_file if exc.filename == str(key_file) else key_file
        why = "is missing" if isinstance(exc, FileNotFoundError) else f"cannot be read ({exc.strerror})"
        raise CertsError(f"{exc.filename} {why} beside {other}") from None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise CertsError(f"{cert_file} is not a PEM certificate") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise CertsError(f"{key_file} is not an unencrypted PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or cert.public_key() != key.public_key():
        raise CertsError(f"{key_file} is not the key of {cert_file}")
    if cert.not_valid_after_utc < _now() + CA_MIN_REMAINING:
        raise CertsError(f"{cert_file} expires on {cert.not_valid_after_utc:%Y-%m-%d}, within "
                         f"{CA_MIN_REMAINING.days} days")
    return key, cert


# -- serve's own pair ---------------------------------------------------------------------------
LOCALHOST = ["localhost", "127.0.0.1", "::1"]
SERVE_LEAF = "localhost"      # serve's pair: localhost.crt / localhost.key, never tls.crt / tls.key
MADE_BY_SERVE = ".made-by-serve"
_WILDCARDS = {"", "0.0.0.0", "::"}


def serving_names(host: str) -> list[str]:
    """The names ``serve``'s own certificate covers: localhost, and ``--host`` when it is one address or name."""
    return LOCALHOST + ([host] if host not in _WILDCARDS and host not in LOCALHOST else [])


class _MadeByServe:
    """The files ``serve`` wrote itself, by name and SHA-256 (``.made-by-serve``, JSON): the only ones it may
    replace. A file changed since, or written by anyone else (``certs generate``, a user), is not among them.
    An unreadable record owns nothing, which errs on the side of keeping files."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / MADE_BY_SERVE
        try:
            record = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            record = {}
        self.hashes: dict[str, list[str]] = {
            k: [h for h in v if isinstance(h, str)] for k, v in record.items()
            if isinstance(k, str) and isinstance(v, list)} if isinstance(record, dict) else {}

    def owns(self, path: Path) -> bool:
        try:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            return False
        return digest in self.hashes.get(path.name, ())

    def write(self, files: list[tuple[Path, bytes, bool]]) -> None:
        """Write ``files``, recorded before and after: a crash half-way leaves every file either unchanged or
        new, and both are known as serve's."""
        new = {path.name: hashlib.sha256(data).hexdigest() for path, data, _ in files}
        during = {**self.hashes, **{n: [*self.hashes.get(n, []), h] for n, h in new.items()}}
        _write_files([(self.path, json.dumps(during).encode(), False)])
        _write_files(files)
        self.hashes = {**self.hashes, **{n: [h] for n, h in new.items()}}
        _write_files([(self.path, json.dumps(self.hashes).encode(), False)])


_OTHER_PAIR = "give --tls-cert-file and --tls-private-key-file, or --cert-dir with a folder of serve's own"


def ensure_localhost(folder: Path, host: str = "0.0.0.0") -> tuple[CertPaths, str]:
    """``serve`` without TLS flags: its own pair for ``serving_names(host)`` under ``folder``, reused while
    valid; returns (paths, one line saying what was done).

    ``serve`` never replaces a file it did not write itself (``_MadeByServe``): a CA already there (from
    ``certs generate``, perhaps in a ``caBundle`` by now) signs serve's new pair instead of being replaced, and
    ``tls.crt``/``tls.key`` are not serve's files at all. Where that cannot work (a CA that cannot sign, a
    ``localhost.key`` from elsewhere) it raises ``CertsError`` saying what is there and which flag to use."""
    if folder.exists() and not folder.is_dir():
        raise CertsError(f"{folder} is not a folder; {_OTHER_PAIR}")
    names = serving_names(host)
    paths = CertPaths(folder, SERVE_LEAF)
    if valid_pair(paths, names):
        return paths, f"reusing the certificate {paths.cert} for {', '.join(names)} (CA {paths.ca_cert})"
    made = _MadeByServe(folder)
    try:
        ca = existing_ca(paths)
    except CertsError as exc:
        theirs = [f for f in (paths.ca_cert, paths.ca_key) if f.exists() and not made.owns(f)]
        if theirs:
            raise CertsError(f"{exc}, and serve replaces only a CA it made itself; {_OTHER_PAIR}") from None
        ca = None
    for f in (paths.cert, paths.key):
        if f.exists() and not made.owns(f):
            raise CertsError(f"{f} was not made by serve and is not a valid pair for {', '.join(names)} signed by "
                             f"{paths.ca_cert}; serve will not replace it: remove it, or {_OTHER_PAIR}")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CertsError(f"{folder}: cannot create: {exc.strerror or exc}") from None
    made.write(_issued_files(paths, issue(names, common_name="localhost", ca=ca)))
    how = "signed by the CA already there (its caBundle stays valid)" if ca is not None else "with a new CA"
    return paths, (f"created a self-signed certificate for {', '.join(names)} {how}: CA {paths.ca_cert}, "
                   f"certificate {paths.cert}, key {paths.key}")


# -- certs generate / ca-bundle ----------------------------------------------------------------
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

    A valid pair already there is kept (same names); one for other names, valid or not, is refused unless
    ``force`` (it is someone's, for another Service); one for the same names that is no longer good is renewed.
    With ``force`` the existing CA is reused when it is still good, so the ``caBundle`` stays the same and
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
        named = have if have is not None else _names_of(paths.cert)
        if named and not set(names) <= set(named):
            state = "a valid certificate" if have is not None else "a certificate (not usable now)"
            raise CertsError(f"{folder} already holds {state} for {', '.join(named)}; "
                             "use --force to replace it, or choose another --out")
    ca = None
    if not new_ca:
        try:
            ca = existing_ca(paths)
        except CertsError as exc:  # a CA that may be in a caBundle by now is replaced only when asked
            raise CertsError(f"{exc}; a new CA changes the caBundle: give --force --new-ca to make one") from None
    generate(folder, names, days=days, common_name=f"{service}.{namespace}.svc", ca=ca)
    how = "signed by the existing CA (caBundle unchanged)" if ca is not None else "with a new CA"
    until = x509.load_pem_x509_certificate(paths.cert.read_bytes()).not_valid_after_utc
    return paths, f"wrote a certificate for {', '.join(names)} valid until {until:%Y-%m-%d} {how} to {folder}"


def _names_of(cert: Path) -> list[str]:
    """The names of the certificate at ``cert`` (its SANs, else its Common Name), or none when it does not parse."""
    try:
        leaf = x509.load_pem_x509_certificate(cert.read_bytes())
    except (OSError, ValueError):
        return []
    return san_names_of(leaf) or [str(a.value) for a in leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


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
