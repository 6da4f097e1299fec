"""Options of the ``jetstream`` Spark data source: declared once (:data:`READ`, :data:`READ_STREAM`,
:data:`WRITE`), parsed and checked on the driver.

Each camelCase option is an :class:`~airflow_provider_jetstream.core.arguments.Arg` (most of them the
declarations the operators use: a stream name, a domain, an API prefix); every bad option fails before
any Spark task runs, with the option's name, the bad value and what is allowed (all of them at once),
and an unknown option with the closest known name. Connection options become a
:class:`JetStreamConnectionConfig` through ``JetStreamConnectionConfig.from_fields`` (the same
validation as the Airflow connection); when ``servers`` is not given, the connection comes from the
environment variable ``JETSTREAM_CONNECTION_SECRET`` that :class:`JetStreamSparkSubmitOperator` sets
(its name ends in ``SECRET`` so Spark redacts it).

Airflow-free: Spark drivers and executors import it.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.arguments import DEFAULT, REFUSE, Arg, Args, Rule, exclusive
from airflow_provider_jetstream.core.arguments.durations import parse_instant
from airflow_provider_jetstream.core.arguments.names import stream_name, subject_text
from airflow_provider_jetstream.core.arguments.values import Parser, boolean, integer, number, text
from airflow_provider_jetstream.core.connection.fields import api_prefix_for
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.errors import JetStreamConfigError, SpecError
from airflow_provider_jetstream.core.publish.subjects import check_publish_subject
from airflow_provider_jetstream.core.read.settings import READER, PullSettings, default_reader
from airflow_provider_jetstream.core.signatures.shared import API_PREFIX, DOMAIN

#: Environment variable holding the whole NATS connection as JSON (host, port, login, password,
#: extra); set by JetStreamSparkSubmitOperator for the driver. Spark redacts names with SECRET.
CONNECTION_ENV_VAR = "JETSTREAM_CONNECTION_SECRET"

#: Connection options: Spark option name -> (from_fields argument, extra key or None).
CONNECTION_OPTIONS: dict[str, str] = {
    "servers": "host",
    "user": "login",
    "password": "password",
    "token": "token",
    "nkeySeed": "nkey_seed",
    "credsFile": "creds_file",
    "creds": "creds",
    "tlsCaFile": "tls_ca_file",
    "tlsCertFile": "tls_cert_file",
    "tlsKeyFile": "tls_key_file",
    "tlsVerify": "tls_verify",
    "tlsHostname": "tls_hostname",
    "tlsHandshakeFirst": "tls_handshake_first",
    "connectTimeout": "connect_timeout",
}

#: The prefix of every option's name in messages.
OPTION = "jetstream option "


def _text(doc: str) -> Arg:
    return Arg(text, None, DEFAULT, doc)


#: The connection options (checked by ``JetStreamConnectionConfig.from_fields``, as an Airflow connection).
CONNECTION = Args(
    "connection options",
    {
        "servers": _text("NATS servers: host[:port] or URLs, comma-separated"),
        "user": _text("user name"),
        "password": _text("password"),
        "token": _text("authentication token"),
        "nkeySeed": _text("user NKey seed"),
        "credsFile": _text("path of a .creds file"),
        "creds": _text("content of a .creds file"),
        "tlsCaFile": _text("PEM file of the CA"),
        "tlsCertFile": _text("PEM client certificate"),
        "tlsKeyFile": _text("PEM client key"),
        "tlsVerify": _text("verify the server certificate: true or false"),
        "tlsHostname": _text("hostname expected in the server certificate"),
        "tlsHandshakeFirst": _text("TLS before the NATS INFO: true or false"),
        "connectTimeout": _text("seconds to connect"),
        "connectionEnvVar": _text(f"environment variable with the connection JSON; default {CONNECTION_ENV_VAR}"),
    },
)
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


def _starting_time(value: Any, field: str) -> str:
    try:
        return parse_instant(value, field)
    except SpecError:
        raise SpecError(field, value, "use an RFC 3339 time with a zone, e.g. 2026-01-31T12:00:00Z") from None


def _start_before_end(values: Mapping[str, Any], prefix: str) -> None:
    start, end = values["startingSequence"], values["endingSequence"]
    if isinstance(start, int) and isinstance(end, int) and start > end:
        raise SpecError(
            "startingSequence",
            start,
            message=f"jetstream options startingSequence={start} and endingSequence={end}: the start is after the end",
        )


def _only(name: str, when: str, why: str) -> Rule:
    """A rule: the option ``name`` is for ``when`` reads only."""

    def check(values: Mapping[str, Any], prefix: str) -> None:
        if values[name] is not None:
            raise SpecError(name, values[name], message=f"{prefix}{name} is for {when} reads only{why}")

    return Rule((name,), check, f"{name}: {when} only")


_READ = Args(
    "read options",
    {
        "stream": Arg(stream_name, None, REFUSE, "name of the stream to read"),
        "path": Arg(stream_name, None, REFUSE, "same as stream (load('NAME'))"),
        "filterSubject": Arg(subject_text, None, REFUSE, "subject or comma-separated subjects to read"),
        "startingSequence": Arg(
            _sequence_or("earliest", "latest"), None, DEFAULT, "earliest (default), latest (streaming only) or a number"
        ),
        "startingTime": Arg(_starting_time, None, DEFAULT, "RFC 3339 time: start at the first message stored then"),
        "endingSequence": Arg(_sequence_or("latest"), None, REFUSE, "latest or a sequence number (batch only)"),
        "minPartitions": Arg(integer(1), None, DEFAULT, "minimum number of Spark partitions"),
        "maxMessagesPerPartition": Arg(integer(1), None, DEFAULT, "split partitions larger than this many sequences"),
        "maxMessagesPerTrigger": Arg(integer(1), None, DEFAULT, "sequences per micro-batch at most (streaming)"),
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
        exclusive("startingSequence", "startingTime", "give one"),
        Rule(("startingSequence", "endingSequence"), _start_before_end),
    ],
)
#: A batch read's options (``spark.read``).
READ = (_READ + _TARGET + CONNECTION).ruled(
    Rule(
        ("startingSequence",),
        lambda values, prefix: _latest_is_streaming(values["startingSequence"], prefix),
        "startingSequence latest: streaming only",
    ),
    _only("maxMessagesPerTrigger", "streaming", ""),
)
#: A streaming read's options (``spark.readStream``).
READ_STREAM = (_READ + _TARGET + CONNECTION).ruled(
    _only(
        "endingSequence",
        "batch",
        ": a streaming query runs on; use Trigger.AvailableNow to stop at the data present at its start",
    )
)


def _latest_is_streaming(starting: Any, prefix: str) -> None:
    if starting == "latest":
        raise SpecError(
            "startingSequence",
            starting,
            message=f"{prefix}startingSequence='latest' is for streaming reads only: a batch read would be empty; "
            "use earliest or a sequence number",
        )


#: A write's options (``df.write``); the columns are checked against the DataFrame's.
WRITE = (
    Args(
        "write options",
        {
            "subject": Arg(check_publish_subject, None, REFUSE, "subject to publish every row to"),
            "subjectColumn": Arg(
                text, None, DEFAULT, "column holding each row's subject (default: subject, if present)"
            ),
            "dataColumn": Arg(text, "data", DEFAULT, "column holding the payload (default: data)"),
            "headersColumn": Arg(text, None, DEFAULT, "column holding headers (default: headers, if present)"),
            "msgIdColumn": Arg(text, None, REFUSE, "column whose value becomes the Nats-Msg-Id header (deduplication)"),
            "stream": Arg(
                stream_name, None, REFUSE, "expected stream: the server refuses rows that would land in another one"
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
    "startingoffsets": "startingSequence",
    "endingoffsets": "endingSequence",
    "maxoffsetspertrigger": "maxMessagesPerTrigger",
    "startingtimestamp": "startingTime",
    "subscribe": "filterSubject",
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


def _normalized(options: Mapping[str, str], allowed: list[str], what: str) -> dict[str, str]:
    """Options keyed by their canonical (camelCase) name; unknown names fail with a suggestion."""
    by_lower = {name.lower(): name for name in allowed}
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


def connection_fields(config: JetStreamConnectionConfig) -> dict[str, Any]:
    """The ``from_fields`` arguments that rebuild ``config`` (secrets included: never log them)."""
    from airflow_provider_jetstream.core.connection.fields import EXTRA_FIELDS

    extra = {}
    for name, spec in EXTRA_FIELDS.items():
        value = getattr(config, name)
        if value is not None and value != spec.default:
            extra[name] = value
    return {
        "conn_id": config.conn_id,
        "host": ",".join(config.servers),
        "login": config.user,
        "password": config.password,
        "extra": extra,
    }


def connection_env(config: JetStreamConnectionConfig) -> dict[str, str]:
    """The environment (one variable, ``CONNECTION_ENV_VAR``, JSON) that hands ``config`` to a Spark driver."""
    return {CONNECTION_ENV_VAR: json.dumps(connection_fields(config))}


def _fields_from_env(env_var: str) -> dict[str, Any] | None:
    raw = os.environ.get(env_var)
    if not raw:
        return None
    try:
        fields = json.loads(raw)
    except ValueError:
        raise JetStreamConfigError(f"environment variable {env_var} is not JSON connection fields") from None
    if not isinstance(fields, dict) or "host" not in fields:
        raise JetStreamConfigError(f"environment variable {env_var} must be a JSON object with at least 'host'")
    fields.setdefault("extra", {})
    fields.setdefault("conn_id", env_var)
    return fields


def connection_config(options: dict[str, str]) -> JetStreamConnectionConfig:
    """The connection: the environment variable's fields, overridden by connection options."""
    env_var = options.get("connectionEnvVar", CONNECTION_ENV_VAR)
    fields = _fields_from_env(env_var)
    if fields is None:
        if "servers" not in options:
            raise JetStreamConfigError(
                f"jetstream option servers is missing: give servers (e.g. nats://host:4222) or set the "
                f"environment variable {env_var} (JetStreamSparkSubmitOperator does)"
            )
        fields = {"conn_id": "spark-options", "host": None, "extra": {}}
    for option, target in CONNECTION_OPTIONS.items():
        if option not in options:
            continue
        if target in ("host", "login", "password"):
            fields[target] = options[option]
        else:
            fields["extra"][target] = options[option]
    if "servers" in options:
        fields["conn_id"] = "spark-options"
    try:
        return JetStreamConnectionConfig.from_fields(
            conn_id=fields["conn_id"],
            host=fields.get("host"),
            port=fields.get("port"),
            login=fields.get("login"),
            password=fields.get("password"),
            extra=dict(fields.get("extra") or {}),
        )
    except JetStreamConfigError as err:
        # The connection names its own fields (host, tls_verify): say which options set them.
        named = [
            f"{option} ({target})"
            for option, target in CONNECTION_OPTIONS.items()
            if option in options and re.search(rf"\b{target}\b", str(err))
        ]
        set_by = f" (set by jetstream option {', '.join(named)})" if named else ""
        raise JetStreamConfigError(f"jetstream connection options: {err}{set_by}") from None


