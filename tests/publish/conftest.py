"""The publish tests' servers: one JetStream server of ``NATS_SERVER_BIN`` (default: this environment's) per module."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from airflow_provider_jetstream.testing.servers import USERS, NatsServer
from tests.support.natsutil import server_version

USER, PASSWORD = USERS["ACC"]


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One JetStream server for this module, user ``acc``."""
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-")
    workdir = tmp_path_factory.mktemp(name)
    node = NatsServer(
        name=name,
        workdir=workdir,
        body=f"jetstream {{ store_dir: {json.dumps(str(workdir / 'store'))} }}\n"
        f"authorization {{ user: {USER}, password: {PASSWORD} }}\n",
    )
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def version(server: NatsServer) -> tuple[int, ...]:
    """The server's version as numbers, e.g. ``(2, 15, 1)``."""
    return server_version(server)
