"""The typed options of the operator and sensor families: their advanced tuning, one ``options=`` argument each.

Each class is an :class:`~airflow_provider_jetstream.core.arguments.options.Options` dataclass whose fields are
the hook method's arguments of the same names (one declaration: :mod:`.operations`, :mod:`.shared`): an operator
takes ``options=DeclareOptions(dry_run=True)`` or ``options={"dry_run": True}``. The Spark job's options are
:class:`~airflow_provider_jetstream.spark.job_args.SparkJobOptions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.arguments import Arg, Args
from airflow_provider_jetstream.core.arguments.options import Options, options_arg
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.signatures.consume import CONSUME, CONSUME_OPERATOR
from airflow_provider_jetstream.core.signatures.durable import DURABLE_TUNING
from airflow_provider_jetstream.core.signatures.events import (
    KV_EVENT_SETTINGS,
    MESSAGE_SETTINGS,
    MESSAGE_TUNING,
)
from airflow_provider_jetstream.core.signatures.operations import _GUARDED, _STORED, DRY_RUN, PUBLISH, REPLICATION
from airflow_provider_jetstream.core.signatures.operator_only import MIRROR_TUNING

#: What the declare options hold: a dry run, and the guards of a change (every default: the safe one).
_DECLARE = {"dry_run": DRY_RUN, "prune_sources": _GUARDED["prune_sources"], **_STORED, **_GUARDED}


@Options.declare
@dataclass
class DeclareOptions(Options):
    """Options of the operators that declare streams, consumers, KV buckets and object stores.

    :param dry_run: log the plan, change nothing (the XCom's action is ``planned``). Default False.
    :param prune_sources: remove sources the spec does not name. Default False: they are kept.
    :param allow_data_loss: apply in place a change that discards stored data (``max_msgs``, ``max_bytes``,
        ``max_age``, ``max_msgs_per_subject``, a bucket's ``history`` or ``ttl`` lowered, or set where there was
        none) or lowers its durability (``replicas`` lowered). Default False: refused, naming each field.
    :param allow_double_store: create even if another connected domain of this account stores the same
        subjects, or a domain cannot be checked. Default False: refused.
    :param peer_domains: more domains for that check, besides the connection's own. Default none.
    :param allow_unreachable_origins: declare a mirror or source of an origin domain that does not answer now
        and was never seen (the target has no copy of it, ``peer_domains`` does not name it). Default False:
        refused, a wrong domain name? (a known domain that does not answer is declared with a warning).
    """

    arguments = Args("declare options", _DECLARE)

    dry_run: bool = False
    prune_sources: bool = False
    allow_data_loss: bool = False
    allow_double_store: bool = False
    peer_domains: Sequence[str] = ()
    allow_unreachable_origins: bool = False


@Options.declare
@dataclass
class MirrorOptions(DeclareOptions):
    """:class:`DeclareOptions`, and how a mirror reaches and filters its origin.

    :param deliver_prefix: the delivery subject prefix of an origin imported from another account (with
        ``origin_api_prefix``). Default none.
    :param subject_transforms: filter and transform the copied subjects (``[{"src": ..., "dest": ...}]``),
        instead of ``filter_subjects``. Default none.
    """

    arguments = Args("mirror options", {**_DECLARE, **MIRROR_TUNING})

    deliver_prefix: str | None = None
    subject_transforms: list[dict[str, str]] | None = None


@Options.declare
@dataclass
class DurableSourceOptions(DeclareOptions):
    """:class:`DeclareOptions` (without ``prune_sources``: a durable source keeps the copy's other sources), and
    where the origin's flow-control consumer pushes and how the copy transforms subjects.

    :param deliver_subject: where the consumer pushes. Default ``_sourcing.<stream>.<origin_domain>.<origin>``.
    :param subject_transforms: the source's subject transforms (``[{"src", "dest"}]``), applied in the copy.
        Default none.
    """

    arguments = Args("durable source options", {**_DECLARE, **DURABLE_TUNING})

    deliver_subject: str | None = None
    subject_transforms: list[dict[str, str]] | None = None


@Options.declare
@dataclass
class PublishOptions(Options):
    """Options of the publish operator: pacing, acknowledgement and the double-store guard.

    :param max_in_flight: most messages published and not yet acknowledged. Default 4000.
    :param ack_timeout: seconds a message may wait for its ack (a message with a ``Nats-Msg-Id`` is
        published again meanwhile) before the task fails. Default 30.
    :param fast_ingest: fast-ingest batches, one ack per flow window: None (default) when the stream storing the
        subject allows them (``allow_batched``, nats-server 2.14+), False never.
    :param allow_double_store: publish even if streams in other connected domains store the subject too.
        Default False: refused.
    :param peer_domains: more domains for that check, besides the connection's own. Default none.
    """

    arguments = Args(
        "publish options",
        {
            name: PUBLISH.args[name]
            for name in ("max_in_flight", "ack_timeout", "fast_ingest", "allow_double_store", "peer_domains")
        },
    )

    max_in_flight: int = 4000
    ack_timeout: float = 30.0
    fast_ingest: bool | None = None
    allow_double_store: bool = False
    peer_domains: Sequence[str] = ()


@Options.declare
@dataclass
class ReplicationOptions(Options):
    """Options of the replication and retention-headroom sensors (and their trigger): how an origin is judged.

    :param max_lag: most messages an origin may be behind (the lag/active rule). Default 0.
    :param max_inactive: most time since the last contact with an origin (the lag/active rule): seconds,
        ``timedelta`` or text like ``"10s"``. Default 10 seconds.
    :param error_grace: how long a replication error may last before the task fails (a source created before
        its origin reports "stream not found" until the origin exists). Default 30 seconds.
    :param verify_origin: ``"auto"`` (default): ask every origin in its own domain, and where this account
        cannot call its API by design, use the lag/active rule for it; ``"required"``: such an origin fails
        the task; ``"off"``: the lag/active rule only.
    """

    arguments = Args(
        "replication options",
        {name: REPLICATION.args[name] for name in ("max_lag", "max_inactive", "error_grace", "verify_origin")},
    )

    max_lag: int = 0
    max_inactive: Any = 10.0
    error_grace: Any = 30.0
    verify_origin: str = "auto"


#: What the consume operator takes in its options: an ephemeral read's start and filter, the dead letters'
#: subject, the redelivery delays and the results' XCom.
_READ_TUNING = ("filter_subjects", "start_seq", "start_time")
_CONSUME_TUNING = ("dead_letter_subject", "nak_delay", "nak_max_delay", "return_results", "max_xcom_bytes",
                   "results_overflow")  # fmt: skip


@Options.declare
@dataclass
class ConsumeOptions(Options):
    """Options of the consume operator: a read without a consumer, redeliveries, dead letters, the results.

    :param filter_subjects: a read without a consumer: only these subjects (wildcards allowed; one may be a
        string). Default every subject. (A durable consumer delivers what its own filter says.)
    :param start_seq: a read without a consumer: its first sequence. Default 1.
    :param start_time: a read without a consumer: from the first message stored at or after this time (ISO,
        with a zone, or a datetime), instead of ``start_seq``.
    :param dead_letter_subject: the subject of the dead-letter copies. Default
        ``<dead_letter_stream>.<stream>.<consumer>``.
    :param nak_delay: the redelivery delay after a first failure, seconds; doubles per delivery. Default 1.
    :param nak_max_delay: the longest redelivery delay, seconds. Default 60.
    :param return_results: put the function's results (JSON-able) in the XCom under ``results``. Default False.
    :param max_xcom_bytes: the results' JSON size at most. Default 48 KiB.
    :param results_overflow: beyond ``max_xcom_bytes``: ``fail`` (default) naks the message whose result does not
        fit (it comes back) and fails the task; ``trim`` keeps the results that fit and counts the others in
        ``results_trimmed``.
    """

    arguments = CONSUME.only(*_READ_TUNING) + CONSUME_OPERATOR.only(*_CONSUME_TUNING)

    filter_subjects: Any = None
    start_seq: int | None = None
    start_time: Any = None
    dead_letter_subject: str | None = None
    nak_delay: float = 1.0
    nak_max_delay: float = 60.0
    return_results: bool = False
    max_xcom_bytes: int = 49152
    results_overflow: str = "fail"


@Options.declare
@dataclass
class MessageOptions(Options):
    """Options of the event triggers (``JetStreamMessageTrigger``, ``JetStreamKeyValueEventTrigger``): how the
    consumer is made and acked, batches, dead letters, what an event holds, the triggerer's pacing.

    :param deliver_policy: where a new consumer starts: ``all`` (default), ``new``, ``last``, ``last_per_subject``,
        ``by_start_sequence`` (``start_seq``) or ``by_start_time`` (``start_time``, ISO-8601). An existing consumer
        keeps its position.
    :param start_seq: the first sequence of a new consumer (``deliver_policy="by_start_sequence"``).
    :param start_time: the first time of a new consumer (``deliver_policy="by_start_time"``).
    :param ack_policy: how a new consumer is acked: ``explicit`` (default, each message) or ``all`` (a floor). An
        existing consumer keeps its own (``none`` is refused).
    :param max_ack_pending: unacked messages in flight, at most. Default 256.
    :param ack_wait: seconds before the server redelivers an unacked message (kept alive by ``+WPI`` while
        Airflow persists it). Default 30.
    :param max_deliver: deliveries per message; after that a failed one is dead-lettered and terminated.
        Default -1 (unlimited).
    :param nak_delay: the redelivery delay after a first failure, doubling per delivery up to ``nak_max_delay``.
        Defaults 1 and 60 seconds.
    :param batch_window: seconds a batch (``batch_size`` > 1) waits for more messages after its first. Default 0.
    :param dead_letter_subject: the subject of the dead-letter copies. Default
        ``<dead_letter_stream>.<stream>.<consumer>``.
    :param max_payload_bytes: larger payloads are ``omitted`` from the event. Default 65536.
    :param include_headers: put the headers (every value of each) in the event. Default True.
    :param cohort_wait: seconds to wait before the first pull, so sibling watchers restarting together all
        subscribe first. Default 3.
    :param fallback_ack_delay: Airflow < 3.3 only: seconds between handing an event to the triggerer and acking
        it. Default 10.
    """

    arguments = MESSAGE_SETTINGS.only(*MESSAGE_TUNING)

    deliver_policy: str = "all"
    start_seq: int | None = None
    start_time: Any = None
    ack_policy: str = "explicit"
    max_ack_pending: int = 256
    ack_wait: float = 30.0
    max_deliver: int = -1
    nak_delay: float = 1.0
    nak_max_delay: float = 60.0
    batch_window: float = 0.0
    dead_letter_subject: str | None = None
    max_payload_bytes: int = 65536
    include_headers: bool = True
    cohort_wait: float = 3.0
    fallback_ack_delay: float = 10.0


def family_options(cls: type[Options], doc: str, without: Sequence[str] = ()) -> Arg:
    """The ``options`` argument of an operator of ``cls``'s family, refusing the fields ``without`` (those that
    do not apply to it) when they are given other than their default."""
    arg = options_arg(cls, doc)
    if not without:
        return arg
    family = arg.parse

    def parse(value: Any, field: str, *, text: bool = False) -> Options:
        options = family(value, field, text=text)
        for name in without:
            if getattr(options, name) != cls.arguments.args[name].default_value(name):
                raise SpecError(f"{field}.{name}", getattr(options, name), "this operator does not take it")
        return options

    parse.reads_text = True  # type: ignore[attr-defined]
    parse.options_class = cls  # type: ignore[attr-defined]
    return arg.but(parse=parse)


#: ``JetStreamMessageTrigger``'s arguments (its kwargs, as the triggerer rebuilds it from them): the settings
#: every watcher sets, the rest in ``options``.
MESSAGES = MESSAGE_SETTINGS.without(*MESSAGE_TUNING) + Args(
    "options", {"options": options_arg(MessageOptions, "MessageOptions or a dict of its fields")}
)
#: What a KV event trigger takes in its options (the message options that shape a watch of keys).
KV_EVENT_TUNING = tuple(name for name in MESSAGE_TUNING if name in KV_EVENT_SETTINGS.args)
#: ``JetStreamKeyValueEventTrigger``'s arguments: its own settings, the rest in ``options``.
KV_EVENTS = KV_EVENT_SETTINGS.without(*KV_EVENT_TUNING) + Args(
    "options",
    {
        "options": family_options(
            MessageOptions,
            "MessageOptions (those that shape a watch of keys) or a dict of them",
            without=[name for name in MESSAGE_TUNING if name not in KV_EVENT_TUNING],
        )
    },
)

__all__ = [
    "KV_EVENTS",
    "KV_EVENT_TUNING",
    "MESSAGES",
    "ConsumeOptions",
    "DeclareOptions",
    "DurableSourceOptions",
    "MessageOptions",
    "MirrorOptions",
    "PublishOptions",
    "ReplicationOptions",
    "family_options",
]
