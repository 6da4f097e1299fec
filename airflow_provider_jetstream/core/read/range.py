"""Read exactly a range of stream sequences ``[start, end]``, with the intake that suits the install.

:func:`read_range` is the entry point (the Spark source's tasks, DAGs, benchmarks): one
:class:`~airflow_provider_jetstream.core.read.exact.RangePull` reads the range (its exact-range rules
over the pull engine are in :mod:`airflow_provider_jetstream.core.read.exact`), taking the server's
frames one at a time, or through the vectorised intake
(:mod:`airflow_provider_jetstream.core.read.vectorised`: frames parsed in bulk into Arrow columns), the
default wherever numpy and pyarrow are installed (always with the ``spark`` extra).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from nats.aio.client import Client

from airflow_provider_jetstream.core.arguments.values import integer
from airflow_provider_jetstream.core.connection.client import open_connection, release
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.read.exact import MissingRange, RangePull
from airflow_provider_jetstream.core.read.settings import READER, PullSettings, default_reader

_START = integer(1, hint=" (a stream sequence)")


def _range_pull_class(reader: str | None) -> type[RangePull]:
    if (READER.value(reader, "reader") or default_reader()) == "nats-py":
        return RangePull
    try:
        from airflow_provider_jetstream.core.read.vectorised.reader import VectorisedRangePull
    except ImportError as err:  # the package's message says what to install
        raise JetStreamConfigError(f"reader='vectorised' is not available: {err}") from None
    return VectorisedRangePull


async def read_range(
    nc: Client,
    stream: str,
    start: int,
    end: int,
    *,
    api_prefix: str = "$JS.API",
    filter_subjects: Sequence[str] = (),
    include_headers: bool = True,
    fail_on_data_loss: bool = True,
    settings: PullSettings | None = None,
    missing: list[MissingRange] | None = None,
    reader: str | None = None,
) -> AsyncIterator[Any]:
    """Yield the messages of ``stream`` with sequences in ``[start, end]``, in order, in chunks.

    :param nc: a connected nats-py client.
    :param stream: the stream's name.
    :param start: first sequence to read (inclusive).
    :param end: last sequence to read (inclusive); nothing after it is returned.
    :param api_prefix: JetStream API prefix of the stream's domain, e.g. ``$JS.leaf.API``.
        Default ``$JS.API`` (the domain of the server ``nc`` is connected to).
    :param filter_subjects: only messages on these subjects (wildcards allowed). Default: all.
    :param include_headers: fill the chunks' headers. Default True.
    :param fail_on_data_loss: raise :class:`JetStreamDataLossError` when sequences inside the range
        are gone; otherwise skip them with a warning (and record them in ``missing``). Default True.
        Without filter every sequence is checked; with a filter only the range's front is (the
        server does not say which subject a removed message had).
    :param settings: pull tuning, see :class:`PullSettings`.
    :param missing: a list that receives the
        :class:`~airflow_provider_jetstream.core.read.exact.MissingRange` of every gap seen.
    :param reader: ``"vectorised"``: frames parsed in bulk straight into Arrow columns (needs numpy
        and pyarrow), chunks are
        :class:`~airflow_provider_jetstream.core.read.vectorised.reader.ColumnChunk` and headers keep
        every value of a repeated name; ``"nats-py"``: the frames parsed one at a time in Python, chunks are
        :class:`~airflow_provider_jetstream.core.read.exact.MessageChunk` (every header value too).
        Default None: the vectorised reader where numpy and pyarrow are installed, else the other
        (:func:`~airflow_provider_jetstream.core.read.settings.default_reader`).
    """
    pull_class = _range_pull_class(reader)
    start = _START(start, "start")
    if start > end:
        return
    pull = pull_class(
        nc,
        api_prefix,
        stream,
        start,
        end,
        filter_subjects,
        include_headers,
        fail_on_data_loss,
        settings or PullSettings(),
    )
    chunks = pull.chunks()
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        await chunks.aclose()  # at once, also when the caller stops early: the consumer is deleted now
        if missing is not None:
            missing.extend(pull.missing)


async def read_range_with_config(
    config: JetStreamConnectionConfig,
    stream: str,
    start: int,
    end: int,
    **kwargs: Any,
) -> AsyncIterator[Any]:
    """:func:`read_range` on a connection of its own, opened from ``config`` and closed at the end."""
    nc = await open_connection(config)
    try:
        async for chunk in read_range(nc, stream, start, end, **kwargs):
            yield chunk
    finally:
        await asyncio.shield(release(nc, drain=False))
