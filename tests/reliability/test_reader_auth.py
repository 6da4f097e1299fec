"""Range reads through every authentication method and TLS mode, with both readers.

The vectorised reader takes frames from nats-py's read loop after nats-py has connected,
authenticated and (for TLS) upgraded the socket: each method must read the same rows with it as
with nats-py's own reader, headers included.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from nats.js.api import StreamConfig

from airflow_provider_jetstream.core.connection.client import open_connection, release
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.read.range import read_range_with_config
from airflow_provider_jetstream.core.read.settings import READERS
from tests.support.waiting import scaled

COUNT = 400

#: Auth method -> (URL scheme, fields of the connection) from the session's auth servers.
METHODS: dict[str, Callable[[Any], tuple[str, dict[str, Any]]]] = {
    "password": lambda a: (f"127.0.0.1:{a.password.port}", {"login": "acc", "password": "acc"}),
    "token": lambda a: (f"127.0.0.1:{a.token.port}", {"extra": {"token": a.token_value}}),
    "nkey": lambda a: (f"127.0.0.1:{a.nkey.port}", {"extra": {"nkey_seed": a.nkey_seed}}),
    "creds": lambda a: (f"127.0.0.1:{a.creds.port}", {"extra": {"creds": a.operator.creds}}),
    "tls": lambda a: (
        f"tls://127.0.0.1:{a.tls.port}",
        {"login": "acc", "password": "acc", "extra": {"tls_ca_file": str(a.tls_files.ca)}},
    ),
    "mutual-tls": lambda a: (
        f"tls://127.0.0.1:{a.mtls.port}",
        {
            "extra": {
                "tls_ca_file": str(a.tls_files.ca),
                "tls_cert_file": str(a.tls_files.client_cert),
                "tls_key_file": str(a.tls_files.client_key),
            }
        },
    ),
    "tls-handshake-first": lambda a: (
        f"tls://127.0.0.1:{a.tls_first.port}",
        {
            "login": "acc",
            "password": "acc",
            "extra": {"tls_ca_file": str(a.tls_files.ca), "tls_handshake_first": True},
        },
    ),
}


def _config(auth_servers: Any, method: str) -> JetStreamConnectionConfig:
    host, fields = METHODS[method](auth_servers)
    return JetStreamConnectionConfig.from_fields(
        conn_id=f"read-{method}",
        host=host,
        port=None,
        login=fields.get("login"),
        password=fields.get("password"),
        extra=dict(fields.get("extra", {})),
    )


async def _make_stream(config: JetStreamConnectionConfig) -> str:
    name = f"auth_read_{uuid.uuid4().hex[:8]}"
    nc = await open_connection(config)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        acks = [
            await js.publish_async(f"{name}.x", b"m%d" % i, headers={"n": str(i)} if i % 7 == 0 else None)
            for i in range(1, COUNT + 1)
        ]
        await asyncio.gather(*acks)
    finally:
        await release(nc, drain=False)
    return name


async def _read(config: JetStreamConnectionConfig, stream: str, reader: str) -> list[tuple[int, bytes, Any]]:
    rows = []
    async for chunk in read_range_with_config(config, stream, 1, COUNT, reader=reader):
        headers = chunk.headers
        rows += list(zip(chunk.sequences, chunk.payloads, headers, strict=True))
    return rows


@pytest.mark.parametrize("method", list(METHODS))
def test_both_readers_read_the_same_rows_through_every_auth_method(auth_servers, method: str) -> None:
    config = _config(auth_servers, method)
    stream = asyncio.run(_make_stream(config))
    results = {reader: asyncio.run(_read(config, stream, reader)) for reader in READERS}
    expected = [(i, b"m%d" % i) for i in range(1, COUNT + 1)]
    for reader, rows in results.items():
        assert [(seq, data) for seq, data, _ in rows] == expected, reader
    vectorised_headers = [h for _, _, h in results["vectorised"]]
    nats_py_headers = [h for _, _, h in results["nats-py"]]
    assert vectorised_headers[6] == {"n": ["7"]}
    assert nats_py_headers == vectorised_headers


class _Rows:
    """A frame sink that keeps the rows it is handed."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, bytes, Any]] = []
        self.arrived = asyncio.Event()

    def on_data(self, bufs: list[bytes], records: Any) -> None:
        from airflow_provider_jetstream.core.read.vectorised.columns import headers_to_map, to_columns

        frames = to_columns(bufs, records)
        headers = headers_to_map(frames.headers).to_pylist()
        self.rows += list(zip(frames.sequences.tolist(), frames.payloads.to_pylist(), headers, strict=True))
        self.arrived.set()

    def on_other(self, *frame: bytes) -> None:
        self.arrived.set()


def test_the_vectorised_splitter_reads_a_cross_account_pull_through_an_imported_prefix(make_topology) -> None:
    """IMPORT_CLIENT pulls ACC's durable ``dur`` through ``JS.acc@hub.API`` (the only API it imports):
    the frames it gets (reply subjects of another account's consumer) split into the same columns."""
    import nats

    from airflow_provider_jetstream.core.read.vectorised.tap import install
    from airflow_provider_jetstream.testing.servers import USERS

    topology = make_topology()

    async def go() -> list[tuple[int, bytes, Any]]:
        user, password = USERS["ACC"]
        owner = await nats.connect(topology.hub.url, user=user, password=password)
        try:
            js = owner.jetstream()
            await js.add_stream(StreamConfig(name="aggregate-test-leaf", subjects=["xacct.>"]))
            for i in range(1, 31):
                await js.publish("xacct.x", b"m%d" % i, headers={"n": str(i)} if i == 5 else None)
            from nats.js.api import ConsumerConfig

            await js.add_consumer("aggregate-test-leaf", ConsumerConfig(durable_name="dur"))
        finally:
            await owner.close()
        user, password = USERS["IMPORT_CLIENT"]
        client = await nats.connect(topology.hub.url, user=user, password=password)
        try:
            sink = _Rows()
            tap = install(client)
            inbox = client.new_inbox()
            sub = await client.subscribe(inbox)
            tap.tap(sub._id, sink)
            request = b'{"batch": 30, "expires": 5000000000}'
            await client.publish("JS.acc@hub.API.CONSUMER.MSG.NEXT.aggregate-test-leaf.dur", request, reply=inbox)
            while len(sink.rows) < 30:
                sink.arrived.clear()
                await asyncio.wait_for(sink.arrived.wait(), scaled(10))
            return sink.rows
        finally:
            await client.close()

    rows = asyncio.run(go())
    assert [(seq, data) for seq, data, _ in rows] == [(i, b"m%d" % i) for i in range(1, 31)]
    assert rows[4][2] == [("n", ["5"])]
    assert all(h is None for i, (_, _, h) in enumerate(rows) if i != 4)
