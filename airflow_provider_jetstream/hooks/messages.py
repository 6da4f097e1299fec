"""The messages role of :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`: fetching batches of a
durable pull consumer (or of an ephemeral read) and consuming them batch after batch, each message with its settles.

Built on :mod:`airflow_provider_jetstream.core.consume.fetch` (one pull subscription per reading on the consumer
engine); the messages are :class:`~airflow_provider_jetstream.core.read.delivery.Delivery` objects, every header
value read from the delivered message itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from airflow_provider_jetstream.core.consume.fetch import Reading
from airflow_provider_jetstream.core.read.delivery import Delivery
from airflow_provider_jetstream.core.signatures.consume import CONSUME, FETCH
from airflow_provider_jetstream.core.signatures.shared import REQUEST
from airflow_provider_jetstream.core.sync import iterate_held
from airflow_provider_jetstream.hooks.base import JetStreamBaseHook
from airflow_provider_jetstream.hooks.methods import Request, blocking, checked, passing_arguments_to

if TYPE_CHECKING:
    from typing_extensions import Unpack


class JetStreamMessagesHook(JetStreamBaseHook):
    """Fetch and consume messages (see :class:`~airflow_provider_jetstream.hooks.jetstream.JetStreamHook`).

    Each message is a :class:`~airflow_provider_jetstream.core.read.delivery.Delivery`: ``subject``, ``seq``,
    ``time`` (a UTC datetime), ``timestamp_ns``, ``headers`` (each name to every value, in order), ``data``
    (bytes), ``delivered`` (1 the first time) and, from a durable consumer, ``ack()``, ``nak(delay)``,
    ``term()``, ``in_progress()`` (``aack()``... from async code). Each verdict is sent at once and confirmed
    by the consumer in bulk: before the reading's next batch, when a ``consume`` iteration or a
    ``connected()`` block ends; a verdict not confirmed raises
    :class:`~airflow_provider_jetstream.core.errors.JetStreamAckError` there. What is not acked within the
    consumer's ``ack_wait`` is delivered again.
    """

    @contextlib.asynccontextmanager
    async def _reading(
        self,
        stream: str,
        consumer: str | None,
        filter_subjects: list[str] | None,
        start_seq: int | None,
        start_time: str | dt.datetime | None,
        request: Request,
    ) -> AsyncIterator[Reading]:
        """The open :class:`Reading` of ``stream`` in the target of ``request``; its settles confirmed and an
        ephemeral consumer deleted when the block ends."""
        async with self.aapi(**request) as api:
            reading = Reading(
                api, stream, consumer, filter_subjects=filter_subjects or (), start_seq=start_seq,
                start_time=start_time, reopen=self.aconnect,
            )  # fmt: skip
            await reading.open()
            try:
                yield reading
            finally:
                await reading.close()

    @checked(FETCH + REQUEST)
    async def afetch(
        self,
        stream: str,
        consumer: str | None = None,
        *,
        batch_size: int,
        max_wait: float = 5.0,
        filter_subjects: list[str] | None = None,
        start_seq: int | None = None,
        start_time: str | dt.datetime | None = None,
        no_wait: bool = False,
        **request: Unpack[Request],
    ) -> list[Delivery]:
        """Up to ``batch_size`` messages of ``stream``, waiting up to ``max_wait`` seconds (default 5) for the batch
        to fill: one pull request, in any domain or API prefix. With ``no_wait`` (default False) it returns at
        once with the messages there are now, none when there are none (nats.go's ``FetchNoWait``).

        :param consumer: a durable pull consumer the DAG declared (``ensure_consumer``); it is never created
            here: :class:`JetStreamNotFoundError` when it does not exist. Default None: an ephemeral read
            from ``start_seq`` (default 1) or ``start_time``, whose consumer is deleted before this returns
            (its messages have nothing to settle).
        :param filter_subjects: only these subjects (an ephemeral read); with a durable consumer they must be
            the consumer's own filter.
        """
        async with self._reading(stream, consumer, filter_subjects, start_seq, start_time, request) as reading:
            return await reading.batch(batch_size, max_wait, no_wait=no_wait)

    fetch = blocking(afetch)

    @checked(CONSUME + REQUEST)
    async def _batches(
        self,
        stream: str,
        consumer: str | None = None,
        *,
        batch_size: int = 100,
        max_wait: float = 5.0,
        filter_subjects: list[str] | None = None,
        start_seq: int | None = None,
        start_time: str | dt.datetime | None = None,
        stop_when_empty: bool = False,
        **request: Unpack[Request],
    ) -> AsyncIterator[list[Delivery]]:
        """The batches of one consume (the arguments of :meth:`aconsume` and :meth:`consume`)."""
        async with self._reading(stream, consumer, filter_subjects, start_seq, start_time, request) as reading:
            while True:
                deliveries = await reading.batch(batch_size, max_wait)
                if deliveries:
                    yield deliveries
                elif stop_when_empty:
                    return

    @passing_arguments_to(_batches)
    async def aconsume(self, *args: Any, **kwargs: Any) -> AsyncIterator[Delivery]:
        """The messages of ``stream`` one by one, pulled ``batch_size`` at a time (default 100; one batch held in
        memory), for as long as the caller iterates (with ``stop_when_empty``: until a pull brings nothing
        within ``max_wait``). Arguments and messages as :meth:`afetch`; an ephemeral read keeps one consumer for
        the whole iteration and deletes it when the iteration ends. Settle the messages while iterating: the
        settles of a batch are confirmed before the next one is pulled, and when the iteration ends."""
        async with contextlib.aclosing(self._batches(*args, **kwargs)) as batches:
            async for batch in batches:
                for delivery in batch:
                    yield delivery

    @passing_arguments_to(_batches)
    def consume(self, *args: Any, **kwargs: Any) -> Iterator[Delivery]:
        """Blocking form of :meth:`aconsume`, on an event loop of its own thread (the connection answers the
        server while the caller works on a message); the messages of a batch are handed over in this thread
        without a hop each, and their ``ack()`` and friends go out on the iteration's connection at once, as do
        this thread's other blocking hook calls until the iteration ends. Leave the loop (or close the
        iterator) to end it: the settles sent are confirmed then."""
        with contextlib.closing(iterate_held(self.aconnect(), self._batches(*args, **kwargs))) as held:
            for batch in held:
                yield from batch
