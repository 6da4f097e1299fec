"""``df.write.format("jetstream")``: publish rows to JetStream, acknowledged, with bounded async publish.

Each row becomes one message: subject (option ``subject`` or a column), payload (``data``,
binary or string), headers (a ``map<string, string>`` or ``map<string, array<string>>`` column)
and, with ``msgIdColumn``, the ``Nats-Msg-Id`` header, so that the stream drops a message it
already stored within its duplicate window: a retried task or a re-run job stores nothing twice.

The shared publish engine (:mod:`airflow_provider_jetstream.core.publish.engine`, the publish operator's
too) sends them: a task keeps at most ``maxInFlight`` publishes unacknowledged; a subject in a
reserved space (``$JS.``, ``$KV.``, ``$O.``, ``$SYS.``, ``_INBOX.``, the account's API prefixes) is
refused before it is sent; after the last ack, a task fails if any row was refused or stored by
another stream than ``stream`` or in another domain than ``domain`` / ``apiPrefix`` (default: the
connection's). With one ``subject`` for every row whose stream has ``allow_batched`` (nats-server
2.14+), the rows go in fast-ingest batches (one ack per flow window, the same guarantees; option
``fastIngest=false``: an ack per row).

With ``atomic=true`` each task's rows go as **one atomic batch** (the engine's atomic mode,
:mod:`~airflow_provider_jetstream.core.publish.atomic`): stored all together or not at all. The stream
(option ``expectedStream``, else the one storing ``subject``) must have ``allow_atomic`` on nats-server 2.12+:
otherwise the write is refused on the driver before any task runs (and each task checks again before it
sends). A task with more rows than one batch takes (1000, the server's limit) is refused before it sends
anything: its rows are never split into batches that could land apart. A task retried after a crash
stores nothing twice: a batch left uncommitted stored nothing, and with ``msgIdColumn`` the rows a
committed batch stored are counted as duplicates, the others sent again as one batch.
Airflow-free: executors import it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import nats.errors
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from airflow_provider_jetstream.core.api import JetStreamApi, describe_prefix
from airflow_provider_jetstream.core.arguments.names import domain_of
from airflow_provider_jetstream.core.arguments.values import MESSAGE_ID_ALLOWED
from airflow_provider_jetstream.core.connection.client import open_connection, release
from airflow_provider_jetstream.core.errors import JetStreamError, SpecError
from airflow_provider_jetstream.core.protocol import EXPECTED_STREAM_HEADER, MSG_ID_HEADER
from airflow_provider_jetstream.core.publish.atomic import MAX_BATCH, AtomicBatches, AtomicTarget, atomic_target
from airflow_provider_jetstream.core.publish.blocks import Block, Item
from airflow_provider_jetstream.core.publish.engine import PublishMode, publish_messages
from airflow_provider_jetstream.core.publish.fast_ingest import batch_target
from airflow_provider_jetstream.core.publish.summary import Outgoing, ack_problems
from airflow_provider_jetstream.core.sync import iterate_blocking, run_sync
from airflow_provider_jetstream.spark.options import WriteOptions

log = logging.getLogger(__name__)

ACK_TIMEOUT = 30.0


@dataclass
class PublishedCount(WriterCommitMessage):
    """What one task published: messages stored, and messages the stream dropped as duplicates."""

    stored: int
    duplicates: int


def _headers(value: Any) -> dict[str, str]:
    """A row's headers (Arrow map as list of pairs, or dict) as nats-py wants them: one value each."""
    if value is None:
        return {}
    pairs = value.items() if isinstance(value, dict) else value
    headers = {}
    for name, item in pairs:
        if isinstance(item, list):
            if len(item) > 1:
                raise JetStreamError(
                    f"header {name!r} has {len(item)} values: nats-py publishes one value per header name"
                )
            item = item[0] if item else ""
        if item is not None:
            headers[str(name)] = str(item)
    return headers


def _payloads(column: pa.Array | pa.ChunkedArray) -> list[bytes]:
    """A ``data`` column as each row's payload: binary as is, strings as UTF-8, null as empty."""
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = column.cast(pa.large_binary())
        kind = column.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        if column.null_count:
            column = pc.fill_null(column, pa.scalar(b"", kind))
        return column.to_pylist()
    return [b"" if p is None else p.encode() if isinstance(p, str) else bytes(p) for p in column.to_pylist()]


def _msg_ids(column: pa.Array | pa.ChunkedArray, opts: WriteOptions) -> list[str]:
    """A ``msgIdColumn`` as each row's ``Nats-Msg-Id`` (text); a row whose id is null, empty, blank or holds a line
    break is refused before the batch is sent (:func:`~airflow_provider_jetstream.core.arguments.values.message_id`:
    an empty id would turn deduplication off)."""
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        column = pc.cast(column, pa.string())
    valid = pc.fill_null(pc.match_substring_regex(column, r"^[^\r\n]*\S[^\r\n]*$"), False)
    if not pc.all(valid).as_py():
        row = pc.index(valid, False).as_py()
        value = column[row].as_py()
        raise SpecError(
            "msgIdColumn",
            value,
            MESSAGE_ID_ALLOWED,
            message=f"jetstream write: row {row} of a batch has {opts.msg_id_column}={value!r} (msgIdColumn), which "
            f"is not allowed: {MESSAGE_ID_ALLOWED}; nothing of this batch was sent",
        )
    return column.to_pylist()


