"""The message layer of :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`: fetching batches of a
durable pull consumer (or of an ephemeral read) and consuming them one batch at a time, each message with its
settle actions.

Built on :mod:`airflow_provider_jetstream.core.consume.fetch` (one pull request per batch on the one pull
engine); the messages are :class:`~airflow_provider_jetstream.core.consume.deliveries.Delivery` objects.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Iterator
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.consume.deliveries import Delivery, Send, send_settle
from airflow_provider_jetstream.core.consume.fetch import ReadingConsumer, fetch_batch, reading_consumer
from airflow_provider_jetstream.core.signatures.consume import CONSUME, FETCH
from airflow_provider_jetstream.core.signatures.shared import REQUEST
from airflow_provider_jetstream.core.sync import iterate_held
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook, blocking, checked


class JetStreamMessagesHook(JetStreamBaseHook):
    """Fetch and consume messages (see :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`)."""

    def settle_sender(self) -> Send:
        """How this hook's messages send their verdicts, each confirmed by the consumer (:func:`send_settle`):
        on the shared connection of the running event loop (opened for the one message when none is open:
        settle many inside ``aconnect()``, ``connected()`` or a blocking ``consume``)."""

        async def send(reply: str, body: bytes) -> None:
            async with self.aapi() as api:
                await send_settle(api, reply, body)

        return send

    @contextlib.asynccontextmanager
    async def _open_reading(
        self,
        stream: str,
        consumer: str | None,
        filter_subject: str | None,
        start_seq: int | None,
        start_time: str | dt.datetime | None,
        where: tuple[str | None, str | None, float | None],
    ) -> AsyncIterator[tuple[JetStreamApi, ReadingConsumer]]:
        """The API of ``where`` (domain, API prefix, timeout) and the consumer a read pulls there (the declared
        durable one, checked, or an ephemeral one deleted on exit): what fetching and the consume operator use."""
        domain, api_prefix, timeout = where
        async with contextlib.AsyncExitStack() as stack:
            api = await stack.enter_async_context(self.aapi(domain, api_prefix, request_timeout=timeout))
            reading = await stack.enter_async_context(
                reading_consumer(
                    api, stream, consumer, filter_subject=filter_subject, start_seq=start_seq, start_time=start_time
                )
            )
            yield api, reading

    async def _fetch_batch(
        self,
        api: JetStreamApi,
        stream: str,
        reading: ReadingConsumer,
        batch: int,
        max_wait: float,
        all_header_values: bool,
        no_wait: bool = False,
    ) -> list[Delivery]:
        """One batch of ``reading``, its messages settled through this hook (:meth:`settle_sender`)."""
        return await fetch_batch(
            api,
            stream,
            reading,
            batch=batch,
            max_wait=max_wait,
            send=self.settle_sender(),
            all_header_values=all_header_values,
            no_wait=no_wait,
        )

    @checked(FETCH + REQUEST)
    async def afetch(
        self,
        stream: str,
        consumer: str | None = None,
        *,
        batch: int,
        max_wait: float = 5.0,
        filter_subject: str | None = None,
        start_seq: int | None = None,
        start_time: str | dt.datetime | None = None,
        all_header_values: bool = True,
        no_wait: bool = False,
        domain: str | None = None,
        api_prefix: str | None = None,
        request_timeout: float | None = None,
    ) -> list[Delivery]:
        """Up to ``batch`` messages of ``stream``, waiting up to ``max_wait`` seconds (default 5) for the batch
        to fill: one pull request, in any domain or API prefix. With ``no_wait`` (default False) it returns at
        once with the messages there are now, none when there are none (nats.go's ``FetchNoWait``).

        Each message is a :class:`Delivery`: ``subject``, ``sequence``, ``time`` (a UTC datetime),
        ``timestamp_ns``, ``headers`` (each name to every value, in order), ``payload`` (bytes), ``delivered``
        (1 the first time) and, from a durable consumer, ``ack()``, ``nak(delay)``, ``term()``,
        ``in_progress()`` (``aack()``... from async code; each message is settled at most once). What is not
        acked within the consumer's ``ack_wait`` is delivered again.

        :param consumer: a durable pull consumer the DAG declared (``ensure_consumer``); it is never created
            here: :class:`JetStreamNotFoundError` when it does not exist. Default None: an ephemeral read
            from ``start_seq`` (default 1) or ``start_time``, whose consumer is deleted before this returns
            (its messages have nothing to settle).
        :param filter_subject: only this subject (an ephemeral read); with a durable consumer it must be
            the consumer's own filter.
        :param all_header_values: read every value of repeated headers (one lookup per message with
            headers). Default True.
        """
        where = (domain, api_prefix, request_timeout)
        async with self._open_reading(stream, consumer, filter_subject, start_seq, start_time, where) as (api, reading):
            return await self._fetch_batch(api, stream, reading, batch, max_wait, all_header_values, no_wait)

    fetch = blocking(afetch)

    @checked(CONSUME + REQUEST)
    async def aconsume(
        self,
        stream: str,
        consumer: str | None = None,
        *,
        batch: int = 100,
        max_wait: float = 5.0,
        filter_subject: str | None = None,
        start_seq: int | None = None,
        start_time: str | dt.datetime | None = None,
        all_header_values: bool = True,
        stop_when_empty: bool = False,
        domain: str | None = None,
        api_prefix: str | None = None,
        request_timeout: float | None = None,
    ) -> AsyncIterator[Delivery]:
        """The messages of ``stream`` one by one, fetched ``batch`` at a time (one batch held in memory), for
        as long as the caller iterates (with ``stop_when_empty``: until a pull brings nothing within
        ``max_wait``). Arguments and messages as :meth:`afetch`; an ephemeral read keeps one consumer for
        the whole iteration and deletes it when the iteration ends. Settle the messages while iterating:
        the connection is open until then."""
        where = (domain, api_prefix, request_timeout)
        async with self._open_reading(stream, consumer, filter_subject, start_seq, start_time, where) as (api, reading):
            while True:
                deliveries = await self._fetch_batch(api, stream, reading, batch, max_wait, all_header_values)
                for delivery in deliveries:
                    yield delivery
                if not deliveries and stop_when_empty:
                    return

    def consume(self, stream: str, consumer: str | None = None, **kwargs: Any) -> Iterator[Delivery]:
        """Blocking form of :meth:`aconsume`, on an event loop of its own thread (the connection answers the
        server while the caller works on a message); ``ack()`` and friends of its messages, and this thread's
        other blocking hook calls until the iteration ends, share its connection. Leave the loop (or close
        the iterator) to end it."""
        return iterate_held(self.aconnect(), self.aconsume(stream, consumer, **kwargs))
