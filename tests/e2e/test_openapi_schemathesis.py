"""schemathesis against the server's own OpenAPI description, over real HTTPS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.serving import Server, run_server
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
    paths = set(create_app(_state()).openapi()["paths"])
    assert {"/mutate", "/validate", "/healthz", "/readyz"} <= paths


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_and_never_errors(case: schemathesis.Case, live: Server) -> None:
    response = case.call(base_url=live.url, verify=str(Path(live.certs.ca_cert)))
    assert response.status_code < 500, response.text[:300]
    assert "Traceback" not in response.text
    case.validate_response(response)
