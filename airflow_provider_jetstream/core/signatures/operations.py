"""The signature of each operation the hook, operators, sensors and triggers offer, declared once.

Each :class:`~airflow_provider_jetstream.core.arguments.Args` holds the operation's own arguments (as
the hook method names them, in the words of docs/glossary.md); each layer adds where JetStream is: a hook
method :data:`~.shared.REQUEST` (``domain``, ``api_prefix``, ``request_timeout``), an operator
:data:`~.shared.OPERATOR`, a sensor :data:`~.waits.SENSOR`-like arguments, a trigger its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nats.aio.client import Client

from airflow_provider_jetstream.core.arguments import REFUSE, REQUIRED, VALUE, Arg, Args, Rule, exclusive
from airflow_provider_jetstream.core.arguments.durations import seconds_of
from airflow_provider_jetstream.core.arguments.names import (
    delivery_subject,
    domain_name,
    headers,
    stream_name,
    subject_filter,
)
from airflow_provider_jetstream.core.arguments.values import (
    boolean,
    choice,
    count,
    fraction,
    instance_of,
    integer,
    list_of,
    message_id,
    optional,
    positive_count,
    seconds,
    value_bytes,
)
from airflow_provider_jetstream.core.errors import SpecError, SpecErrors
from airflow_provider_jetstream.core.manage.specs import ConsumerSpec, KeyValueSpec, StreamSpec, encode_kv_value
from airflow_provider_jetstream.core.signatures.shared import (
    AFTER_REVISION,
    ALLOW_DATA_LOSS,
    ALLOW_DOUBLE_STORE,
    ALLOW_UNREACHABLE_ORIGINS,
    BUCKET,
    CONN_ID,
    CONSUMER,
    DRY_RUN,
    EXPECTED_REVISION,
    IF_EXISTS_ARG,
    IGNORE_MISSING,
    KEY,
    OPTIONAL_COUNT,
    PEER_DOMAINS,
    PRUNE_SOURCES,
    REQUEST,
    REQUEST_TIMEOUT,
    STREAM,
    TARGET,
    spec_arg,
)
from airflow_provider_jetstream.core.status.event_drift import MAX_LOOKUPS
from airflow_provider_jetstream.core.status.headroom import LOW_HEADROOM
from airflow_provider_jetstream.core.status.replication import UNREACHABLE_ORIGINS, VERIFY_ORIGIN, ReplicationWatch

# -- declaring streams, consumers and buckets ----------------------------------------------------------

STREAM_SPEC = spec_arg(
    StreamSpec, "the stream to declare: a StreamSpec or its dict, e.g. {'name': 'test', 'subjects': ['test']}"
)
CONSUMER_SPEC = spec_arg(
    ConsumerSpec, "the durable pull consumer: a ConsumerSpec or its dict, e.g. {'name': 'dur', 'ack_wait': '30s'}"
)
BUCKET_SPEC = spec_arg(
    KeyValueSpec, "the KV bucket: a name, a KeyValueSpec or its dict, e.g. {'bucket': 'config', 'history': 5}"
)
_RECONCILE = {"if_exists": IF_EXISTS_ARG, "dry_run": DRY_RUN}
_GUARDED = {
    "prune_sources": PRUNE_SOURCES,
    "allow_double_store": ALLOW_DOUBLE_STORE,
    "peer_domains": PEER_DOMAINS,
    "allow_unreachable_origins": ALLOW_UNREACHABLE_ORIGINS,
}
#: What only stores (streams and buckets) have: limits whose lowering discards stored data.
_STORED = {"allow_data_loss": ALLOW_DATA_LOSS}

ENSURE_STREAM = Args("ensure stream", {"stream": STREAM_SPEC, **_RECONCILE, **_GUARDED, **_STORED})
ENSURE_CONSUMER = Args("ensure consumer", {"stream": STREAM, "consumer": CONSUMER_SPEC, **_RECONCILE})
ENSURE_BUCKET = Args("ensure bucket", {"bucket": BUCKET_SPEC, **_RECONCILE, **_GUARDED, **_STORED})
STREAM_INFO = Args("stream info", {"stream": STREAM})


# -- removing data: every narrowing argument is refused empty, never taken as "not given" ------------

DELETE_STREAM = Args("delete stream", {"stream": STREAM, "ignore_missing": IGNORE_MISSING})
DELETE_CONSUMER = Args("delete consumer", {"stream": STREAM, "consumer": CONSUMER, "ignore_missing": IGNORE_MISSING})
PURGE = Args(
    "purge",
    {
        "stream": STREAM,
        "subject": Arg(
            subject_filter, None, REFUSE, "purge only messages on this subject (wildcards allowed)", templated=True
        ),
        "keep": Arg(count, None, REFUSE, "keep this many newest messages (per subject with subject)", templated=True),
        "up_to_seq": Arg(
            integer(1),
            None,
            REFUSE,
            "purge the messages below this sequence (at most the stream's last sequence + 1)",
            templated=True,
        ),
    },
    [exclusive("keep", "up_to_seq", "give keep or up_to_seq, not both")],
)

# -- status checks -------------------------------------------------------------------------------------

CONSUMER_LAG = Args(
    "consumer lag",
    {
        "stream": STREAM,
        "consumer": CONSUMER,
        "max_unprocessed": Arg(count, 0, VALUE, "most messages not delivered yet (num_pending); default 0"),
        "max_outstanding_acks": Arg(
            count, 0, VALUE, "most messages delivered and not acknowledged (num_ack_pending); default 0"
        ),
        "max_redelivered": Arg(OPTIONAL_COUNT, None, VALUE, "most redelivered messages; default None: not checked"),
    },
)
EVENT_DRIFT = Args(
    "event drift",
    {
        "stream": STREAM,
        "consumer": CONSUMER,
        "stored_sequences": Arg(
            list_of(integer(1)), REQUIRED, VALUE, "the stream sequences of the asset events Airflow stored"
        ),
        "start_seq": Arg(
            optional(integer(1)), None, VALUE, "first sequence compared; default None: the lowest stored one"
        ),
        "subjects": Arg(
            optional(list_of(subject_filter, min_items=1)),
            None,
            VALUE,
            "only messages on these subjects need an event (a watcher's event_subjects); default None: all",
        ),
        "position": Arg(
            optional(instance_of(dict, "use the dict a trigger recorded in the Asset State Store, or None")),
            None,
            VALUE,
            "the position recorded in the Asset State Store; default None: not compared",
        ),
        "max_lookups": Arg(count, MAX_LOOKUPS, VALUE, f"most sequences looked up in the stream; default {MAX_LOOKUPS}"),
    },
)


def origin_names(value: Any, field: str) -> list[str] | None:
    """None (the mirror or every source), or a non-empty list of origin stream names."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        raise SpecError(field, value, "use a non-empty list of stream names")
    return [stream_name(name, field) for name in value]


