"""The extended-resource-spec annotation (webhook/core/extended_resource_spec.py): made from a pod spec, compared,
parsed."""

from __future__ import annotations

from webhook.core.extended_resource_spec import (
    extended_resource_spec,
    parse_extended_resource_spec,
    same_extended_resource_spec,
)


def test_extended_resource_spec_round_trip() -> None:
    spec = {"containers": [{"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "1000", "cpu": "1"}}},
                           {"name": "b", "resources": {}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"kubernetes.io/batch-cpu": "5"}}}]}
    assert extended_resource_spec(spec) == {"containers": {"a": {"requests": {"kubernetes.io/batch-cpu": "1k"}}}}
    assert same_extended_resource_spec('{"containers":{"a":{"requests":{"kubernetes.io/batch-cpu":"1000"}}}}',
                                       extended_resource_spec(spec))
    assert not same_extended_resource_spec('{"containers":{"a":{"requests":{"kubernetes.io/batch-cpu":"2k"}}}}',
                                           extended_resource_spec(spec))
    assert same_extended_resource_spec(None, {}) and not same_extended_resource_spec("{}", extended_resource_spec(spec))
    assert parse_extended_resource_spec("not json") is None
    assert extended_resource_spec({"containers": []}) == {}
