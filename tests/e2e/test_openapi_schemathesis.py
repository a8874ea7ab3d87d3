"""schemathesis against the server's own OpenAPI description, over real HTTPS: the review paths, which only the
server's one entry answers (the FastAPI app that publishes the schema has no route for them), and the others."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.serving import Server, run_server
from webhook.admission.review import REVIEW_PATHS
from webhook.cluster.files import FilesSource
from webhook.cluster.sources import example_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState
from webhook.server.app import create_app


def _state() -> ClusterState:
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(example_folder(), state).load()
    return state


schema = schemathesis.openapi.from_dict(create_app(_state()).openapi())


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with run_server(_state(), tmp_path_factory.mktemp("schemathesis-certs")) as srv:
        yield srv


def test_schema_describes_every_route() -> None:
    document = create_app(_state()).openapi()
    assert {"/mutate", "/validate", "/healthz", "/readyz"} <= set(document["paths"])
    for path in REVIEW_PATHS:  # the request's schema, made from the review Structs
        body = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/AdmissionReview"}
    assert "AdmissionReview" in document["components"]["schemas"]


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_and_never_errors(case: schemathesis.Case[Any], live: Server) -> None:
    response = case.call(base_url=live.url, verify=str(Path(live.certs.ca_cert)))
    assert response.status_code < 500, response.text[:300]
    if case.path in REVIEW_PATHS and case.method.upper() == "POST":  # answered as a review, not missed as a route
        assert response.status_code not in (404, 405), response.text[:300]
    assert "Traceback" not in response.text
    case.validate_response(response)
