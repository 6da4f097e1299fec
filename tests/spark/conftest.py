"""Spark tests: every test here is marked ``spark``; Spark's Python workers run this interpreter.

The SparkSession (``spark``) and the per-test streams (``make_stream``) are fixtures of ``tests/conftest.py``
(the reliability tests use them too); streams are created with nats-py directly on the session's
``hub_leaf`` topology; every name is prefixed ``spark_`` and unique per test, and hub and leaf streams
never share subjects. ``spark_connect_server`` (session) is a Spark Connect server process, ``connect_spark`` a
session of one test on it.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_jetstream.testing.servers import NatsServer
from tests.support.spark_connect import SparkConnectServer, mark_spark_connect_mode

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here needs a local SparkSession (Java 17+): mark them ``spark``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkConnectServer]:
    """One Spark Connect server process per test worker (it starts in ~10 s on a quiet machine), without the
    tests' NATS connection in its environment."""
    server = SparkConnectServer(tmp_path_factory.mktemp("spark_connect")).start()
    yield server
    server.stop()


@pytest.fixture
def connect_spark(spark_connect_server: SparkConnectServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Spark Connect session of this test on the worker's server, the data source registered there."""
    from pyspark.sql import SparkSession

    from airflow_provider_jetstream.spark import register

    mark_spark_connect_mode(monkeypatch)
    session = SparkSession.builder.remote(spark_connect_server.url).create()
    register(session)
    yield session
    session.stop()


@pytest.fixture
def secret_server(tmp_path):
    """A JetStream server whose password is unique to this test, so that any leak is found."""
    password = f"pw-{uuid.uuid4().hex}"
    body = (
        f"jetstream {{ store_dir: {json.dumps(str(tmp_path / 'store'))} }}\n"
        f"authorization {{ user: spark, password: {json.dumps(password)} }}\n"
    )
    server = NatsServer(name="spark-secret", workdir=tmp_path, body=body).start()
    yield server, password
    server.stop()
