"""Table tests of the priority rule (webhook/admission/rules/mutating/priority.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.mutating import (
    make_state,
    mutate,
    pod,
    priority_class,
)

# -- priority -------------------------------------------------------------------------------------------
PRIORITY_CASES = [
    # (name, extra objects, pod spec fields, expected (class, priority, policy) or denial message)
    ("class resolves", [], {"priorityClassName": "koord-prod", "priority": None, "preemptionPolicy": None},
     ("koord-prod", 9000, "PreemptLowerPriority")),
    ("system-node-critical is built in", [], {"priorityClassName": "system-node-critical", "priority": None,
                                              "preemptionPolicy": None},
     ("system-node-critical", 2000001000, "PreemptLowerPriority")),
    ("no class and no default: 0", [], {"priority": None, "preemptionPolicy": None}, (None, 0, "PreemptLowerPriority")),
    ("default class name is written", [priority_class("d-high", 100, True), priority_class("d-low", 50, True, "Never")],
     {"priority": None, "preemptionPolicy": None}, ("d-low", 50, "Never")),
    ("class without preemptionPolicy", [priority_class("bare", 7, policy=None)],
     {"priorityClassName": "bare", "priority": None, "preemptionPolicy": None}, ("bare", 7, "PreemptLowerPriority")),
    ("matching given priority accepted", [], {"priorityClassName": "koord-batch", "priority": 5000},
     ("koord-batch", 5000, "PreemptLowerPriority")),
    ("unknown class", [], {"priorityClassName": "nope", "priority": None},
     'pods "p" is forbidden: no PriorityClass with name nope was found'),
    ("given priority differs", [], {"priorityClassName": "koord-prod", "priority": 0},
     'pods "p" is forbidden: the integer value of priority (0) must not be provided in pod spec; '
     "priority admission controller computed 9000 from the given PriorityClass name"),
    ("given policy differs", [], {"priorityClassName": "koord-prod", "priority": 9000, "preemptionPolicy": "Never"},
     'pods "p" is forbidden: the string value of PreemptionPolicy (Never) must not be provided in pod spec; '
     "priority admission controller computed PreemptLowerPriority from the given PriorityClass name"),
]


@pytest.mark.parametrize("name,objects,fields,expected", PRIORITY_CASES, ids=[c[0] for c in PRIORITY_CASES])
def test_priority(name: str, objects: list[dict[str, Any]], fields: dict[str, Any],
                  expected: str | tuple[str | None, int, str]) -> None:
    p = pod()
    for k, v in fields.items():
        if v is None:
            p["spec"].pop(k, None)
        else:
            p["spec"][k] = v
    decision, out = mutate(p, make_state(*objects))
    if isinstance(expected, str):
        assert not decision.allowed and decision.code == 403 and decision.message == expected
        return
    assert decision.allowed, decision.message
    assert out is not None
    cls, prio, policy = expected
    assert (out["spec"].get("priorityClassName"), out["spec"]["priority"], out["spec"]["preemptionPolicy"]) == \
        (cls, prio, policy)


def test_generate_name_is_used_in_forbidden_prefix() -> None:
    p = pod(name=None, generate_name="web-", priorityClassName="nope")
    decision, _ = mutate(p, make_state())
    assert decision.message == 'pods "web-" is forbidden: no PriorityClass with name nope was found'
