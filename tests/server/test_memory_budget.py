"""A large review waits (429) when the pod's memory cgroup could not hold it: the budget, the cgroup found from
/proc/self/cgroup (v2 and v1 trees, and a real v1 memory cgroup with a real limit), and the answer over real TLS."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest

from harness.kernel import real_cgroup_root, v1_unavailable_reason
from tests.conftest import load_fixture
from tests.server.test_serving_limits import REVIEW, big_review, head, read_response
from tests.serving import run_server, tls
from webhook.cluster.state import ClusterState
from webhook.server.asgi import EdgePolicy
from webhook.server.memory import MemoryCgroup, this_process
from webhook.server.memory_budget import MIB, SHARE, burst_cost, memory_refusal

LIMIT = 256 * MIB


def test_the_budget() -> None:
    assert memory_refusal(60 * MIB, LIMIT, 3 * MIB) is None                  # idle: 3 MB held, one decoded: 69 MiB
    assert memory_refusal(180 * MIB, LIMIT, 64 * 1024) is None               # a small large one still fits
    why = memory_refusal(180 * MIB, LIMIT, 3 * MIB)                          # 180 + 69 > 192 (75 %)
    assert why == ("the pod uses 180 MiB of its 256 MiB memory limit, and a review of 3145728 bytes needs about "
                   "69 MiB more, past 75% of the limit")


def test_a_burst_is_counted_as_a_whole() -> None:
    # The usage read as each review arrives lags behind the ones let in: they count on top of it.
    assert burst_cost([]) == 0
    assert burst_cost([3 * MIB, MIB]) == 3 * 4 * MIB + 20 * 3 * MIB         # every body held, the largest decoded
    admitted: list[int] = []
    while memory_refusal(110 * MIB, LIMIT, 3 * MIB, admitted) is None:     # idle at 10 000 namespaces
        admitted.append(3 * MIB)
    assert len(admitted) == 2                                               # 110 + 9 * 2 + 60 = 188 <= 192
    assert burst_cost(admitted) + 110 * MIB <= LIMIT * SHARE
    why = memory_refusal(110 * MIB, LIMIT, 3 * MIB, admitted)
    assert why is not None and "2 large review(s) in flight will take about 78 MiB more" in why
    # A smaller review than the one decoding adds only its body.
    assert memory_refusal(110 * MIB, LIMIT, MIB, admitted) is None


def _tree(tmp: Path, cgroup_line: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc, root = tmp / "proc", tmp / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup_line + "\n")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return proc, root


@pytest.mark.parametrize(("name", "line", "files", "expected"), [
    ("v2, its own folder", "0::/kubepods/pod1/c1",
     {"kubepods/pod1/c1/memory.max": "268435456\n", "kubepods/pod1/c1/memory.current": "104857600\n"},
     (100 * MIB, LIMIT)),
    ("v2, a cgroup namespace: the root is its folder", "0::/",
     {"memory.max": "268435456\n", "memory.current": "1048576\n"}, (MIB, LIMIT)),
    ("v2, the host's path not mounted here: the root", "0::/kubepods/pod1/c1",
     {"memory.max": "268435456\n", "memory.current": "1048576\n"}, (MIB, LIMIT)),
    ("v1", "5:memory:/kubepods/pod1/c1", {"memory/kubepods/pod1/c1/memory.limit_in_bytes": "268435456\n",
                                          "memory/kubepods/pod1/c1/memory.usage_in_bytes": "2097152\n"},
     (2 * MIB, LIMIT)),
    ("v2 without a limit", "0::/", {"memory.max": "max\n", "memory.current": "1\n"}, None),
    ("v1 without a limit", "5:memory:/", {"memory/memory.limit_in_bytes": "9223372036854771712\n",
                                          "memory/memory.usage_in_bytes": "1\n"}, None),
    ("no memory controller", "3:cpu,cpuacct:/", {}, None),
])
def test_the_cgroup_of_this_process(tmp_path: Path, name: str, line: str, files: dict[str, str],
                                    expected: tuple[int, int] | None) -> None:
    proc, root = _tree(tmp_path, line, files)
    found = this_process(proc, root)
    assert (found.read() if found is not None else None) == expected, name


def test_a_real_memory_cgroup_with_a_limit_is_found_from_inside() -> None:
    reason = v1_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with real_cgroup_root() as cg:
        cg.mkdir("pod", controllers=("memory",))
        cg.write("memory", "pod", "memory.limit_in_bytes", str(LIMIT))
        child = cg.spawn("pod", "from webhook.server.memory import this_process\n"
                                "m = this_process()\nprint(m.read() if m else None)", controllers=("memory",))
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        usage, limit = ast.literal_eval(out.strip())   # the (usage, limit) the child printed
        assert limit == LIMIT and 0 < usage < LIMIT


def test_a_large_review_waits_for_memory_over_real_tls(tmp_path: Path, example_state: ClusterState,
                                                       cert_dir: Path) -> None:
    usage, limit = tmp_path / "memory.current", tmp_path / "memory.max"
    limit.write_text(f"{LIMIT}\n")
    usage.write_text(f"{190 * MIB}\n")            # a pod close to 75 % of its limit
    policy = EdgePolicy(memory=MemoryCgroup(usage, limit))
    large = json.dumps(big_review(1024 * 1024)).encode()
    small = json.dumps(load_fixture(REVIEW)).encode()
    with run_server(example_state, cert_dir, policy=policy) as srv, srv.client() as c:
        refused = c.post("/mutate", content=large, headers={"content-type": "application/json"})
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert "the pod uses 190 MiB of its 256 MiB memory limit" in refused.json()["error"]
        assert c.post("/mutate", content=small).status_code == 200      # small reviews are not held up
        usage.write_text(f"{80 * MIB}\n")            # memory came back
        assert c.post("/mutate", content=large, headers={"content-type": "application/json"}).status_code == 200


def test_a_large_review_in_flight_counts_against_the_next_over_real_tls(tmp_path: Path, example_state: ClusterState,
                                                                         cert_dir: Path) -> None:
    usage, limit = tmp_path / "memory.current", tmp_path / "memory.max"
    limit.write_text(f"{LIMIT}\n")
    usage.write_text(f"{120 * MIB}\n")            # one 1 MB review fits (120 + 23), two do not once counted together
    policy = EdgePolicy(memory=MemoryCgroup(usage, limit))
    large = json.dumps(big_review(1024 * 1024)).encode()
    with run_server(example_state, cert_dir, policy=policy) as srv, srv.client() as c:
        held = tls(srv)
        held.sendall(head("/mutate", len(large)) + large[:1000])   # let in; its body still coming, usage unchanged
        time.sleep(0.3)
        usage.write_text(f"{167 * MIB}\n")
        refused = c.post("/mutate", content=large)                 # 167 + 23 alone fits under 192, + 3 held not
        assert refused.status_code == 429                          # ... but not with the one in flight
        assert "1 large review(s) in flight will take about" in refused.json()["error"]
        held.sendall(large[1000:])
        assert read_response(held)[0] == 200
        held.close()
        assert c.post("/mutate", content=large).status_code == 200  # alone again: it fits
