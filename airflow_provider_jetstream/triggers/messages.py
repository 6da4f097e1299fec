"""``JetStreamMessageTrigger``: an asset watcher firing per JetStream message or batch, acked once Airflow stored it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Hashable
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider_jetstream.core.arguments import refusing_retired
from airflow_provider_jetstream.core.arguments.names import subjects_collide
from airflow_provider_jetstream.core.consume.deliveries import batch_payload, delivery_payload
from airflow_provider_jetstream.core.manage.specs.consumer import ConsumerSpec
from airflow_provider_jetstream.core.read.delivery import Delivery
from airflow_provider_jetstream.core.signatures.events import MESSAGE_SETTINGS
from airflow_provider_jetstream.core.signatures.options import MESSAGES, MessageOptions
from airflow_provider_jetstream.core.tasks import stop_task
from airflow_provider_jetstream.triggers.message_producer import (
    HAS_SHARED_STREAMS,
    AdvanceItem,
    AdvanceOutcome,
    JetStreamSharedStreamProducer,
    group_key,
    positions_recorded_in,
    reject_shared_stream_event,
)

log = logging.getLogger(__name__)


class JetStreamMessageTrigger(BaseEventTrigger):
    """Fires for each message of a durable pull consumer; for ``AssetWatcher`` (event-driven scheduling).

    On Airflow >= 3.3 every watcher with the same connection, stream, consumer and consumer settings
    in a triggerer shares one consumer and one NATS connection, and a message is acked only after
    every watcher's asset event is stored (at-least-once; a DAG dedups by ``seq``). A watcher
    that rejects a message (a payload it cannot decode with ``decode`` other than ``auto``) has it
    copied to ``dead_letter_stream`` if set, then terminated; a watcher that fails (not stored within
    ``[triggerer] shared_stream_ack_timeout``) has it redelivered after a backoff. On Airflow 3.2
    (no shared streams) each trigger consumes alone and acks ``options.fallback_ack_delay`` seconds after
    handing an event to the triggerer.

    With ``options.ack_policy="all"`` (or an existing consumer with ``ack_policy: all``, which is adopted)
    one ack covers every message up to a stream sequence, so the trigger acks only the highest
    sequence below which every message is stored or dead-lettered: fewer acks, but a failed
    message holds back the acks of every later one (kept alive with ``+WPI``, counted in
    ``max_ack_pending``) until it comes back and is stored. After a reconnect or a triggerer restart
    the server redelivers everything above that floor: events may repeat (at-least-once, same
    ``seq``); nothing below it is lost.

    On Airflow >= 3.3 the group records the consumer's position (its ack floor) in each watched asset's Asset
    State Store, key ``jetstream.position.<stream>.<consumer>``; ``JetStreamHook.event_drift`` compares the
    consumer with the asset events Airflow stored (docs/events.md).

    :param stream: stream name.
    :param consumer: durable consumer name (created, or reconciled, on start).
    :param jetstream_conn_id: Airflow connection id. Default ``jetstream_default``.
    :param domain: JetStream domain of the stream; or ``api_prefix`` (e.g. ``JS.acc@hub.API``). Default:
        the connection's.
    :param filter_subjects: subjects the consumer delivers (server side). Default: all of the stream's.
    :param event_subjects: this watcher's own narrowing (client side; other watchers of the consumer are
        unaffected): messages on other subjects are acknowledged without an event. Default: all.
    :param batch_size: messages per event (payload ``messages``); 1 (default) gives one event per message.
    :param decode: payload decoding, ``auto`` (JSON, else text, else base64; default), ``json``,
        ``text`` or ``base64``; a payload not in a forced form is rejected.
    :param dead_letter_stream: a stream that receives rejected messages with an ``Airflow-DLQ-Reason``
        header. Default none.
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.MessageOptions` or a dict of its
        fields: how a new consumer starts (``deliver_policy``, ``start_seq``, ``start_time``) and is acked
        (``ack_policy``, ``max_ack_pending``, ``ack_wait``, ``max_deliver``), the redelivery delays, the batch
        window, the dead letters' subject, what an event holds (``max_payload_bytes``, ``include_headers``) and
        the triggerer's pacing (``cohort_wait``, ``fallback_ack_delay``). Default: every default.
    """

    #: The signature of the trigger's kwargs (checked when it is made, and when the triggerer rebuilds it).
    arguments = MESSAGES

    @refusing_retired
    def __init__(
        self,
        *,
        stream: str,
        consumer: str,
        jetstream_conn_id: str = "jetstream_default",
        domain: str | None = None,
        api_prefix: str | None = None,
        filter_subjects: list[str] | None = None,
        event_subjects: list[str] | None = None,
        batch_size: int = 1,
        decode: str = "auto",
        dead_letter_stream: str | None = None,
        options: MessageOptions | dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        given = {name: value for name, value in locals().items() if name in MESSAGES.args}  # the parameters
        # Checked with its one declaration: a bad argument is a DAG import error; nothing is sent anywhere.
        checked = MESSAGES.check(given)
        tuning = checked.pop("options")
        #: The arguments as given, checked (JSON-serializable: ``options`` as a dict), as the triggerer rebuilds
        #: the trigger from them.
        self.given: dict[str, Any] = {**checked, "options": tuning.as_kwargs()}
        settings = MESSAGE_SETTINGS.check({**checked, **tuning.as_kwargs()})
        self.spec: ConsumerSpec = settings.pop("spec")
        #: Every setting, flat (the arguments and the options' fields): what the producer reads.
        self.kwargs: dict[str, Any] = settings

    # -- arguments --------------------------------------------------------------------------

    @classmethod
    def consumer_spec(cls, settings: dict[str, Any]) -> ConsumerSpec:
        """The consumer the trigger's settings (flat) ask for (checked with :data:`MESSAGE_SETTINGS`; nothing is
        sent anywhere)."""
        return MESSAGE_SETTINGS.check({k: v for k, v in settings.items() if k != "spec"})["spec"]

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", dict(self.given)

    # -- shared streams (Airflow >= 3.3) ----------------------------------------------------

    def shared_stream_key(self) -> Hashable | None:
        """Watchers with the same connection, target, stream, consumer and consumer settings share a group."""
        return group_key(self.kwargs)

    @classmethod
    def message_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The settings (flat) of a :class:`JetStreamMessageTrigger` behind this class's serialized kwargs:
        checked, every default filled in (kwargs serialized by an earlier release may lack newer arguments)."""
        return JetStreamMessageTrigger(**kwargs).kwargs

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> JetStreamSharedStreamProducer:
        """The producer of a group (ack mode); it connects only when its stream opens."""
        message_kwargs = cls.message_kwargs(kwargs)
        return JetStreamSharedStreamProducer(message_kwargs, JetStreamMessageTrigger.consumer_spec(message_kwargs))

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """One event per raw message (or batch) for this watcher; never raises on a bad message (rejects it).
        Meanwhile the group's producer records the consumer's position in the watched assets' Asset State Store."""
        with positions_recorded_in(self.shared_stream_key(), getattr(self, "asset_state_store", None)):
            async for raw in shared_stream:
                try:
                    payload = self.event_payload(raw)
                except Exception as err:  # a raise here would count the message as stored: reject instead
                    log.warning("%s: rejecting %s: %s", self.kwargs["stream"], _describe(raw), err)
                    reject_shared_stream_event()
                    continue
                if payload is not None:
                    yield TriggerEvent(payload)

    # -- events -----------------------------------------------------------------------------

    def wants(self, delivery: Delivery) -> bool:
        """Whether this watcher's ``event_subjects`` take the delivery's subject (all, without ``event_subjects``)."""
        subjects = self.kwargs.get("event_subjects")
        return not subjects or any(subjects_collide(s, delivery.subject) for s in subjects)

    def message_payload(self, delivery: Delivery) -> dict[str, Any] | None:
        """The payload for one message, None to skip it (acked without an event); raises to reject it."""
        if not self.wants(delivery):
            return None
        kw = self.kwargs
        return delivery_payload(
            delivery,
            decode=kw["decode"],
            max_payload_bytes=kw["max_payload_bytes"],
            include_headers=kw["include_headers"],
        )

    def event_payload(self, raw: Delivery | tuple[Delivery, ...]) -> dict[str, Any] | None:
        """The payload of the event for a raw message or batch; None when none of it is for this watcher."""
        if isinstance(raw, Delivery):
            return self.message_payload(raw)
        messages = [p for p in (self.message_payload(d) for d in raw) if p is not None]
        if not messages:
            return None
        kw = self.kwargs
        return batch_payload(messages, stream=kw["stream"], domain=raw[0].domain, consumer=kw["consumer"])

    # -- standalone (Airflow < 3.3, or a key that could not be computed) ---------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Consume alone: each event is acked ``fallback_ack_delay`` seconds after the triggerer took it
        (the generator resumed), kept alive by ``+WPI`` meanwhile; a reject dead-letters and terminates."""
        producer = self.create_shared_stream_producer(self.serialize()[1])
        delay = float(self.kwargs["fallback_ack_delay"])
        lock = asyncio.Lock()  # advance calls are serial, as under Airflow's manager
        later: set[asyncio.Task[None]] = set()

        async def advance(payload: Any, outcome: AdvanceOutcome, wait: float = 0.0) -> None:
            if wait:
                await asyncio.sleep(wait)
            async with lock:
                await producer.advance([AdvanceItem(payload, outcome)])

        try:
            async for raw, payload in producer.open_stream():
                try:
                    event = self.event_payload(raw)
                except Exception as err:
                    log.warning("%s: rejecting %s: %s", self.kwargs["stream"], _describe(raw), err)
                    await advance(payload, AdvanceOutcome(acked=0, failed=0, rejected=1))
                    continue
                if event is None:
                    await advance(payload, AdvanceOutcome(acked=1, failed=0))
                    continue
                yield TriggerEvent(event)
                task = asyncio.create_task(advance(payload, AdvanceOutcome(acked=1, failed=0), delay))
                later.add(task)
                task.add_done_callback(later.discard)
        finally:
            with contextlib.suppress(BaseException):
                await asyncio.gather(*(stop_task(task) for task in list(later)))
            await producer.aclose()


def _describe(raw: Delivery | tuple[Delivery, ...]) -> str:
    if isinstance(raw, Delivery):
        return f"#{raw.seq} ({raw.subject})"
    return f"batch #{raw[0].seq}-#{raw[-1].seq}" if raw else "empty batch"


__all__ = ["HAS_SHARED_STREAMS", "JetStreamMessageTrigger", "MessageOptions"]
