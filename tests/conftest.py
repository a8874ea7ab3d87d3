from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import builds
from tests.serving import FIXTURES, Server, run_server
from webhook.cluster.files import FilesSource
from webhook.cluster.sources import example_folder
from webhook.cluster.state import WEBHOOK_KINDS, ClusterState

# No test meets the kubeconfig of the machine it runs on: a command that needs a cluster and is given none finds one
# as kubectl does ($KUBECONFIG, then ~/.kube/config), and would talk to that cluster. A $KUBECONFIG naming no file
# finds none, as kubectl; child processes inherit it.
os.environ["KUBECONFIG"] = "/nonexistent/colocation-webhook-tests/kubeconfig"

# The four Koordinator PriorityClasses as the recorded cluster has them, for tests' cluster-state folders.
KOORD_PRIORITY_CLASSES_YAML = "---\n".join(
    f"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: {value}\n"
    "preemptionPolicy: PreemptLowerPriority\n"
    for name, value in (("koord-prod", 9000), ("koord-mid", 7000), ("koord-batch", 5000), ("koord-free", 3000)))


def load_fixture(rel: str) -> Any:
    return json.loads((FIXTURES / rel).read_text())


@pytest.fixture()
def restore_logging() -> Iterator[None]:
    """The CLIs install a handler on the (captured) stderr; later tests must not log into a closed stream."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("certs")


@pytest.fixture()
def example_state() -> ClusterState:
    state = ClusterState(WEBHOOK_KINDS)
    FilesSource(example_folder(), state).load()
    return state


@pytest.fixture()
def server(example_state: ClusterState, cert_dir: Path) -> Iterator[Server]:
    with run_server(example_state, cert_dir) as srv:
        yield srv


_WHEEL_BUILD = pytest.StashKey[builds.WheelBuild]()
_WHEEL_USERS = {"project_wheel", "compiled_tree"}


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """A run with a test that needs the project's wheel starts building it now, in the background."""
    if any(_WHEEL_USERS & set(getattr(item, "fixturenames", ())) for item in items):
        config.stash[_WHEEL_BUILD] = builds.WheelBuild()


def pytest_sessionfinish(session: pytest.Session) -> None:
    build = session.config.stash.get(_WHEEL_BUILD, None)
    if build is not None:
        build.stop()


@pytest.fixture(scope="session")
def project_wheel(pytestconfig: pytest.Config) -> Path:
    """The project's wheel as the image builds it, once per run (tests/builds.py)."""
    return pytestconfig.stash[_WHEEL_BUILD].wheel()


@pytest.fixture(scope="session")
def compiled_tree(project_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A source tree compiled in place, made from that wheel; copy it before changing it."""
    return builds.source_tree(project_wheel, tmp_path_factory.mktemp("compiled-tree"))
