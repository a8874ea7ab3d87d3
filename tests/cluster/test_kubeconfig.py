"""A kubeconfig with its certificates embedded (``*-data``) loads where no temporary directory can be written (the
DaemonSet's read-only root filesystem, no /tmp): in both programs, the CA, certificate and key read back as
given."""

from __future__ import annotations

import base64
import errno
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from webhook.agent.edges.actions import api_client_for
from webhook.cluster.live import _client_configuration
from webhook.tls.certs import Issued, issue


def _no_temporary_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    nowhere = str(tmp_path / "nowhere")
    for name in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.setenv(name, nowhere)

    def gettempdir() -> NoReturn:
        raise FileNotFoundError(errno.ENOENT, f"No usable temporary directory found in [{nowhere!r}, '/tmp']")

    monkeypatch.setattr(tempfile, "tempdir", nowhere)
    monkeypatch.setattr(tempfile, "gettempdir", gettempdir)


def _kubeconfig(tmp_path: Path, issued: Issued) -> Path:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443",
                                                  "certificate-authority-data": b64(issued.ca_cert)}}],
           "users": [{"name": "u", "user": {"client-certificate-data": b64(issued.cert),
                                            "client-key-data": b64(issued.key)}}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


LOADERS: dict[str, Callable[[str], Any]] = {
    "agent": lambda path: api_client_for(path).configuration,      # builds the client's TLS context too
    "webhook": _client_configuration,                               # the live source, certs bootstrap
}


@pytest.mark.parametrize("program", sorted(LOADERS))
def test_embedded_certificates_load_without_a_temporary_directory(
        program: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    issued = issue(["127.0.0.1"], client=True)      # new each time: the client caches files by their content
    path = _kubeconfig(tmp_path, issued)
    _no_temporary_directory(monkeypatch, tmp_path)
    cfg = LOADERS[program](str(path))
    assert cfg.host == "https://127.0.0.1:6443"
    for file, data in ((cfg.ssl_ca_cert, issued.ca_cert), (cfg.cert_file, issued.cert), (cfg.key_file, issued.key)):
        assert Path(file).read_bytes() == data
        assert Path(file).read_bytes() == data          # read again from the start: every open sees it whole
    ssl.create_default_context(cafile=cfg.ssl_ca_cert).load_cert_chain(cfg.cert_file, cfg.key_file)   # OpenSSL too
    assert not (tmp_path / "nowhere").exists()
