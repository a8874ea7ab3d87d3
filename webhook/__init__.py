"""colocation-webhook: a colocation admission webhook and node agent for Kubernetes (Koordinator-compatible)."""

from importlib.metadata import PackageNotFoundError, version

from webhook.compiled import SWITCH, stale_modules

try:
    __version__ = version("colocation-webhook")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# A source tree built in place (pip install -e .) holds compiled modules beside their sources, and Python imports
# the compiled one: after an edit it would run the code as it was at the build, silently.
_stale = stale_modules()
if _stale:
    raise ImportError(
        f"colocation-webhook: the compiled build of {', '.join(_stale)} is older than the source; rebuild it with "
        f"`pip install -e .`, or run plain Python with `{SWITCH}=0 pip install -e .`")
