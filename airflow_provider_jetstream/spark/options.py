"""Options of the ``jetstream`` Spark data source: declared once (:data:`READ`, :data:`READ_STREAM`,
:data:`WRITE`), parsed and checked on the driver.

Each option is an :class:`~airflow_provider_jetstream.core.arguments.Arg` named with the glossary's word
in Spark's camelCase (``start_seq`` is ``startSeq``; most of them the declarations the operators use: a
stream name, a domain, an API prefix); every bad option fails before any Spark task runs, with the option's
name, the bad value and what is allowed (all of them at once), a retired option naming its replacement
(``startingSequence``: renamed ``startSeq``), and an unknown option with the closest known name. The
connection options are declared in :mod:`airflow_provider_jetstream.spark.connection`.

Airflow-free: Spark drivers and executors import it.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.arguments import DEFAULT, REFUSE, Arg, Args, Rule, exclusive, requires
from airflow_provider_jetstream.core.arguments.durations import instant, parse_instant, seconds_of
from airflow_provider_jetstream.core.arguments.names import (
    delivery_subject,
    stream_name,
    stream_names_text,
    subject_text,
)
from airflow_provider_jetstream.core.arguments.retired import CAMEL
from airflow_provider_jetstream.core.arguments.values import Parser, boolean, integer, number, text
from airflow_provider_jetstream.core.connection.fields import api_prefix_for
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.errors import JetStreamConfigError, SpecError
from airflow_provider_jetstream.core.read.settings import READER, PullSettings, default_reader
from airflow_provider_jetstream.core.signatures.shared import API_PREFIX, DOMAIN
from airflow_provider_jetstream.spark.connection import (
    CONNECTION,
    CONNECTION_ENV_VAR,
    connection_config,
    connection_env,
    connection_fields,
    connection_options,
)

__all__ = [
    "CONNECTION",
    "CONNECTION_ENV_VAR",
    "READ",
    "READ_STREAM",
    "WRITE",
    "ReadOptions",
    "WriteOptions",
    "connection_config",
    "connection_env",
    "connection_fields",
    "connection_options",
]

#: The prefix of every option's name in messages.
OPTION = "jetstream option "


_TARGET = Args(
    "target",
    {
        "domain": DOMAIN.but(doc="JetStream domain of the stream; default: the connection's"),
        "apiPrefix": API_PREFIX.but(doc="JetStream API prefix of the stream (instead of domain)"),
    },
    [exclusive("domain", "apiPrefix", "give one")],
)


def _sequence_or(*words: str) -> Parser:
    """A sequence number >= 1, or one of ``words`` (``earliest``, ``latest``)."""
    number = integer(1)

    def parse(value: Any, field: str) -> str | int:
        if isinstance(value, str) and value.strip().lower() in words:
            return value.strip().lower()
        try:
            return number(value, field, text=True)
        except SpecError:
            raise SpecError(
                field, value, f"use {', '.join(repr(w) for w in words)} or a sequence number >= 1"
            ) from None

    return parse


def _time(value: Any, field: str) -> str:
    try:
        return parse_instant(value, field)
    except SpecError:
        raise SpecError(field, value, "use an RFC 3339 time with a zone, e.g. 2026-01-31T12:00:00Z") from None


def _start_before_end(values: Mapping[str, Any], prefix: str) -> None:
    start, end = values["startSeq"], values["endSeq"]
    if isinstance(start, int) and isinstance(end, int) and start > end:
        raise SpecError(
            "startSeq",
            start,
            message=f"jetstream options startSeq={start} and endSeq={end}: the start is after the end",
        )


def _window_not_empty(values: Mapping[str, Any], prefix: str) -> None:
    start, end = values["startTime"], values["endTime"]
    if start is not None and end is not None and instant(end) <= instant(start):  # type: ignore[operator]
        raise SpecError(
            f"{prefix}endTime",
            end,
            f"use a time after startTime={start!r}: the window [startTime, endTime) would be empty",
        )


def _one_stream_only(name: str, why: str) -> Rule:
    """A rule: the option ``name`` (a number: a sequence) is for a read of one stream."""

    def check(values: Mapping[str, Any], prefix: str) -> None:
        streams = values["stream"] or values["path"] or ()
        if len(streams) > 1 and values[name] is not None and values[name] not in ("earliest", "latest"):
            raise SpecError(
                f"{prefix}{name}", values[name], f"{why} ({len(streams)} streams are read: {', '.join(streams)})"
            )

    return Rule(("stream", "path", name), check, f"{name}: one stream only")


def _only(name: str, when: str, why: str) -> Rule:
    """A rule: the option ``name`` is for ``when`` reads only."""

    def check(values: Mapping[str, Any], prefix: str) -> None:
        if values[name] is not None:
            raise SpecError(name, values[name], message=f"{prefix}{name} is for {when} reads only{why}")

    return Rule((name,), check, f"{name}: {when} only")


def _min_at_most_max(values: Mapping[str, Any], prefix: str) -> None:
    low, high = values["minMessagesPerTrigger"], values["maxMessagesPerTrigger"]
    if low is not None and high is not None and low > high:
        raise SpecError(f"{prefix}minMessagesPerTrigger", low, f"use at most maxMessagesPerTrigger={high}")


#: Spark's Kafka source waits at most this long for ``minOffsetsPerTrigger``: ``maxTriggerDelay``'s default.
MAX_TRIGGER_DELAY = 15 * 60.0

_READ = Args(
    "read options",
    {
        "stream": Arg(stream_names_text, None, REFUSE, "stream to read, or several separated by commas"),
        "path": Arg(stream_names_text, None, REFUSE, "same as stream (load('NAME'))"),
        "filterSubjects": Arg(subject_text, None, REFUSE, "subject or comma-separated subjects to read (one stream)"),
        "startSeq": Arg(
            _sequence_or("earliest", "latest"), None, DEFAULT, "earliest (default), latest (streaming only) or a number"
        ),
        "startTime": Arg(_time, None, REFUSE, "RFC 3339 time: start at the first message stored then or later"),
        "endSeq": Arg(_sequence_or("latest"), None, REFUSE, "latest or a sequence number (batch only)"),
        "endTime": Arg(_time, None, REFUSE, "RFC 3339 time: end before the first message stored then (batch)"),
        "failOnOpenWindow": Arg(
            boolean, None, DEFAULT, "with endTime: true (default) fails a window messages may still reach"
        ),
        "minPartitions": Arg(integer(1), None, DEFAULT, "minimum number of Spark partitions"),
        "maxMessagesPerPartition": Arg(integer(1), None, DEFAULT, "split partitions larger than this many sequences"),
        "maxMessagesPerTrigger": Arg(integer(1), None, DEFAULT, "sequences per micro-batch at most (streaming)"),
        "minMessagesPerTrigger": Arg(
            integer(1), None, DEFAULT, "sequences a micro-batch waits for, up to maxTriggerDelay (streaming)"
        ),
        "maxTriggerDelay": Arg(
            seconds_of(positive=True), None, DEFAULT, "longest wait for minMessagesPerTrigger; default 15m"
        ),
        "failOnDataLoss": Arg(
            boolean, True, DEFAULT, "true or false: fail when sequences are gone or the stream was recreated"
        ),
        "includeHeaders": Arg(boolean, True, DEFAULT, "true or false"),
        "maxBufferedMessages": Arg(
            integer(1), PullSettings.max_buffered_messages, DEFAULT, "messages in flight per partition"
        ),
        "maxBufferedBytes": Arg(integer(1024), PullSettings.max_buffered_bytes, DEFAULT, "bytes per pull request"),
        "heartbeatSeconds": Arg(
            number(0.1), PullSettings.heartbeat, DEFAULT, "idle heartbeat interval of pull requests"
        ),
        "reader": READER,
    },
    [
        exclusive("startSeq", "startTime", "give one"),
        exclusive("endSeq", "endTime", "give one"),
        Rule(("startSeq", "endSeq"), _start_before_end),
        Rule(("startTime", "endTime"), _window_not_empty, "startTime < endTime"),
        requires("failOnOpenWindow", "endTime", "it says what a read up to endTime does: give endTime too"),
        _one_stream_only("filterSubjects", "a filter names one stream's subjects: read each stream on its own"),
        _one_stream_only("startSeq", "a sequence number names a message of one stream"),
        _one_stream_only("endSeq", "a sequence number names a message of one stream"),
    ],
)
#: A batch read's options (``spark.read``).
READ = (_READ + _TARGET + CONNECTION).ruled(
    Rule(
        ("startSeq",),
        lambda values, prefix: _latest_is_streaming(values["startSeq"], prefix),
        "startSeq latest: streaming only",
    ),
    _only("maxMessagesPerTrigger", "streaming", ""),
    _only("minMessagesPerTrigger", "streaming", ""),
    _only("maxTriggerDelay", "streaming", ""),
)


def _one_stream_streaming(values: Mapping[str, Any], prefix: str) -> None:
    streams = values["stream"] or values["path"] or ()
    if len(streams) > 1:
        raise SpecError(
            f"{prefix}stream",
            ",".join(streams),
            "a streaming read takes one stream (its offsets are one stream's sequences): start a query per stream",
        )


_AVAILABLE_NOW = ": a streaming query runs on; use Trigger.AvailableNow to stop at the data present at its start"
#: A streaming read's options (``spark.readStream``).
READ_STREAM = (_READ + _TARGET + CONNECTION).ruled(
    _only("endSeq", "batch", _AVAILABLE_NOW),
    _only("endTime", "batch", _AVAILABLE_NOW),
    Rule(("stream", "path"), _one_stream_streaming, "one stream"),
    Rule(("minMessagesPerTrigger", "maxMessagesPerTrigger"), _min_at_most_max, "min <= max per trigger"),
    requires("maxTriggerDelay", "minMessagesPerTrigger", "it bounds the wait for minMessagesPerTrigger: give both"),
)


def _latest_is_streaming(starting: Any, prefix: str) -> None:
    if starting == "latest":
        raise SpecError(
            "startSeq",
            starting,
            message=f"{prefix}startSeq='latest' is for streaming reads only: a batch read would be empty; "
            "use earliest or a sequence number",
        )


#: A write's options (``df.write``); the columns are checked against the DataFrame's.
WRITE = (
    Args(
        "write options",
        {
            "subject": Arg(delivery_subject, None, REFUSE, "subject to publish every row to"),
            "subjectColumn": Arg(
                text, None, DEFAULT, "column holding each row's subject (default: subject, if present)"
            ),
            "dataColumn": Arg(text, "data", DEFAULT, "column holding the payload (default: data)"),
            "headersColumn": Arg(text, None, DEFAULT, "column holding headers (default: headers, if present)"),
            "msgIdColumn": Arg(text, None, REFUSE, "column whose value becomes the Nats-Msg-Id header (deduplication)"),
            "expectedStream": Arg(
                stream_name, None, REFUSE, "the stream that must store the rows: the server refuses others"
            ),
            "maxInFlight": Arg(integer(1), 1000, DEFAULT, "unacknowledged publishes per task at most"),
            "fastIngest": Arg(
                boolean,
                True,
                DEFAULT,
                "true (default) or false: with one subject for every row whose stream has allow_batched "
                "(nats-server 2.14+), fast-ingest batches (one ack per flow window); false: an ack per row",
            ),
            "atomic": Arg(
                boolean,
                False,
                DEFAULT,
                "true or false (default): each task's rows as one atomic batch, all stored or none (a stream "
                "with allow_atomic, nats-server 2.12+; at most 1000 rows per task)",
            ),
        },
        [exclusive("subject", "subjectColumn", "give one")],
    )
    + _TARGET
    + CONNECTION
)


#: Kafka source options people bring along, and their JetStream counterparts.
_KAFKA_NAMES = {
    "startingoffsets": "startSeq",
    "endingoffsets": "endSeq",
    "maxoffsetspertrigger": "maxMessagesPerTrigger",
    "minoffsetspertrigger": "minMessagesPerTrigger",
    "startingtimestamp": "startTime",
    "endingtimestamp": "endTime",
    "subscribe": "filterSubjects",
    "topic": "subject",
}


def _closest(key: str, known: list[str]) -> str:
    """A hint for a mistyped option (Spark lower-cases option names before we see them)."""
    lowered = {name.lower(): name for name in known}
    hint = _KAFKA_NAMES.get(key.lower())
    if hint in known:
        return f" (did you mean {hint!r}?)"
    match = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean {lowered[match[0]]!r}?)" if match else ""


def _normalized(options: Mapping[str, str], signature: Args, what: str) -> dict[str, str]:
    """Options keyed by their canonical (camelCase) name; a retired name fails naming its replacement, an
    unknown one with a suggestion."""
    allowed = list(signature.args)
    by_lower = {name.lower(): name for name in allowed}
    unknown = {key: value for key, value in options.items() if key.lower() not in by_lower}
    signature.refuse_retired(unknown, f"spark {what}", CAMEL)
    result: dict[str, str] = {}
    for key, value in options.items():
        name = by_lower.get(key.lower())
        if name is None:
            raise JetStreamConfigError(
                f"jetstream {what}: unknown option {key!r}{_closest(key, allowed)}; known options: {', '.join(allowed)}"
            )
        if value is not None:
            result[name] = str(value)
    return result


def _api_prefix(args: Mapping[str, Any], connection: JetStreamConnectionConfig) -> str:
    """The options' domain / apiPrefix, else the connection's (as JetStreamHook does)."""
    if args["domain"] is None and args["apiPrefix"] is None:
        return api_prefix_for(connection.domain, connection.api_prefix)
    return api_prefix_for(args["domain"], args["apiPrefix"])


@dataclass(frozen=True)
class ReadOptions:
    """The validated options of a read (batch or streaming).

    ``start_seq`` is ``"earliest"``, ``"latest"`` or a number; ``start_time`` and ``end_time``
    RFC 3339 strings (the window ``[start_time, end_time)``); ``end_seq`` ``"latest"`` or a
    number. ``streams``: every stream read (a batch read may read several); ``stream`` is the first, the
    one of :meth:`for_stream`'s options. ``fail_on_open_window``: a read up to ``end_time`` fails
    while messages may still reach the window (default True). ``min_messages_per_trigger`` and
    ``max_trigger_delay`` (seconds): a micro-batch waits for that many new sequences, at most that long.
    """

    connection: JetStreamConnectionConfig
    stream: str
    api_prefix: str
    filter_subjects: tuple[str, ...]
    start_seq: str | int
    start_time: str | None
    end_seq: str | int
    min_partitions: int | None
    max_messages_per_partition: int | None
    max_messages_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    pull: PullSettings
    reader: str = "vectorised"
    streams: tuple[str, ...] = ()
    end_time: str | None = None
    fail_on_open_window: bool = True
    min_messages_per_trigger: int | None = None
    max_trigger_delay: float | None = None

    def for_stream(self, stream: str) -> ReadOptions:
        """These options for one of the streams read."""
        return dataclasses.replace(self, stream=stream, streams=(stream,))

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool = False) -> ReadOptions:
        signature = READ_STREAM if streaming else READ
        opts = _normalized(options, signature, "read")
        args = signature.check(opts, text=True, prefix=OPTION)
        streams = args["stream"] or args["path"]
        if not streams:
            raise JetStreamConfigError("jetstream option stream is missing: give the stream's name")
        heartbeat = args["heartbeatSeconds"]
        try:
            pull = PullSettings(
                max_buffered_messages=args["maxBufferedMessages"],
                max_buffered_bytes=args["maxBufferedBytes"],
                heartbeat=heartbeat,
                expires=max(PullSettings.expires, 2 * heartbeat),
            )
        except ValueError as err:
            raise JetStreamConfigError(f"jetstream pull options: {err}") from None
        connection = connection_config(opts)
        return cls(
            connection=connection,
            stream=streams[0],
            streams=streams,
            api_prefix=_api_prefix(args, connection),
            filter_subjects=args["filterSubjects"] or (),
            start_seq=args["startSeq"] or "earliest",
            start_time=args["startTime"],
            end_seq=args["endSeq"] or "latest",
            end_time=args["endTime"],
            fail_on_open_window=args["failOnOpenWindow"] is not False,
            min_partitions=args["minPartitions"],
            max_messages_per_partition=args["maxMessagesPerPartition"],
            max_messages_per_trigger=args["maxMessagesPerTrigger"],
            min_messages_per_trigger=args["minMessagesPerTrigger"],
            max_trigger_delay=(
                (args["maxTriggerDelay"] or MAX_TRIGGER_DELAY) if args["minMessagesPerTrigger"] is not None else None
            ),
            fail_on_data_loss=args["failOnDataLoss"],
            include_headers=args["includeHeaders"],
            pull=pull,
            reader=args["reader"] or default_reader(),
        )


@dataclass(frozen=True)
class WriteOptions:
    """The validated options of a write. ``atomic``: each task's rows go as one atomic batch (all stored or
    none; default False: each row acknowledged on its own). ``fast_ingest``: fast-ingest batches where the
    stream takes them (default True). ``expected_stream``: the stream that must store the rows."""

    connection: JetStreamConnectionConfig
    api_prefix: str
    subject: str | None
    subject_column: str | None
    data_column: str
    headers_column: str | None
    msg_id_column: str | None
    expected_stream: str | None
    max_in_flight: int
    atomic: bool = False
    fast_ingest: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str], columns: list[str]) -> WriteOptions:
        opts = _normalized(options, WRITE, "write")
        args = WRITE.check(opts, text=True, prefix=OPTION)
        subject, subject_column = args["subject"], args["subjectColumn"]
        if subject is None and subject_column is None:
            if "subject" not in columns:
                raise JetStreamConfigError(
                    "jetstream write: no subject: give the option subject, the option subjectColumn, or a "
                    f"column named 'subject' (columns: {', '.join(columns)})"
                )
            subject_column = "subject"
        if args["atomic"] and subject is None and args["expectedStream"] is None:
            raise JetStreamConfigError(
                f"jetstream option atomic={opts['atomic']!r}: an atomic batch goes to one stream, and each row's "
                f"subject comes from column {subject_column!r}: give the option expectedStream (the stream with "
                "allow_atomic), or the option subject, or atomic=false"
            )

        def column(name: str, value: str | None) -> str | None:
            if value is not None and value not in columns:
                raise JetStreamConfigError(
                    f"jetstream option {name}={value!r} is not a column of the DataFrame "
                    f"(columns: {', '.join(columns)})"
                )
            return value

        headers_column = args["headersColumn"] or ("headers" if "headers" in columns else None)
        connection = connection_config(opts)
        api_prefix = _api_prefix(args, connection)
        if subject is not None:
            delivery_subject(subject, f"{OPTION}subject", [api_prefix, connection.api_prefix])
        return cls(
            connection=connection,
            api_prefix=api_prefix,
            subject=subject,
            subject_column=column("subjectColumn", subject_column),
            data_column=column("dataColumn", args["dataColumn"]),  # type: ignore[arg-type]
            headers_column=column("headersColumn", headers_column),
            msg_id_column=column("msgIdColumn", args["msgIdColumn"]),
            expected_stream=args["expectedStream"],
            max_in_flight=args["maxInFlight"],
            atomic=args["atomic"],
            fast_ingest=args["fastIngest"],
        )
