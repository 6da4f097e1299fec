"""The signatures of the event triggers: a durable consumer's messages (:data:`MESSAGES`) and KV changes
(:data:`KV_EVENTS`), each with the consumer spec its arguments ask for (the derived value ``spec``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_jetstream.core.arguments import DEFAULT, REFUSE, REQUIRED, VALUE, Arg, Args, Rule, requires
from airflow_provider_jetstream.core.arguments.durations import parse_instant
from airflow_provider_jetstream.core.arguments.names import (
    consumer_name,
    delivery_subject,
    kv_key_pattern,
    stream_filter,
    stream_name,
)
from airflow_provider_jetstream.core.arguments.values import (
    boolean,
    choice,
    integer,
    list_of,
    optional,
    positive_count,
    seconds,
)
from airflow_provider_jetstream.core.consume.deliveries import DECODINGS
from airflow_provider_jetstream.core.consume.durable import ACK_POLICIES
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.manage.specs.consumer import ConsumerSpec
from airflow_provider_jetstream.core.signatures.shared import BUCKET, CONN_ID, STREAM, TARGET

DELIVER_POLICIES = ("all", "new", "last", "last_per_subject", "by_start_sequence", "by_start_time")
#: Where a new KV watch starts: only changes from now on, or the current value of each key first.
INITIAL = {"new": "new", "current": "last_per_subject"}


def _one_of(options: tuple[str, ...]) -> str:
    return f"use one of {', '.join(options)}"


def _subjects(value: Any, field: str) -> list[str] | None:
    """Subject filters; an empty list means all (None)."""
    return list_of(stream_filter)(value, field) or None


def _consumer_at_spec_path(value: Any, field: str) -> str:
    return consumer_name(value, "consumer.name")


def _instant_text(value: Any, field: str) -> str:
    return parse_instant(value, field)


def _consumer_spec(values: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The durable consumer the arguments ask for (created, or reconciled, when the trigger starts)."""
    spec: dict[str, Any] = {
        "name": values["consumer"],
        "ack_policy": values["ack_policy"],
        "deliver_policy": values["deliver_policy"],
        "max_ack_pending": values["max_ack_pending"],
        "ack_wait": f"{float(values['ack_wait'])}s",
        "max_deliver": values["max_deliver"],
    }
    filters = values["filter_subjects"] or []
    if len(filters) == 1:
        spec["filter_subject"] = filters[0]
    elif filters:
        spec["filter_subjects"] = filters
    if values["start_seq"] is not None:
        spec["start_seq"] = values["start_seq"]
    if values["start_time"] is not None:
        spec["start_time"] = values["start_time"]
    return {"spec": ConsumerSpec.from_dict(spec, "consumer")}


#: How the consumer is made and acked: the fields of its spec besides its name and filters.
_CONSUMER_SETTINGS = (
    "deliver_policy",
    "start_seq",
    "start_time",
    "ack_policy",
    "max_ack_pending",
    "ack_wait",
    "max_deliver",
)
_CONSUMER_ARGS = ("consumer", "filter_subjects", *_CONSUMER_SETTINGS)