def _api_prefix(args: Mapping[str, Any], connection: JetStreamConnectionConfig) -> str:
    """The options' domain / apiPrefix, else the connection's (as JetStreamHook does)."""
    if args["domain"] is None and args["apiPrefix"] is None:
        return api_prefix_for(connection.domain, connection.api_prefix)
    return api_prefix_for(args["domain"], args["apiPrefix"])


@dataclass(frozen=True)
class ReadOptions:
    """The validated options of a read (batch or streaming).

    ``starting_sequence`` is ``"earliest"``, ``"latest"`` or a number; ``starting_time`` an
    RFC 3339 string; ``ending_sequence`` ``"latest"`` or a number.
    """

    connection: JetStreamConnectionConfig
    stream: str
    api_prefix: str
    filter_subjects: tuple[str, ...]
    starting_sequence: str | int
    starting_time: str | None
    ending_sequence: str | int
    min_partitions: int | None
    max_messages_per_partition: int | None
    max_messages_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    pull: PullSettings
    reader: str = "vectorised"

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool = False) -> ReadOptions:
        signature = READ_STREAM if streaming else READ
        opts = _normalized(options, list(signature.args), "read")
        args = signature.check(opts, text=True, prefix=OPTION)
        stream = args["stream"] or args["path"]
        if not stream:
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
            stream=stream,
            api_prefix=_api_prefix(args, connection),
            filter_subjects=args["filterSubject"] or (),
            starting_sequence=args["startingSequence"] or "earliest",
            starting_time=args["startingTime"],
            ending_sequence=args["endingSequence"] or "latest",
            min_partitions=args["minPartitions"],
            max_messages_per_partition=args["maxMessagesPerPartition"],
            max_messages_per_trigger=args["maxMessagesPerTrigger"],
            fail_on_data_loss=args["failOnDataLoss"],
            include_headers=args["includeHeaders"],
            pull=pull,
            reader=args["reader"] or default_reader(),
        )