def _items(batches: Iterator[pa.RecordBatch], opts: WriteOptions) -> Iterator[Item]:
    """What each record batch publishes: with one ``subject``, a :class:`Block` of its rows (framed in bulk by
    fast ingest); with a subject column, the ``(subject, payload, headers)`` of each row."""
    expected = {EXPECTED_STREAM_HEADER: opts.expected_stream} if opts.expected_stream else {}
    for batch in batches:
        count = batch.num_rows
        if not count:
            continue
        payloads = _payloads(batch.column(opts.data_column))
        msg_ids = _msg_ids(batch.column(opts.msg_id_column), opts) if opts.msg_id_column else None
        if opts.headers_column or opts.subject_column:
            rows = _rows(batch, opts, payloads, msg_ids, expected)
            if opts.subject_column:
                yield from rows
            else:
                yield Block(opts.subject, payloads, each=[headers for _, _, headers in rows])  # type: ignore[arg-type]
        elif msg_ids is not None:
            yield Block(opts.subject, payloads, {MSG_ID_HEADER: "", **expected}, msg_ids)  # type: ignore[arg-type]
        else:
            yield Block(opts.subject, payloads, expected or None)  # type: ignore[arg-type]


def _rows(
    batch: pa.RecordBatch,
    opts: WriteOptions,
    payloads: list[bytes],
    msg_ids: list[str] | None,
    expected: dict[str, str],
) -> Iterator[Outgoing]:
    """The ``(subject, payload, headers)`` of each row: headers from the headers column, then the row's
    ``Nats-Msg-Id``, then ``Nats-Expected-Stream``."""
    count = batch.num_rows
    subjects = batch.column(opts.subject_column).to_pylist() if opts.subject_column else [opts.subject] * count
    headers = batch.column(opts.headers_column).to_pylist() if opts.headers_column else None
    for row in range(count):
        subject = subjects[row]
        if not subject:
            raise JetStreamError(f"jetstream write: a row has no subject (column {opts.subject_column!r})")
        hdrs = _headers(headers[row]) if headers is not None else {}
        if msg_ids is not None:
            hdrs[MSG_ID_HEADER] = msg_ids[row]
        if expected:
            hdrs.update(expected)
        yield subject, payloads[row], hdrs or None


def _api(nc: Any, opts: WriteOptions) -> JetStreamApi:
    """The JetStream API the write aims at."""
    return JetStreamApi(nc, opts.api_prefix, timeout=opts.connection.connect_timeout)


async def _atomic_target(api: JetStreamApi, opts: WriteOptions) -> AtomicTarget:
    """The stream taking the write's atomic batches; refused (naming the option) when there is none."""
    return await atomic_target(
        api, stream=opts.expected_stream, subject=opts.subject, what="jetstream option atomic='true'"
    )


def check_atomic(opts: WriteOptions) -> str:
    """On the driver, before any task runs: the name of the stream that takes the write's atomic batches.

    :raises JetStreamConfigError: the stream lacks ``allow_atomic``, does not exist, or its server is older
        than 2.12 (the error names the option ``atomic``, its value and what is allowed).
    """

    async def check() -> str:
        nc = await open_connection(opts.connection)
        try:
            return (await _atomic_target(_api(nc, opts), opts)).stream
        finally:
            await release(nc, drain=False)

    return run_sync(check())


class JetStreamWriter(DataSourceArrowWriter):
    """Publishes the rows of each task through the shared publish engine; the driver logs the totals.

    Every row's subject is checked (no reserved subject spaces, no wildcards) before it is sent,
    and every ack: a row stored by another stream than ``stream``, or in another domain than the
    ``domain`` / ``apiPrefix`` (else the connection's) one, fails the task.
    """

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedCount:
        results = list(iterate_blocking(self._publish(iterator)))
        return results[-1] if results else PublishedCount(0, 0)

    async def _publish(self, batches: Iterator[pa.RecordBatch]) -> AsyncIterator[PublishedCount]:
        opts = self.options
        nc = await open_connection(opts.connection)
        try:
            subject_field = (
                f"jetstream write: column {opts.subject_column!r}"
                if opts.subject_column
                else "jetstream option subject"
            )
            api_prefixes = [opts.api_prefix, opts.connection.api_prefix]
            api = _api(nc, opts)
            mode: PublishMode
            if opts.atomic:
                # The task's rows in one atomic batch: all stored or none.
                what = "jetstream write (atomic='true': a task's rows in one atomic batch)"
                mode = AtomicBatches(
                    await _atomic_target(api, opts),
                    whole=True,
                    too_many_hint=(
                        f"; repartition so that no task writes more than {MAX_BATCH} rows "
                        "(df.repartition(n) with n above rows / 1000), or write with atomic='false'"
                    ),
                )
            else:
                # One subject for every row: fast-ingest batches when its stream allows them.
                what = "jetstream write"
                one_subject = opts.subject and not opts.subject_column
                mode = await batch_target(api, opts.subject) if opts.fast_ingest and one_subject else None
            summary = await publish_messages(
                nc,
                _items(batches, opts),
                max_in_flight=opts.max_in_flight,
                ack_timeout=ACK_TIMEOUT,
                api_prefixes=api_prefixes,
                what=what,
                subject_field=subject_field,
                mode=mode,
            )
        except nats.errors.Error as err:
            raise JetStreamError(f"jetstream write: {type(err).__name__}: {err}") from None
        finally:
            await release(nc, drain=False)
        problems = ack_problems(summary, target_domain=domain_of(opts.api_prefix), expected_stream=opts.expected_stream)
        if problems:
            raise JetStreamError(
                f"jetstream write to {describe_prefix(opts.api_prefix)}: "
                + "; ".join(problems)
                + ". Messages already acknowledged stay in their streams."
            )
        yield PublishedCount(summary.stored, summary.duplicates)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        counts = [m for m in messages if isinstance(m, PublishedCount)]
        log.info(
            "jetstream write: %d messages stored, %d dropped as duplicates",
            sum(c.stored for c in counts),
            sum(c.duplicates for c in counts),
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("jetstream write aborted: messages already acknowledged stay in the stream")
