"""Whether one more large review fits in the memory the pod has left: a burst of them is refused (429, the
apiserver's client retries) before it pushes the pod past its limit, where the kernel would kill both replicas of a
busy cluster at the same moment.

The cost model, from bench/hostile_load.py (docs/benchmarks.md): the server holds each large review's body while
it waits its turn (the chunks read and the joined copy), and decodes and answers them one at a time
(``webhook.server.offload``), so it grows by one decoded review, the largest. The cgroup's usage, read when a
review arrives, lags behind the reviews already let in (their bodies are still arriving, none decoded yet), so what
those will take is counted on top of it: a burst is measured against the limit as a whole, not one review at a
time.
"""

from __future__ import annotations

from collections.abc import Iterable

# Bytes the server holds per byte of each large review in flight: the chunks and the joined body (2), and a margin.
HELD = 3
# Bytes taken per byte of the review being decoded, as bench/hostile_load.py measured it when a forked child decoded
# (docs/benchmarks.md, "Figures behind the code's comments"); the worker thread takes less: kept as the margin.
DECODED = 20
SHARE = 0.75   # of the limit, the most a burst may bring the pod's usage to
MIB = 1024 * 1024


def burst_cost(bodies: Iterable[int]) -> int:
    """The memory large reviews of these sizes take at once: every body held, and the largest decoded."""
    sizes = list(bodies)
    return HELD * sum(sizes) + DECODED * max(sizes, default=0)


def memory_refusal(usage: int, limit: int, body_bytes: int, in_flight: Iterable[int] = (),
                   share: float = SHARE) -> str | None:
    """Why a review of ``body_bytes`` must wait, given the pod's memory ``usage`` and ``limit`` and the sizes of
    the large reviews already let in (``in_flight``); None when it fits."""
    admitted = list(in_flight)
    before = burst_cost(admitted)
    need = burst_cost([*admitted, body_bytes]) - before
    if usage + before + need <= limit * share:
        return None
    waiting = f", {len(admitted)} large review(s) in flight will take about {before / MIB:.0f} MiB more" \
        if admitted else ""
    return (f"the pod uses {usage / MIB:.0f} MiB of its {limit / MIB:.0f} MiB memory limit{waiting}, and a review "
            f"of {body_bytes} bytes needs about {need / MIB:.0f} MiB more, past {share:.0%} of the limit")
