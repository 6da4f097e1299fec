"""The vectorised reader against the per-frame one on the same real streams: identical Arrow tables, and
every value of a repeated header in both."""

from __future__ import annotations

import asyncio
import json

import pyarrow as pa
import pytest

from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.read.range import read_range
from airflow_provider_jetstream.core.read.settings import PullSettings
from airflow_provider_jetstream.spark.options import ReadOptions
from airflow_provider_jetstream.spark.schema import ARROW_SCHEMA, to_record_batch
from airflow_provider_jetstream.testing.servers import USERS
from tests.support.spark import hub_client, publish, publish_many, run


async def _table(stream, reader: str, start: int = 1, end: int = 10**9, **kwargs) -> pa.Table:
    nc = await hub_client(stream.topology)
    try:
        batches = [
            to_record_batch(chunk, stream.name, stream.domain)
            async for chunk in read_range(
                nc,
                stream.name,
                start,
                end,
                api_prefix=stream.api_prefix,
                reader=reader,
                fail_on_data_loss=False,
                **kwargs,
            )
        ]
        return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
    finally:
        await nc.close()


async def _publish_raw(stream, port: int, items: list[tuple[str, bytes, bytes]]) -> None:
    """Publish with raw header blocks (nats-py's publish cannot repeat a header name)."""
    user, password = USERS["ACC"]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await reader.readline()  # INFO
    connect = {"user": user, "pass": password, "headers": True, "verbose": False, "pedantic": False}
    out = [b"CONNECT " + json.dumps(connect).encode() + b"\r\n"]
    for subject, header, data in items:
        out.append(
            b"HPUB %s %d %d\r\n%s%s\r\n" % (subject.encode(), len(header), len(header) + len(data), header, data)
        )
    out.append(b"PING\r\n")
    writer.write(b"".join(out))
    await writer.drain()
    line = await reader.readline()
    assert line == b"PONG\r\n", line
    writer.close()


def test_both_readers_give_identical_arrow_tables(make_stream) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 3000, subjects=("a", "bb", "a.very.long.subject.name"))
    publish(
        stream,
        [
            ("h", b"with headers", {"k": "v", "Nats-Msg-Id": "id-1"}),
            ("h", b""),
            ("h", b"x" * 5000, {"only": "one"}),
            ("h", b"with\r\nCRLF\r\nMSG inside 1 2\r\n"),
        ],
    )
    settings = PullSettings(max_buffered_messages=500, chunk_messages=200)
    for kwargs in ({}, {"include_headers": False}, {"filter_subjects": [f"{stream.prefix}.a", f"{stream.prefix}.h"]}):
        vectorised = run(_table(stream, "vectorised", settings=settings, **kwargs))
        nats_py = run(_table(stream, "nats-py", settings=settings, **kwargs))
        assert vectorised.num_rows == nats_py.num_rows > 1000
        assert vectorised.equals(nats_py), kwargs
    # A range in the middle, too.
    assert run(_table(stream, "vectorised", 777, 2222)).equals(run(_table(stream, "nats-py", 777, 2222)))


def test_repeated_headers_keep_every_value_in_either_reader(make_stream, spark) -> None:
    stream = make_stream("leaf")
    leaf_port = stream.topology.leaves["leaf"].port
    header = b"NATS/1.0\r\nk: 1\r\nNats-Msg-Id: m-1\r\nk: 2\r\nk: 3\r\n\r\n"
    run(_publish_raw(stream, leaf_port, [(f"{stream.prefix}.x", header, b"one"), (f"{stream.prefix}.x", b"", b"")]))
    vectorised = run(_table(stream, "vectorised"))
    assert vectorised.column("headers").to_pylist()[0] == [("k", ["1", "2", "3"]), ("Nats-Msg-Id", ["m-1"])]
    nats_py = run(_table(stream, "nats-py"))
    assert nats_py.column("headers").to_pylist()[0] == [("k", ["1", "2", "3"]), ("Nats-Msg-Id", ["m-1"])]
    frame = spark.read.format("jetstream").options(**stream.options(reader="vectorised")).load()
    rows = frame.orderBy("seq").collect()
    assert rows[0].headers == {"k": ["1", "2", "3"], "Nats-Msg-Id": ["m-1"]}
    assert rows[0].data == bytearray(b"one")


@pytest.mark.parametrize("reader", ["vectorised", "nats-py"])
def test_spark_reads_the_same_rows_with_either_reader(make_stream, spark, reader) -> None:
    stream = make_stream("leaf")
    publish_many(stream, 2500)
    frame = spark.read.format("jetstream").options(**stream.options(reader=reader, minPartitions="3")).load()
    assert frame.count() == 2500
    seqs = [row.seq for row in frame.select("seq").orderBy("seq").collect()]
    assert seqs == list(range(1, 2501))


def test_the_reader_option_is_checked_on_the_driver() -> None:
    base = {"servers": "nats://127.0.0.1:4222", "stream": "S"}
    assert ReadOptions.parse(base).reader == "vectorised"
    assert ReadOptions.parse({**base, "reader": "NATS-PY"}).reader == "nats-py"
    with pytest.raises(JetStreamConfigError, match="reader='fast' is not allowed: use vectorised or nats-py"):
        ReadOptions.parse({**base, "reader": "fast"})
