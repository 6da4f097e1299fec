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

from airflow_provider_jetstream.core.connect import open_connection, release
from airflow_provider_jetstream.core.connection import JetStreamConnectionConfig
from airflow_provider_jetstream.core.pull import READERS, read_range_with_config

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
    assert vectorised_headers[6] == {"n": ["7"]} and nats_py_headers[6] == {"n": "7"}
    assert [h and {k: [v] for k, v in h.items()} for h in nats_py_headers] == vectorised_headers
