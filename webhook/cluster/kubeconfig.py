"""Loading a kubeconfig file where no temporary directory can be written, for both programs.

The official client's loader (``kubernetes/config/kube_config.py``) writes each certificate it is given inline
(``certificate-authority-data``, ``client-certificate-data``, ``client-key-data``, and the same from an exec plugin
or OIDC's ``idp-certificate-authority-data``) to a file from ``tempfile.mkstemp`` and hands ssl its path. The
DaemonSet has none to write (manifests/base/agent.yaml: ``readOnlyRootFilesystem``, no /tmp volume), and the load
failed with ``No usable temporary directory found``. Here those files are anonymous memory files
(``memfd_create(2)``), named by ``/proc/self/fd/N``: each open of that path opens the file from its start, as ssl
and the client do, and nothing reaches a disk. They stay open for the process's lifetime, as the client keeps its
temporary files until exit (a token refresh may load the kubeconfig again and be handed the same path).

This reads the client's internals: its module-level ``_create_temp_file_with_content(content, temp_file_path=None,
force_recreate=False)``, which ``FileOrData._write_file`` and ``KubeConfigLoader._refresh_oidc`` look up by name
when they run, is replaced in its module. pyproject.toml bounds the client's version for that reason.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from kubernetes import config as k8s_config
from kubernetes.config import kube_config

# The kubernetes package ships no type hints for its config loaders.
_LOADERS: Any = k8s_config
_KUBE_CONFIG: Any = kube_config
_FD_PATH = "/proc/self/fd"
_files: dict[bytes, str] = {}     # content -> its memory file's path, as the client reuses its files by content
_lock = threading.Lock()


def memory_file(content: str | bytes, temp_file_path: str | None = None, force_recreate: bool = False) -> str:
    """The path of an anonymous memory file holding ``content`` (the client's ``_create_temp_file_with_content``
    contract; ``temp_file_path``, a folder for the file, is not needed)."""
    data = content.encode() if isinstance(content, str) else bytes(content)
    with _lock:
        if not force_recreate and data in _files:
            return _files[data]
        fd = os.memfd_create("kubeconfig", os.MFD_CLOEXEC)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        _files[data] = path = f"{_FD_PATH}/{fd}"
        return path


def load_kubeconfig(path: str, cfg: Any) -> None:
    """``kubernetes.config.load_kube_config`` of ``path`` into the client ``Configuration`` ``cfg``, its inline
    certificates in memory files (where the kernel has them; elsewhere the client's temporary files)."""
    if hasattr(os, "memfd_create") and os.path.isdir(_FD_PATH):
        _KUBE_CONFIG._create_temp_file_with_content = memory_file
    _LOADERS.load_kube_config(config_file=path, client_configuration=cfg)