#: Every setting of a message trigger's group, flat: what the producer and the consumer spec read
#: (:data:`MESSAGES` takes them as its own arguments and its ``options``).
MESSAGE_SETTINGS = (
    Args(
        "message trigger",
        {
            "stream": STREAM,
            "consumer": Arg(_consumer_at_spec_path, REQUIRED, VALUE, "durable consumer (created or reconciled)"),
            "jetstream_conn_id": CONN_ID,
            "filter_subjects": Arg(_subjects, None, DEFAULT, "subjects the consumer delivers; default all"),
            "deliver_policy": Arg(
                choice(DELIVER_POLICIES, _one_of(DELIVER_POLICIES)), "all", VALUE, "where a new consumer starts"
            ),
            "start_seq": Arg(integer(1), None, DEFAULT, "first sequence (deliver_policy by_start_sequence)"),
            "start_time": Arg(_instant_text, None, DEFAULT, "first time (deliver_policy by_start_time)"),
            "ack_policy": Arg(
                choice(ACK_POLICIES, _one_of(ACK_POLICIES)), "explicit", VALUE, "explicit (default) or all"
            ),
            "max_ack_pending": Arg(positive_count, 256, VALUE, "unacked messages in flight at most; default 256"),
            "ack_wait": Arg(seconds(), 30.0, VALUE, "seconds before an unacked message is redelivered; default 30"),
            "max_deliver": Arg(integer(-1, hint=" (-1: unlimited)"), -1, VALUE, "deliveries per message; default -1"),
            "nak_delay": Arg(seconds(), 1.0, VALUE, "redelivery delay after a first failure; default 1"),
            "nak_max_delay": Arg(seconds(), 60.0, VALUE, "longest redelivery delay; default 60"),
            "batch_size": Arg(positive_count, 1, VALUE, "messages per event; default 1"),
            "batch_window": Arg(seconds(allow_zero=True), 0.0, VALUE, "seconds a batch waits for more; default 0"),
            "dead_letter_stream": Arg(stream_name, None, DEFAULT, "stream receiving rejected messages"),
            "dead_letter_subject": Arg(delivery_subject, None, REFUSE, "their subject in it"),
            "event_subjects": Arg(_subjects, None, DEFAULT, "this watcher's own narrowing (client side); default all"),
            "decode": Arg(
                choice(DECODINGS, _one_of(DECODINGS)), "auto", VALUE, "payload decoding: auto, json, text or base64"
            ),
            "max_payload_bytes": Arg(positive_count, 65536, VALUE, "larger payloads are omitted; default 65536"),
            "include_headers": Arg(boolean, True, VALUE, "put the headers in the event; default True"),
            "cohort_wait": Arg(seconds(allow_zero=True), 3.0, VALUE, "seconds before the first pull; default 3"),
            "fallback_ack_delay": Arg(
                seconds(allow_zero=True), 10.0, VALUE, "Airflow < 3.3: seconds before acking; default 10"
            ),
        },
        [
            requires(
                "dead_letter_subject", "dead_letter_stream", "give dead_letter_stream too (the stream that stores it)"
            ),
            Rule(_CONSUMER_ARGS, _consumer_spec, "the consumer the arguments ask for"),
        ],
    )
    + TARGET
)


def _keys(value: Any, field: str) -> list[str]:
    """Keys or key patterns; an empty list means every key."""
    if not isinstance(value, list):
        raise SpecError(field, value, "use a list of keys or key patterns, e.g. ['site.*']")
    return [kv_key_pattern(key, f"{field}[{i}]") for i, key in enumerate(value)] or [">"]


_SHARED_WITH_MESSAGES = (
    "jetstream_conn_id",
    "max_ack_pending",
    "ack_wait",
    "nak_delay",
    "nak_max_delay",
    "dead_letter_stream",
    "decode",
    "max_payload_bytes",
    "cohort_wait",
    "fallback_ack_delay",
)

#: Every setting of a KV event trigger, flat (:data:`KV_EVENTS` takes them as its own arguments and its
#: ``options``); its message-trigger settings follow from them.
KV_EVENT_SETTINGS = (
    Args(
        "KV event trigger",
        {
            "bucket": BUCKET,
            "keys": Arg(_keys, [">"], DEFAULT, "keys or patterns ('*', a final '>'); default ['>']: every key"),
            "consumer": Arg(optional(consumer_name), None, DEFAULT, "durable consumer; default af_kv_<hash>"),
            "initial": Arg(
                choice(tuple(INITIAL)), "new", VALUE, "new (default): changes from now on; current: values first"
            ),
            "include_deletes": Arg(boolean, True, VALUE, "fire on deletes and purges too; default True"),
            **{name: MESSAGE_SETTINGS.args[name] for name in _SHARED_WITH_MESSAGES},
        },
    )
    + TARGET
)

#: What an event trigger takes in its ``options``: how its consumer is made and acked, batches, dead letters'
#: subject, what an event holds, and the triggerer's pacing (:class:`~.options.MessageOptions`).
MESSAGE_TUNING = (
    *_CONSUMER_SETTINGS,
    "nak_delay",
    "nak_max_delay",
    "batch_window",
    "dead_letter_subject",
    "max_payload_bytes",
    "include_headers",
    "cohort_wait",
    "fallback_ack_delay",
)

__all__ = [
    "DELIVER_POLICIES",
    "INITIAL",
    "KV_EVENT_SETTINGS",
    "MESSAGE_SETTINGS",
    "MESSAGE_TUNING",
]
