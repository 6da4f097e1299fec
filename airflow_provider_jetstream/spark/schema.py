"""The rows of the ``jetstream`` data source, and message chunks turned into Arrow record batches.

Airflow-free: executors import it.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from airflow_provider_jetstream.core.read.exact import MessageChunk
from airflow_provider_jetstream.core.read.vectorised.reader import ColumnChunk

#: The data source's schema, as Spark DDL.
SCHEMA_DDL = (
    "stream string, domain string, subject string, seq long, timestamp timestamp, data binary, "
    "headers map<string, array<string>>"
)

#: The data source's schema (built without a SparkSession: planner processes have none).
SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("domain", StringType()),
        StructField("subject", StringType()),
        StructField("seq", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("data", BinaryType()),
        StructField("headers", MapType(StringType(), ArrayType(StringType()))),
    ]
)

#: The same schema in Arrow, exactly as PySpark expects record batches for it (timestamps in
#: microseconds, UTC).
ARROW_SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string()),
        pa.field("domain", pa.string()),
        pa.field("subject", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("data", pa.binary()),
        pa.field("headers", pa.map_(pa.string(), pa.list_(pa.string()))),
    ]
)
_HEADERS_TYPE = ARROW_SCHEMA.field("headers").type


def to_record_batch(chunk: MessageChunk | ColumnChunk, stream: str, domain: str | None) -> pa.RecordBatch:
    """One Arrow record batch of the data source's schema from a chunk of messages.

    A :class:`ColumnChunk` (vectorised reader) is already columns; a :class:`MessageChunk` (the other reader)
    is made into them. Either way headers keep every value of a repeated name.
    """
    if isinstance(chunk, ColumnChunk):
        return _columns_to_record_batch(chunk, stream, domain)
    count = len(chunk)
    timestamps = pc.divide(pa.array(chunk.timestamps_ns, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    if chunk.headers is None:
        headers = pa.nulls(count, _HEADERS_TYPE)
    else:
        headers = pa.array(
            [None if h is None else list(h.items()) for h in chunk.headers],
            _HEADERS_TYPE,
        )
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream] * count, pa.string()),
            pa.nulls(count, pa.string()) if domain is None else pa.array([domain] * count, pa.string()),
            pa.array(chunk.subjects, pa.string()),
            pa.array(chunk.sequences, pa.int64()),
            timestamps,
            pa.array(chunk.payloads, pa.binary()),
            headers,
        ],
        schema=ARROW_SCHEMA,
    )


def _constant(value: str | None, count: int) -> pa.Array:
    return pa.nulls(count, pa.string()) if value is None else pa.repeat(pa.scalar(value, pa.string()), count)


def _columns_to_record_batch(chunk: ColumnChunk, stream: str, domain: str | None) -> pa.RecordBatch:
    count = len(chunk)
    timestamps = pa.array(chunk.timestamp_ns // 1000, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    headers = chunk.headers_map if chunk.headers_map is not None else pa.nulls(count, _HEADERS_TYPE)
    return pa.RecordBatch.from_arrays(
        [
            _constant(stream, count),
            _constant(domain, count),
            chunk.subject,
            pa.array(chunk.seq, pa.int64()),
            timestamps,
            chunk.data,
            headers,
        ],
        schema=ARROW_SCHEMA,
    )