REPLICATION = Args(
    "replication",
    {
        "stream": STREAM,
        "origins": Arg(
            origin_names,
            None,
            VALUE,
            "origin streams to judge; default None: the mirror or every source",
            templated=True,
        ),
        "max_lag": Arg(count, 0, VALUE, "most messages an origin may be behind (lag/active rule); default 0"),
        "max_inactive": Arg(
            seconds_of(positive=True),
            10.0,
            VALUE,
            "most time since the last contact with an origin (lag/active rule): seconds or text like '10s'; "
            "default 10 s",
            templated=True,
        ),
        "error_grace": Arg(
            seconds_of(),
            30.0,
            VALUE,
            "how long a replication error may last before failing; default 30 s",
            templated=True,
        ),
        "verify_origin": Arg(
            choice(VERIFY_ORIGIN),
            "auto",
            VALUE,
            "'auto' (default), 'required' or 'off' (the lag/active rule only)",
            templated=True,
        ),
        "unreachable_origins": Arg(
            choice(UNREACHABLE_ORIGINS),
            "wait",
            VALUE,
            "'wait' (default): an unreachable origin is never caught up; 'proceed': done once every reachable "
            "origin is",
            templated=True,
        ),
    },
)


#: The retention headroom thresholds: how close to loss an origin may come (see ``core/status/headroom.py``).
HEADROOM_THRESHOLDS = Args(
    "headroom thresholds",
    {
        "min_time_to_loss": Arg(
            optional(seconds_of(positive=True)),
            None,
            VALUE,
            "least time before a limit discards an origin's first uncopied message (or refuses new ones) at the "
            "current rate: seconds, timedelta or text like '1h'; default None: not judged",
            templated=True,
        ),
        "min_headroom": Arg(
            optional(fraction),
            None,
            VALUE,
            "least share of every limit an origin must have left, between 0 and 1; default None: not judged",
            templated=True,
        ),
    },
)
#: What a check does with an origin below a headroom threshold.
LOW_HEADROOM_POLICY = Args(
    "low headroom",
    {
        "low_headroom": Arg(
            choice(LOW_HEADROOM),
            "fail",
            VALUE,
            "'fail' (default): an origin below a headroom threshold fails the task; 'warn': log a warning and go on",
            templated=True,
        )
    },
)
#: One reading of each origin's retention headroom (the hook's ``retention_headroom``).
RETENTION_HEADROOM = Args("retention headroom", {"stream": STREAM, "origins": REPLICATION.args["origins"]}) + (
    HEADROOM_THRESHOLDS
)