@dataclass(frozen=True)
class WriteOptions:
    """The validated options of a write. ``atomic``: each task's rows go as one atomic batch (all stored or
    none; default False: each row acknowledged on its own). ``fast_ingest``: fast-ingest batches where the
    stream takes them (default True)."""

    connection: JetStreamConnectionConfig
    api_prefix: str
    subject: str | None
    subject_column: str | None
    data_column: str
    headers_column: str | None
    msg_id_column: str | None
    stream: str | None
    max_in_flight: int
    atomic: bool = False
    fast_ingest: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str], columns: list[str]) -> WriteOptions:
        opts = _normalized(options, list(WRITE.args), "write")
        args = WRITE.check(opts, text=True, prefix=OPTION)
        subject, subject_column = args["subject"], args["subjectColumn"]
        if subject is None and subject_column is None:
            if "subject" not in columns:
                raise JetStreamConfigError(
                    "jetstream write: no subject: give the option subject, the option subjectColumn, or a "
                    f"column named 'subject' (columns: {', '.join(columns)})"
                )
            subject_column = "subject"
        if args["atomic"] and subject is None and args["stream"] is None:
            raise JetStreamConfigError(
                f"jetstream option atomic={opts['atomic']!r}: an atomic batch goes to one stream, and each row's "
                f"subject comes from column {subject_column!r}: give the option stream (the stream with "
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
            check_publish_subject(subject, f"{OPTION}subject", [api_prefix, connection.api_prefix])
        return cls(
            connection=connection,
            api_prefix=api_prefix,
            subject=subject,
            subject_column=column("subjectColumn", subject_column),
            data_column=column("dataColumn", args["dataColumn"]),  # type: ignore[arg-type]
            headers_column=column("headersColumn", headers_column),
            msg_id_column=column("msgIdColumn", args["msgIdColumn"]),
            stream=args["stream"],
            max_in_flight=args["maxInFlight"],
            atomic=args["atomic"],
            fast_ingest=args["fastIngest"],
        )
