"""Whether one more large review fits in the memory the pod has left: a burst of them is refused (429, the
apiserver's client retries) before it pushes the pod past its limit, where the kernel would kill both replicas of a
busy cluster at the same moment."""

from __future__ import annotations

# Bytes held for each byte of a large review while it is decoded and answered: 8 reviews of 3 MB at once took
# about 115 MiB above idle (bench/hostile_load.py, docs/benchmarks.md), 4.8 a byte; 6 leaves a margin.
EXPANSION = 6
SHARE = 0.75   # of the limit, the most a burst may bring the pod's usage to
MIB = 1024 * 1024


def memory_refusal(usage: int, limit: int, body_bytes: int, expansion: int = EXPANSION,
                   share: float = SHARE) -> str | None:
    """Why a review of ``body_bytes`` must wait, given the pod's memory ``usage`` and ``limit``; None when it fits."""
    need = body_bytes * expansion
    if usage + need <= limit * share:
        return None
    return (f"the pod uses {usage / MIB:.0f} MiB of its {limit / MIB:.0f} MiB memory limit, and a review of "
            f"{body_bytes} bytes needs about {need / MIB:.0f} MiB more, past {share:.0%} of the limit")
