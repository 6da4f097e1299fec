"""``JetStreamKeyValueEventTrigger``: an asset watcher firing on each change of KV keys in any domain, durably."""

from __future__ import annotations

import hashlib
from typing import Any

from airflow_provider_jetstream.core.api import JetStreamApi
from airflow_provider_jetstream.core.arguments import refusing_retired
from airflow_provider_jetstream.core.consume.deliveries import decode_payload
from airflow_provider_jetstream.core.manage.buckets import bucket_layout_of, key_of
from airflow_provider_jetstream.core.manage.specs.consumer import ConsumerSpec
from airflow_provider_jetstream.core.manage.specs.kv import kv_stream_name
from airflow_provider_jetstream.core.protocol import KV_OPERATION
from airflow_provider_jetstream.core.read.delivery import Delivery
from airflow_provider_jetstream.core.signatures.events import INITIAL
from airflow_provider_jetstream.core.signatures.options import KV_EVENT_TUNING, KV_EVENTS, MessageOptions
from airflow_provider_jetstream.triggers.message_producer import JetStreamSharedStreamProducer
from airflow_provider_jetstream.triggers.messages import JetStreamMessageTrigger


def kv_consumer_name(bucket: str, keys: list[str], initial: str) -> str:
    """The durable consumer of a watch: the same bucket, keys and start give the same name (a restart resumes)."""
    digest = hashlib.sha256(f"{bucket}|{sorted(keys)}|{initial}".encode()).hexdigest()[:16]
    return f"af_kv_{digest}"


class KeyValueStreamProducer(JetStreamSharedStreamProducer):
    """The producer of a KV watch: its consumer filters where the bucket stores the watched keys, read from
    the bucket's stream (a mirror of another bucket, as nats.go and nats.js make it, stores them under the
    origin's name, ``$KV.<origin>.<key>``)."""

    def __init__(self, kwargs: dict[str, Any], consumer_spec: ConsumerSpec, bucket: str, keys: list[str]) -> None:
        super().__init__(kwargs, consumer_spec)
        self.bucket = bucket
        self.keys = keys

    async def consumer_in(self, api: JetStreamApi) -> ConsumerSpec:
        layout = await bucket_layout_of(api, self.bucket)
        filters = [layout.key_prefix + key for key in self.keys]
        if filters == self.kwargs["filter_subjects"]:
            return self.spec
        return JetStreamMessageTrigger.consumer_spec({**self.kwargs, "filter_subjects": filters})


