"""What enters the cluster state: one judgement of an object, whichever source brings it (pure).

Both sources call ``judge`` on every object they take in, before anything is left out of it: the files source
(``webhook/cluster/files.py``) for each object of a folder, the live source (``webhook/cluster/live.py``) for each
object of a list or a watch event. What it finds is of two sorts, and each has one outcome in both sources:

- **refused**: what the apiserver's own checks refuse (``webhook/cluster/validation.py``). A cluster never holds
  such an object: a folder that holds one is no cluster's state, and its load fails naming the file and line; an
  object the live source gets anyway (a CRD without a schema, an older apiserver) is left out of the state, or, a
  profile, kept marked, with one warning.
- **unusable**: a ClusterColocationProfile the apiserver stores (our CRD's schema takes it) but no rule can apply
  (``compile_profile``: a selector ``{key: tier, operator: In, values: []}``, a label the pod could not carry).
  Both sources keep it in the state marked with the reason: it never matches, it is named once in the log, counted
  in ``colocation_webhook_cache_invalid_objects``, and warned about on every review it could have matched
  (``colocation profile X ignored: ...``). Refusing the whole folder instead would make ``review --cluster-state``
  of an exported cluster refuse what the webhook serves; applying it is impossible; dropping it silently would hide
  why a pod was not converted. docs/cluster-state.md, "A profile no rule can apply".

What the sources add of their own is only where the object came from: kubectl's strict field checks of a file
(``webhook/cluster/strict.py``), a watch event's place in the cache.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from webhook.cluster.profiles import compile_profile
from webhook.cluster.validation import FieldError, object_errors
from webhook.core.fielderrors import aggregate

PROFILE_KIND = "ClusterColocationProfile"
_PATH_PART = re.compile(r"[^.\[\]]+")


@dataclass(frozen=True, slots=True)
class Judgement:
    """What ``judge`` found: nothing (both empty), what the apiserver refuses, or what no rule can apply."""

    refused: list[FieldError] = field(default_factory=list)
    unusable: FieldError | None = None

    @property
    def reason(self) -> str | None:
        """Why the object must not be used, in one text (the apiserver's aggregate of several), or None."""
        if self.refused:
            return aggregate(dict.fromkeys(text for _, text in self.refused))
        return self.unusable[1] if self.unusable is not None else None


def judge(obj: dict[str, Any]) -> Judgement:
    """The one judgement of an object a source takes in (its metadata defaulted as the source stores it)."""
    refused = object_errors(obj)
    if refused:
        return Judgement(refused)
    if obj.get("kind") == PROFILE_KIND:
        error = compile_profile(obj).error
        if error is not None:
            return Judgement(unusable=(_error_path(error), error))
    return Judgement()


def _error_path(error: str) -> tuple[str | int, ...]:
    """Where in the profile ``spec.labels[a b]: Invalid value: ...`` points (``spec``, ``labels``, ``a b``), for
    the line a file names; a text that names a field of the spec without ``spec.`` gets it."""
    head = error.split(":", 1)[0]
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in _PATH_PART.findall(head)]
    if parts and parts[0] not in ("spec", "metadata"):
        parts.insert(0, "spec")
    return tuple(parts)
