"""Table tests of the batch-units rule (validating rule 2): batch-cpu in whole milli-cores, batch-memory in whole
bytes, a request not above its limit."""

from __future__ import annotations

from typing import Any

import pytest

from tests.validating_helpers import (
    BATCH_CPU,
    BATCH_MEMORY,
    batch,
    be_pod,
    container,
    expect,
    one_container,
    validate,
)

WHOLE_CPU = ("kubernetes.io/batch-cpu counts milli-cores and must be a whole number: "
             "write 500 for half a core, 1k or 1000 for one core")
WHOLE_MEM = ("kubernetes.io/batch-memory counts bytes and must be a whole number: "
             "write 512Mi or 536870912 for half a gibibyte")
REQ = "spec.containers[0].resources.requests"
LIM = "spec.containers[0].resources.limits"


UNITS = [
    ("500", one_container("500", "1Gi", "500", "1Gi"), None),
    ("1000", one_container("1000", lcpu="1000"), None),
    ("1k", one_container("1k", lcpu="1k"), None),
    ("2k", one_container("2k", lcpu="2k"), None),
    ("JSON integer", one_container(1000, lcpu=1000), None),
    ("limit only", one_container(lcpu="1k", lmem="1Gi"), None),
    ("request only", one_container("1k", "1Gi"), None),
    ("0.5", one_container("0.5"), f'{REQ}[{BATCH_CPU}]: Invalid value: "0.5": {WHOLE_CPU}'),
    ("500m", one_container("500m"), f'{REQ}[{BATCH_CPU}]: Invalid value: "500m": {WHOLE_CPU}'),
    ("1.5 in limits", one_container(lcpu="1.5"), f'{LIM}[{BATCH_CPU}]: Invalid value: "1.5": {WHOLE_CPU}'),
    ("memory 1500m", one_container(mem="1500m"), f'{REQ}[{BATCH_MEMORY}]: Invalid value: "1500m": {WHOLE_MEM}'),
    ("memory 0.5Gi is whole bytes", one_container(mem="0.5Gi", lmem="512Mi"), None),
    ("negative", one_container("-1"), f'{REQ}[{BATCH_CPU}]: Invalid value: "-1": must be greater than or equal to 0'),
    ("request above limit", one_container("2k", lcpu="1k"),
     f'{REQ}: Invalid value: "2k": must be less than or equal to {BATCH_CPU} limit of 1k'),
    ("request below limit (a converted Burstable pod)", one_container("500", lcpu="1k"), None),
    ("equal in other spelling", one_container("1000", lcpu="1k"), None),
    ("several errors aggregate", one_container("0.5", "1.5"),
     f'[{REQ}[{BATCH_CPU}]: Invalid value: "0.5": {WHOLE_CPU}, {REQ}[{BATCH_MEMORY}]: Invalid value: "1.5": {WHOLE_MEM}]'),
    ("init container", be_pod([container("app", {BATCH_CPU: "1k"})], init=[container("i", {BATCH_CPU: "0.1"})]),
     f'spec.initContainers[0].resources.requests[{BATCH_CPU}]: Invalid value: "0.1": {WHOLE_CPU}'),
    # the RuntimeClass's, which the pod's author cannot change: not checked
    ("overhead", be_pod([container("app", {BATCH_CPU: "1k"})], overhead={BATCH_CPU: "250m"}), None),
]


@pytest.mark.parametrize(("name", "obj", "message"), UNITS, ids=[c[0] for c in UNITS])
def test_batch_units(name: str, obj: dict[str, Any], message: str | None) -> None:
    expect(validate(obj), "batch-units", message)


def test_small_batch_cpu_is_not_warned_here() -> None:
    """The validating rules see a conversion's output ("50" from cpu: 50m) like a user's "50": the
    mutating batch-resources rule, which sees what the user wrote, warns instead."""
    d = validate(batch(cpu="2"))
    assert d.allowed and d.warnings == [] and "batch-units" not in d.audit_annotations


def test_update_checked_too() -> None:
    # What the update brings is refused; what the old pod already carried is not (tests/admission/domain/test_ratchet.py).
    d = validate(one_container("0.5"), "UPDATE", old=one_container("500"))
    assert not d.allowed and d.rule == "batch-units"


def test_subresource_and_delete_skipped() -> None:
    from tests.validating_helpers import request, state
    from webhook.admission import chain

    bad = one_container("0.5")
    assert chain.validate(request(bad, "UPDATE", bad, sub="status"), state(), chain.Settings()).allowed
    assert chain.validate(request(bad, "DELETE", bad), state(), chain.Settings()).allowed
