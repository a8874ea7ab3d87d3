#!/usr/bin/env python3
"""Instructions per review, counted by valgrind's callgrind: a figure this noisy VM cannot move.

Wall-clock figures here swing by ±20 % with whatever else runs; instruction counts repeat within 0.1 %.
Each endpoint runs twice under callgrind, once with only the warm-up and once with N more reviews, and the
difference over N is printed. Give another checkout of the project with --tree to compare two commits back to
back (the same Python and libraries run both). ``--edge`` counts a whole HTTP request instead: its bytes handed to
``serve``'s protocol (webhook.server.serving) on an in-memory transport, answered on the inline path, so the edge
(the parser's callbacks, the entry, the gate, its metrics, the one write) counts too:

    python bench/instructions.py [--tree DIR] [--reviews 200] [--edge]     (needs valgrind: apt-get install valgrind)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REVIEW = "examples/admissionreview-koord-batch.json"
WORKLOAD = """
import sys
sys.path.insert(0, sys.argv[1])
from webhook.admission import chain
from webhook.admission.review import decode_review, encode_response
from webhook.cluster.files import FilesSource
from webhook.cluster.sources import example_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
body = open(sys.argv[1] + "/" + sys.argv[2], "rb").read()
state = ClusterState(WEBHOOK_KINDS)
FilesSource(example_folder(), state).load()
run = chain.mutate if sys.argv[3] == "mutate" else chain.validate
# the rule timings as the server keeps them: in its metrics' RuleTimes (a tree from before it: a global in chain)
timed = {"rule_times": chain.RuleTimes()} if hasattr(chain, "RuleTimes") else {}
def review():
    r = decode_review(body)
    return encode_response(r.apiVersion, r.request.uid, run(r.request, state, chain.Settings(), **timed))
for _ in range(50 + int(sys.argv[4])):
    review()
"""
# A whole request on a kept-alive connection, through serve's protocol: answered from the parser's callbacks, in
# line, so no event loop needs to run.
EDGE_WORKLOAD = """
import sys
sys.path.insert(0, sys.argv[1])
import asyncio
import uvicorn
from uvicorn.server import ServerState
from harness.transport import Transport
from webhook.cluster.files import FilesSource
from webhook.cluster.sources import example_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.server.app import create_server
from webhook.server.serving import GuardedProtocol, ServeOptions
body = open(sys.argv[1] + "/" + sys.argv[2], "rb").read()
state = ClusterState(WEBHOOK_KINDS)
FilesSource(example_folder(), state).load()
server = create_server(state)
# the review entry the protocol answers through (a tree from before it: the gate)
entry = getattr(server.asgi, "entry", None) or server.asgi.gate
protocol_class = GuardedProtocol.limits(ServeOptions(), server.service.metrics, server.lifecycle, entry)
config = uvicorn.Config(server.asgi, http=protocol_class, log_config=None, access_log=False, lifespan="off",
                        server_header=False)
config.load()
asyncio.set_event_loop(asyncio.new_event_loop())
protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
transport = Transport()
protocol.connection_made(transport)
data = (f"POST /{sys.argv[3]}?timeout=10s HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Type: application/json\\r\\n"
        f"Accept: application/json, */*\\r\\nUser-Agent: kube-apiserver-admission\\r\\n"
        f"Content-Length: {len(body)}\\r\\n\\r\\n").encode() + body
for _ in range(50 + int(sys.argv[4])):
    protocol.data_received(data)
    assert transport.written[-1].endswith(b"}"), transport.written[-1][:200]
    transport.written.clear()
"""


def _count(tree: Path, endpoint: str, reviews: int, work: Path, edge: bool = False) -> int:
    script = work / "workload.py"
    script.write_text(EDGE_WORKLOAD if edge else WORKLOAD)
    # Once without valgrind first: a module edited since its last import is compiled to bytecode on the way,
    # which would count in whichever run comes first.
    subprocess.run([sys.executable, str(script), str(tree), REVIEW, endpoint, "0"], check=True)
    run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={work / 'out'}", sys.executable,
                          str(script), str(tree), REVIEW, endpoint, str(reviews)],
                         capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "0"})
    found = re.search(r"Collected : (\d+)", run.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no count:\n{run.stderr[-2000:]}")
    return int(found.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, action="append", default=[],
                    help="another checkout to count too (repeatable); this one is always counted")
    ap.add_argument("--reviews", type=int, default=200)
    ap.add_argument("--edge", action="store_true", help="a whole HTTP request through serve's protocol, in line")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    trees = [ROOT, *(t.resolve() for t in args.tree)]
    what = "a whole HTTP request through serve's protocol, in line" if args.edge else "decode, chain, encode"
    print(f"review: {REVIEW}; instructions per review ({what}), {args.reviews} reviews after 50 warm-up ones")
    print(f"  {'tree':<40}{'mutate':>12}{'validate':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for tree in trees:
            figures = []
            for endpoint in ("mutate", "validate"):
                # The least of two runs each: a first run can pay a one-off cost (a cold cache of the interpreter's
                # or the file system's) that the count would otherwise blame on the reviews or hide.
                base = min(_count(tree, endpoint, 0, Path(tmp), args.edge) for _ in range(2))
                full = min(_count(tree, endpoint, args.reviews, Path(tmp), args.edge) for _ in range(2))
                figures.append((full - base) / args.reviews)
            print(f"  {tree!s:<40}{figures[0]:12,.0f}{figures[1]:12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