class JetStreamKeyValueEventTrigger(JetStreamMessageTrigger):
    """Fires for each change (put, delete, purge) of the watched keys of a KV bucket, in any domain.

    The watch is a durable consumer on the bucket's stream ``KV_<bucket>``, filtered where the bucket
    stores the keys (under the origin's name for a mirror of another bucket); it is acked only after
    Airflow stored the event, so after a triggerer restart it resumes from the first revision
    Airflow did not store (at-least-once: a DAG dedups by ``revision``). Payload: ``bucket``,
    ``key``, ``revision``, ``operation`` (``PUT``, ``DEL`` or ``PURGE``), ``value`` (decoded; None
    for deletes), ``created`` (ISO), ``delivered``, ``domain``. A bucket that keeps one revision
    per key (``history=1``) may skip a revision overwritten before it was delivered.

    :param bucket: bucket name.
    :param keys: keys or patterns (``*``, final ``>``). Default ``[">"]``.
    :param jetstream_conn_id: Airflow connection id. Default ``jetstream_default``.
    :param domain: JetStream domain of the bucket; or ``api_prefix``. Default: the connection's.
    :param consumer: durable consumer name. Default ``af_kv_<hash of bucket, keys, initial>``.
    :param initial: ``new`` (default): changes from the first start on; ``current``: first one event
        per key for its current value.
    :param include_deletes: fire on deletes and purges too. Default True.
    :param decode: payload decoding, as for :class:`JetStreamMessageTrigger`. Default ``auto``.
    :param dead_letter_stream: a stream that receives rejected revisions. Default none.
    :param options: :class:`~airflow_provider_jetstream.core.signatures.options.MessageOptions` (those that shape
        a watch of keys: ``max_ack_pending``, ``ack_wait``, ``nak_delay``, ``nak_max_delay``,
        ``max_payload_bytes``, ``cohort_wait``, ``fallback_ack_delay``) or a dict of them. Default: every default.
    """

    #: The signature of the trigger's kwargs (its message-trigger kwargs follow from them).
    arguments = KV_EVENTS

    @refusing_retired
    def __init__(
        self,
        *,
        bucket: str,
        keys: list[str] | None = None,
        jetstream_conn_id: str = "jetstream_default",
        domain: str | None = None,
        api_prefix: str | None = None,
        consumer: str | None = None,
        initial: str = "new",
        include_deletes: bool = True,
        decode: str = "auto",
        dead_letter_stream: str | None = None,
        options: MessageOptions | dict[str, Any] | None = None,
    ) -> None:
        given = {name: value for name, value in locals().items() if name in KV_EVENTS.args}  # the parameters
        checked = KV_EVENTS.check(given)
        options = checked.pop("options")
        tuning = {name: getattr(options, name) for name in KV_EVENT_TUNING}
        #: The arguments as given, checked (JSON-serializable), as the triggerer rebuilds the trigger from them.
        self.kv_given: dict[str, Any] = {**checked, "options": tuning}
        #: Every setting of the watch, flat.
        self.kv_kwargs: dict[str, Any] = {**checked, **tuning}
        super().__init__(**self.message_arguments(self.kv_given))

    @classmethod
    def message_kwargs(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The settings (flat) of the message trigger of a watch (see :meth:`message_arguments`)."""
        return JetStreamMessageTrigger(**cls.message_arguments(kwargs)).kwargs  # with every default filled in

    @staticmethod
    def message_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
        """The message-trigger arguments of a watch: stream ``KV_<bucket>``, filters ``$KV.<bucket>.<key>`` (a
        mirror's producer filters under its origin's name instead, see :class:`KeyValueStreamProducer`)."""
        kv = KV_EVENTS.check(kwargs)
        bucket, keys, initial = kv.pop("bucket"), kv.pop("keys"), kv.pop("initial")
        kv.pop("include_deletes")
        tuning = kv.pop("options").as_kwargs()
        consumer = kv.pop("consumer") or kv_consumer_name(bucket, keys, initial)
        return {
            **kv,
            "stream": kv_stream_name(bucket),
            "consumer": consumer,
            "filter_subjects": [f"$KV.{bucket}.{key}" for key in keys],
            "options": {**tuning, "deliver_policy": INITIAL[initial]},
        }

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", dict(self.kv_given)

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> KeyValueStreamProducer:
        kv = KV_EVENTS.check(kwargs)
        message = cls.message_kwargs(kwargs)
        return KeyValueStreamProducer(message, cls.consumer_spec(message), kv["bucket"], kv["keys"])

    def message_payload(self, delivery: Delivery) -> dict[str, Any] | None:
        """The event of one revision; None for a delete or purge when ``include_deletes`` is off."""
        operation = (delivery.header(KV_OPERATION) or "PUT").upper()
        if operation != "PUT" and not self.kv_kwargs["include_deletes"]:
            return None
        bucket = self.kv_kwargs["bucket"]
        value: Any = None
        encoding = None
        if operation == "PUT":
            encoding, value = decode_payload(
                delivery.data, self.kv_kwargs["decode"], self.kv_kwargs["max_payload_bytes"]
            )
        return {
            "bucket": bucket,
            "key": key_of(delivery.subject),
            "revision": delivery.seq,
            "operation": operation,
            "encoding": encoding,
            "value": value,
            "created": delivery.timestamp,
            "delivered": delivery.delivered,
            "domain": delivery.domain,
        }
