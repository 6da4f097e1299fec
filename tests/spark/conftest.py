"""Spark fixtures: one local SparkSession (local[2]) for the session, with the data source registered.

Streams are created with nats-py directly on the session's ``hub_leaf`` topology; every name is
prefixed ``spark_`` and unique per test, and hub and leaf streams never share subjects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from airflow_provider_jetstream.testing.servers import USERS, LocalTopology

T = TypeVar("T")

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here needs a local SparkSession (Java 17+): mark them ``spark``."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def spark(hub_leaf: LocalTopology) -> Iterator[Any]:
    """The session's SparkSession. Its JVM (and so every Python worker) is started with
    ``JETSTREAM_CONNECTION_SECRET`` naming the hub as user ``acc``, as the operator's spark-submit
    would be: the data source's planner processes read the JVM's environment, not this process's.
    """
    from pyspark.sql import SparkSession

    from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
    from airflow_provider_jetstream.spark import register
    from airflow_provider_jetstream.spark.options import connection_env

    user, password = USERS["ACC"]
    hub = JetStreamConnectionConfig.from_fields(
        conn_id="tests", host=f"127.0.0.1:{hub_leaf.hub.port}", login=user, password=password
    )
    os.environ.update(connection_env(hub))

    session = (
        SparkSession.builder.master("local[2]")
        .appName("jetstream-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines at exit hit closed capture streams
    register(session)
    yield session
    session.stop()


@dataclass
class SparkStream:
    """A stream made for one test: name, domain, subject prefix, and the hub connection options."""

    name: str
    domain: str
    prefix: str
    topology: LocalTopology

    @property
    def api_prefix(self) -> str:
        return f"$JS.{self.domain}.API"

    def options(self, **extra: str) -> dict[str, str]:
        """Data source options: connect to the hub, read this stream in its domain."""
        user, password = USERS["ACC"]
        return {
            "servers": f"nats://127.0.0.1:{self.topology.hub.port}",
            "user": user,
            "password": password,
            "stream": self.name,
            "domain": self.domain,
            **extra,
        }


async def hub_client(topology: LocalTopology) -> Any:
    import nats

    user, password = USERS["ACC"]
    return await nats.connect(f"nats://127.0.0.1:{topology.hub.port}", user=user, password=password)


@pytest.fixture
def make_stream(hub_leaf: LocalTopology) -> Iterator[Callable[..., SparkStream]]:
    """Create a stream (default in the leaf domain) with subjects ``<prefix>.>``; deleted after the test."""
    made: list[SparkStream] = []

    def make(domain: str = "leaf", **config: Any) -> SparkStream:
        from nats.js.api import StreamConfig

        uid = uuid.uuid4().hex[:8]
        stream = SparkStream(f"spark_{uid}", domain, f"spark_{uid}", hub_leaf)

        async def create() -> None:
            nc = await hub_client(hub_leaf)
            try:
                js = nc.jetstream(domain=domain)
                await js.add_stream(StreamConfig(name=stream.name, subjects=[f"{stream.prefix}.>"], **config))
            finally:
                await nc.close()

        run(create())
        made.append(stream)
        return stream

    yield make

    async def delete() -> None:
        nc = await hub_client(hub_leaf)
        try:
            for stream in made:
                with contextlib.suppress(Exception):
                    await nc.jetstream(domain=stream.domain).delete_stream(stream.name)
        finally:
            await nc.close()

    run(delete())


def publish(stream: SparkStream, messages: list[tuple[str, bytes] | tuple[str, bytes, dict[str, str]]]) -> list[int]:
    """Publish ``(subject suffix, data[, headers])`` to the stream; return the stored sequences."""

    async def go() -> list[int]:
        nc = await hub_client(stream.topology)
        try:
            js = nc.jetstream(domain=stream.domain)
            seqs = []
            for item in messages:
                suffix, data = item[0], item[1]
                headers = item[2] if len(item) > 2 else None  # type: ignore[misc]
                ack = await js.publish(f"{stream.prefix}.{suffix}", data, headers=headers)
                seqs.append(ack.seq)
            return seqs
        finally:
            await nc.close()

    return run(go())


def publish_many(stream: SparkStream, count: int, subjects: tuple[str, ...] = ("a", "b")) -> None:
    """Publish ``count`` messages ``i`` (payload ``b"m<i>"``) on subjects cycling through ``subjects``."""

    async def go() -> None:
        nc = await hub_client(stream.topology)
        try:
            js = nc.jetstream(domain=stream.domain)
            futures = []
            for i in range(1, count + 1):
                futures.append(await js.publish_async(f"{stream.prefix}.{subjects[i % len(subjects)]}", b"m%d" % i))
                if len(futures) >= 500:
                    await asyncio.gather(*futures)
                    futures = []
            await asyncio.gather(*futures)
        finally:
            await nc.close()

    run(go())


def delete_messages(stream: SparkStream, seqs: list[int]) -> None:
    async def go() -> None:
        nc = await hub_client(stream.topology)
        try:
            jsm = nc.jsm(prefix=stream.api_prefix)
            for seq in seqs:
                await jsm.delete_msg(stream.name, seq)
        finally:
            await nc.close()

    run(go())