def replication_watch(values: Mapping[str, Any], unreachable_timeout: float | None = None) -> ReplicationWatch:
    """A fresh :class:`ReplicationWatch` from :data:`REPLICATION`'s checked values, with
    :data:`HEADROOM_THRESHOLDS` and :data:`LOW_HEADROOM_POLICY`'s where given."""
    return ReplicationWatch(
        values["stream"],
        values["max_lag"],
        values["max_inactive"],
        values["error_grace"],
        values["origins"],
        verify_origin=values["verify_origin"],
        unreachable_origins=values["unreachable_origins"],
        unreachable_timeout=unreachable_timeout,
        min_time_to_loss=values.get("min_time_to_loss"),
        min_headroom=values.get("min_headroom"),
        low_headroom=values.get("low_headroom") or "fail",
    )


CHECK_REPLICATION = Args(
    "check replication",
    {
        "watch": Arg(
            instance_of(ReplicationWatch, "use a ReplicationWatch (see replication_status for one check)"),
            REQUIRED,
            VALUE,
            "the watch kept across checks (it remembers since when errors and outages last)",
        )
    },
)


def expected_text(value: Any, field: str) -> str | None:
    """None (any value), or the text a key must hold."""
    if value is not None and not isinstance(value, str):
        raise SpecError(field, value, "use text (compared as UTF-8) or None")
    return value


KV_GET = Args("kv get", {"bucket": BUCKET, "key": KEY})
KEY_CHECK = KV_GET + Args(
    "key check",
    {
        "value": Arg(expected_text, None, VALUE, "UTF-8 text the key must hold; default None: any", templated=True),
        "after_revision": AFTER_REVISION,
    },
)

# -- writing -------------------------------------------------------------------------------------------

KV_PUT = KV_GET + Args(
    "kv put",
    {
        "value": Arg(
            encode_kv_value,
            REQUIRED,
            VALUE,
            "bytes, str (stored as UTF-8), or a dict, list, number or bool (stored as JSON)",
            templated=True,
        ),
        "expected_revision": EXPECTED_REVISION,
    },
)
KV_DELETE = KV_GET + Args(
    "kv delete",
    {
        "purge": Arg(boolean, False, VALUE, "also drop the key's history; default False", templated=True),
        "expected_revision": EXPECTED_REVISION,
    },
)


def payloads(value: Any, field: str) -> Iterable[Any]:
    """The messages to publish: bytes, str, or an iterable of payloads (one payload is a list of one).

    A list or tuple is encoded here (:func:`value_bytes`), so a payload with no exact bytes (a set, NaN,
    a datetime) is refused before anything is sent; an iterator is encoded as it is sent."""
    if isinstance(value, (str, bytes)):
        return [value]
    if value is None or isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise SpecError(field, value, "give the payloads to publish: bytes, str, or a list (any iterable) of them")
    if isinstance(value, (list, tuple)):
        errors: list[SpecError] = []
        encoded = []
        for index, item in enumerate(value):
            try:
                encoded.append(value_bytes(item, f"{field}[{index}]"))
            except SpecError as refused:
                errors.append(refused)
        if errors:
            raise SpecErrors(errors)
        return encoded
    return value


