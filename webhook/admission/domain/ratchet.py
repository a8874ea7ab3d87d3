"""Ratcheting: on UPDATE a validating rule refuses only what the update brings (pure, no I/O).

A pod admitted before the webhook was installed, or while it was down under ``failurePolicy: Ignore``, can carry
what the rules refuse today (a fractional batch-cpu, a batch/native mix). Its resources cannot change on UPDATE
(only through ``pods/resize``, judged the same way), so judging the new object alone would refuse every update of
it, down to the removal of a finalizer (the pod would hang in Terminating), and every resize of its memory.
Kubernetes calls the cure ratcheting (CRD validation does it since 1.30): an error the old object already had is
not the update's.

A finding is compared by its whole text: field path, value and problem. A value the update changes is judged
anew, as CRD ratcheting judges a changed field: ``0.5`` -> ``0.7`` is refused, ``0.5`` kept is not.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple

from webhook.core.fielderrors import aggregate


class Ratchet(NamedTuple):
    """A rule's findings about the pod, split by what the old object already carried."""

    refused: Sequence[str]   # what the update brings (every finding on CREATE): the rule denies these
    carried: Sequence[str]   # what the old object already carried: allowed, and said so


def ratchet(errors: Sequence[str], old_errors: Collection[str]) -> Ratchet:
    """``errors`` (a rule's findings about the new object, in its order) split into those not among
    ``old_errors`` (the same rule's findings about the old object) and those that are."""
    if not old_errors:
        return Ratchet(errors, ())
    return Ratchet([e for e in errors if e not in old_errors], [e for e in errors if e in old_errors])


def carried_note(carried: Sequence[str]) -> str:
    """The ``--explain`` line for findings the old object already carried."""
    return f"allowed on UPDATE, the old object already carried it (the update does not add it): {aggregate(carried)}"


def carried_warning(rule: str, carried: Sequence[str]) -> str:
    """The client's warning: the rule and its first carried finding (the field path first, so the apiserver's
    120-character cut keeps what matters)."""
    more = f" (+{len(carried) - 1} more)" if len(carried) > 1 else ""
    return f"{rule}: already so before this update, allowed{more}: {carried[0]}"


def carried_audit(carried: Sequence[str]) -> str:
    """The audit annotation: every carried finding, for an operator looking for such pods."""
    return f"allowed on UPDATE, already carried by the old object: {aggregate(carried)}"
