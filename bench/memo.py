#!/usr/bin/env python3
"""What each memo of the hot path is worth: /mutate and /validate CPU with every memo, and with each one off.

A memo stays only while it saves at least 5 % of /mutate CPU (webhook/core/memo.py). The cost measured is one
review through the served ASGI app in process (the dispatcher, the review service, the chains), without TLS or
HTTP parsing, so a memo's share here is larger than its share of the whole server's CPU: the test errs towards
keeping a memo. Rounds alternate the variants; the medians are printed.

    python bench/memo.py [--review FILE] [--rounds 1500] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.asgi_inprocess import _measure  # noqa: E402
from bench.webhook_load import DEFAULT_REVIEW  # noqa: E402
from webhook.cluster.files import FilesSource  # noqa: E402
from webhook.cluster.sources import example_folder  # noqa: E402
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState  # noqa: E402
from webhook.core import memo  # noqa: E402
from webhook.server.app import create_server  # noqa: E402

THRESHOLD = 0.05


def _switch(target: memo.Memo[Any, Any], on: bool) -> None:
    """Put the memo, or its bare function, behind every module-level name that refers to it."""
    for module in [m for name, m in sys.modules.items() if name.startswith("webhook.")]:
        for attr, value in list(vars(module).items()):
            if value is target or value is target.__wrapped__:
                setattr(module, attr, target if on else target.__wrapped__)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--review", type=Path, default=DEFAULT_REVIEW)
    ap.add_argument("--rounds", type=int, default=1500)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    body = args.review.read_bytes()
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(example_folder(), state).load()
    app = create_server(state).asgi
    memos = list(memo._ALL)
    variants = ["all memos"] + [f"without {m.__name__}" for m in memos] + ["no memo at all"]
    figures: dict[str, dict[str, list[float]]] = {v: {"/mutate": [], "/validate": []} for v in variants}
    for _ in range(args.repeats):
        for v in variants:
            for m in memos:
                _switch(m, on=v == "all memos" or (v != "no memo at all" and v != f"without {m.__name__}"))
            memo.clear_all()
            for path in ("/mutate", "/validate"):
                us, status, _ = asyncio.run(_measure(app, path, body, args.rounds))
                assert status == 200, f"{v} {path}: HTTP {status}"
                figures[v][path].append(us)
    for m in memos:
        _switch(m, on=True)
    base = {p: statistics.median(figures["all memos"][p]) for p in ("/mutate", "/validate")}
    print(f"review: {args.review.name} ({len(body)} bytes); µs of CPU per review in process, median of "
          f"{args.repeats} alternating rounds of {args.rounds}")
    print(f"  {'variant':<28}{'/mutate':>10}{'saved':>9}{'/validate':>12}{'saved':>9}")
    for v in variants:
        mu, va = (statistics.median(figures[v][p]) for p in ("/mutate", "/validate"))
        saved = [(x - base[p]) / x for x, p in ((mu, "/mutate"), (va, "/validate"))]
        verdict = "" if v == "all memos" else ("  worth it" if saved[0] >= THRESHOLD else "  < 5 %: remove")
        print(f"  {v:<28}{mu:10.1f}{saved[0]:9.1%}{va:12.1f}{saved[1]:9.1%}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
