"""The band conversion's arithmetic (webhook/admission/domain/batch_resources.py): which resources a priority
converts to, and cpu/memory into them in whole milli-cores and bytes."""

from __future__ import annotations

from webhook.admission.domain.batch_resources import convert_resources, targets_for
from webhook.core.quantity import canonical


def test_batch_arithmetic() -> None:
    assert targets_for(5000) == ("kubernetes.io/batch-cpu", "kubernetes.io/batch-memory")
    assert targets_for(7999) == ("kubernetes.io/mid-cpu", "kubernetes.io/mid-memory")
    assert targets_for(9000) is None and targets_for(None) is None and targets_for(True) is None
    new, done = convert_resources({"limits": {"cpu": "1.5", "memory": "1Gi"}}, "b-cpu", "b-mem")
    assert new == {"limits": {"b-cpu": "1500", "b-mem": "1073741824"}, "requests": {"b-cpu": "1500", "b-mem": "1073741824"}}
    assert done[:2] == ["limits.cpu", "limits.memory"]
    assert canonical("1000") == "1k" and canonical("1536Mi") == "1536Mi" and canonical("1024Mi") == "1Gi" and canonical("500") == "500"