def _subject_outside_api_prefix(values: Mapping[str, Any], prefix: str) -> None:
    delivery_subject(values["subject"], f"{prefix}subject", [values["api_prefix"]])


#: The subject is not under the ``api_prefix`` given with it (that would be an API request).
SUBJECT_OUTSIDE_API = Rule(("subject", "api_prefix"), _subject_outside_api_prefix, "subject not under api_prefix")

PUBLISH = Args(
    "publish",
    {
        "subject": Arg(
            delivery_subject,
            REQUIRED,
            VALUE,
            "the subject: literal, outside the reserved subject spaces and the JetStream API prefixes",
            templated=True,
        ),
        "messages": Arg(
            payloads, REQUIRED, VALUE, "the payloads: bytes, str or JSON-serializable values", templated=True
        ),
        "headers": Arg(optional(headers), None, VALUE, "headers on every message: names to strings", templated=True),
        "msg_id": Arg(
            optional(message_id),
            None,
            VALUE,
            "template of each message's Nats-Msg-Id ({index}: the message's index); None: no id; default None",
            templated=True,
        ),
        # A rendered empty stream is refused: it would silently drop the check of where messages land.
        "expected_stream": Arg(
            stream_name, None, REFUSE, "the stream that must store them (Nats-Expected-Stream)", templated=True
        ),
        "max_in_flight": Arg(positive_count, 4000, VALUE, "most messages published but not yet acked; default 4000"),
        "ack_timeout": Arg(
            seconds(),
            30.0,
            VALUE,
            "seconds a message may wait for its ack (republished if it has a msg id) before failing; default 30",
        ),
        "allow_double_store": ALLOW_DOUBLE_STORE,
        "peer_domains": PEER_DOMAINS,
        "fast_ingest": Arg(
            optional(boolean),
            None,
            VALUE,
            "fast-ingest batches (one ack per flow window): None uses them when the stream allows them "
            "(allow_batched, nats-server 2.14+), False never; default None",
        ),
    },
)


# -- hook methods: each operation with where it acts --------------------------------------------------

HOOK = Args("hook", {"jetstream_conn_id": CONN_ID}) + TARGET
API = REQUEST
JETSTREAM = TARGET
ACCOUNT_INFO = (
    Args(
        "account info",
        {
            "nc": Arg(
                instance_of(Client, "use a connected nats-py client"), REQUIRED, VALUE, "a connected nats-py client"
            )
        },
    )
    + TARGET
)
PROBE_DOMAINS = Args(
    "probe domains",
    {"domains": Arg(list_of(domain_name), REQUIRED, VALUE, "the domains to ask"), "request_timeout": REQUEST_TIMEOUT},
)

__all__ = [
    "ACCOUNT_INFO",
    "API",
    "BUCKET_SPEC",
    "CHECK_REPLICATION",
    "CONSUMER_LAG",
    "CONSUMER_SPEC",
    "DELETE_CONSUMER",
    "DELETE_STREAM",
    "ENSURE_BUCKET",
    "ENSURE_CONSUMER",
    "ENSURE_STREAM",
    "EVENT_DRIFT",
    "HEADROOM_THRESHOLDS",
    "HOOK",
    "JETSTREAM",
    "KEY_CHECK",
    "KV_DELETE",
    "KV_GET",
    "KV_PUT",
    "LOW_HEADROOM_POLICY",
    "PROBE_DOMAINS",
    "PUBLISH",
    "PURGE",
    "REPLICATION",
    "RETENTION_HEADROOM",
    "STREAM_INFO",
    "STREAM_SPEC",
    "SUBJECT_OUTSIDE_API",
    "replication_watch",
]
