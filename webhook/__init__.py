"""colocation-webhook: a colocation admission webhook and node agent for Kubernetes (Koordinator-compatible)."""

import sys

from webhook.cli.interrupt import guard

guard()  # first: a Ctrl-C while a program imports the rest is its one line, not a traceback (webhook/cli/interrupt.py)

from importlib.metadata import PackageNotFoundError, version  # noqa: E402

from webhook.compiled import UNRECORDED, bypass_stale, stale_warning  # noqa: E402

try:
    __version__ = version("colocation-webhook")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

# A source tree built in place (pip install -e .) holds compiled modules beside their sources, and Python imports
# the compiled one: after an edit it would run the code as it was at the build, silently. Before any of them is
# imported, a tree where one's source is not what its build compiled (webhook/compiled.py compares hashes) imports
# them all from their sources instead, and says so once.
_stale = bypass_stale()
if _stale:
    print(stale_warning(_stale, UNRECORDED[0] if UNRECORDED else None), file=sys.stderr)
