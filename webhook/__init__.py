"""colocation-webhook: a colocation admission webhook and node agent for Kubernetes (Koordinator-compatible)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("colocation-webhook")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
