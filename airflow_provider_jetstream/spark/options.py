"""Options of the ``jetstream`` Spark data source: parsed and checked on the driver.

Every bad option fails before any Spark task runs, with the option's name, the bad value and
what is allowed. Connection options become a :class:`JetStreamConnectionConfig` through
``JetStreamConnectionConfig.from_fields`` (the same validation as the Airflow connection); when
``servers`` is not given, the connection comes from the environment variable
``JETSTREAM_CONNECTION_SECRET`` that :class:`JetStreamSparkSubmitOperator` sets (its name ends in
``SECRET`` so Spark redacts it).

Airflow-free: Spark drivers and executors import it.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_jetstream.core.connection.fields import api_prefix_for, validate_api_prefix, validate_domain
from airflow_provider_jetstream.core.connection.settings import JetStreamConnectionConfig
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.publish.subjects import check_publish_subject
from airflow_provider_jetstream.core.read.settings import READERS, PullSettings, default_reader
from airflow_provider_jetstream.core.values import as_bool, as_number

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

READ_OPTIONS = {
    "stream": "name of the stream to read",
    "path": "same as stream (load('NAME'))",
    "domain": "JetStream domain of the stream",
    "apiPrefix": "JetStream API prefix of the stream (instead of domain)",
    "filterSubject": "subject or comma-separated subjects to read",
    "startingSequence": "earliest, latest (streaming only) or a sequence number",
    "startingTime": "RFC 3339 time: start at the first message stored at or after it",
    "endingSequence": "latest or a sequence number (batch only)",
    "minPartitions": "minimum number of Spark partitions",
    "maxMessagesPerPartition": "split partitions larger than this many sequences",
    "maxMessagesPerTrigger": "sequences per micro-batch at most (streaming)",
    "failOnDataLoss": "true or false",
    "includeHeaders": "true or false",
    "maxBufferedMessages": "messages in flight per partition",
    "maxBufferedBytes": "bytes per pull request",
    "heartbeatSeconds": "idle heartbeat interval of pull requests",
    "reader": "vectorised (default: frames parsed in bulk into Arrow) or nats-py",
    "connectionEnvVar": "environment variable with the connection JSON",
}
WRITE_OPTIONS = {
    "subject": "subject to publish every row to",
    "subjectColumn": "column holding each row's subject (default: subject, if present)",
    "dataColumn": "column holding the payload (default: data)",
    "headersColumn": "column holding headers (default: headers, if present)",
    "msgIdColumn": "column whose value becomes the Nats-Msg-Id header (deduplication)",
    "stream": "expected stream: the server refuses rows that would land in another one",
    "maxInFlight": "unacknowledged publishes per task at most",
    "domain": "JetStream domain whose streams must store the rows (every ack is checked)",
    "apiPrefix": "JetStream API prefix of the target (instead of domain); subjects under it are refused",
    "connectionEnvVar": "environment variable with the connection JSON",
}


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


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    return as_bool(f"jetstream option {name}", options[name]) if name in options else default


def _int(options: dict[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    if name not in options:
        return default
    return int(as_number(f"jetstream option {name}", options[name], minimum=minimum, integer=True))


def _float(options: dict[str, str], name: str, default: float, minimum: float) -> float:
    if name not in options:
        return default
    return as_number(f"jetstream option {name}", options[name], minimum=minimum)


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


def connection_env(config: JetStreamConnectionConfig, env_var: str = CONNECTION_ENV_VAR) -> dict[str, str]:
    """The environment (one variable, JSON) that hands ``config`` to a Spark driver."""
    return {env_var: json.dumps(connection_fields(config))}


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
        raise JetStreamConfigError(f"jetstream connection options: {err}") from None


def _api_prefix(options: dict[str, str], connection: JetStreamConnectionConfig) -> str:
    """The options' domain / apiPrefix, else the connection's (as JetStreamHook does)."""
    domain = options.get("domain")
    api_prefix = options.get("apiPrefix")
    if domain is None and api_prefix is None:
        return api_prefix_for(connection.domain, connection.api_prefix)
    if domain is not None:
        try:
            validate_domain(domain)
        except JetStreamConfigError:
            raise JetStreamConfigError(
                f"jetstream option domain={domain!r} is not a JetStream domain name: use a name without "
                "whitespace, '.', '*', '>' (e.g. 'hub', 'leaf')"
            ) from None
    if api_prefix is not None:
        try:
            validate_api_prefix(api_prefix)
        except JetStreamConfigError:
            raise JetStreamConfigError(
                f"jetstream option apiPrefix={api_prefix!r} is not an API prefix: use e.g. '$JS.hub.API'"
            ) from None
    if domain and api_prefix:
        raise JetStreamConfigError(
            f"jetstream options domain={domain!r} and apiPrefix={api_prefix!r} were both given: give one"
        )
    return api_prefix_for(domain, api_prefix)


_STREAM_FORBIDDEN = set(" \t\r\n.*>/\\")


def _stream(options: dict[str, str]) -> str:
    stream = options.get("stream") or options.get("path")
    if not stream:
        raise JetStreamConfigError("jetstream option stream is missing: give the stream's name")
    if set(stream) & _STREAM_FORBIDDEN:
        raise JetStreamConfigError(
            f"jetstream option stream={stream!r} is not a stream name: no whitespace, '.', '*', '>' or slashes"
        )
    return stream


def _subjects(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    subjects = tuple(s.strip() for s in value.split(","))
    for subject in subjects:
        tokens = subject.split(".")
        if not subject or any(not t or " " in t for t in tokens) or (">" in tokens and tokens[-1] != ">"):
            raise JetStreamConfigError(
                f"jetstream option filterSubject={value!r} is not allowed: use a subject or a "
                "comma-separated list of subjects (wildcards * and a final > allowed), e.g. 'orders.*,events.>'"
            )
    return subjects


def _reader(options: dict[str, str]) -> str:
    value = options.get("reader", default_reader()).strip().lower()
    if value not in READERS:
        raise JetStreamConfigError(
            f"jetstream option reader={options['reader']!r} is not allowed: use {' or '.join(READERS)}"
        )
    return value


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
        allowed = list(READ_OPTIONS) + list(CONNECTION_OPTIONS)
        opts = _normalized(options, allowed, "read")
        starting: str | int = "earliest"
        if "startingSequence" in opts:
            raw = opts["startingSequence"].strip().lower()
            starting = raw if raw in ("earliest", "latest") else (_int(opts, "startingSequence", None) or 0)
            if raw == "latest" and not streaming:
                raise JetStreamConfigError(
                    "jetstream option startingSequence='latest' is for streaming reads only: a batch read "
                    "would be empty; use earliest or a sequence number"
                )
        if "startingSequence" in opts and "startingTime" in opts:
            raise JetStreamConfigError(
                f"jetstream options startingSequence={opts['startingSequence']!r} and "
                f"startingTime={opts['startingTime']!r} were both given: give one"
            )
        starting_time = None
        if "startingTime" in opts:
            starting_time = opts["startingTime"].strip()
            try:
                parsed = dt.datetime.fromisoformat(starting_time.replace("Z", "+00:00"))
            except ValueError:
                parsed = None
            if parsed is None or parsed.tzinfo is None:
                raise JetStreamConfigError(
                    f"jetstream option startingTime={opts['startingTime']!r} is not allowed: use an RFC 3339 "
                    "time with a zone, e.g. 2026-01-31T12:00:00Z"
                )
        ending: str | int = "latest"
        if "endingSequence" in opts:
            if streaming:
                raise JetStreamConfigError(
                    "jetstream option endingSequence is for batch reads only: a streaming query runs on; "
                    "use Trigger.AvailableNow to stop at the data present at its start"
                )
            raw = opts["endingSequence"].strip().lower()
            ending = "latest" if raw == "latest" else (_int(opts, "endingSequence", None) or 0)
        if isinstance(starting, int) and isinstance(ending, int) and starting > ending:
            raise JetStreamConfigError(
                f"jetstream options startingSequence={starting} and endingSequence={ending}: the start is after the end"
            )
        if "maxMessagesPerTrigger" in opts and not streaming:
            raise JetStreamConfigError("jetstream option maxMessagesPerTrigger is for streaming reads only")
        try:
            pull = PullSettings(
                max_buffered_messages=_int(opts, "maxBufferedMessages", PullSettings.max_buffered_messages) or 1,
                max_buffered_bytes=_int(opts, "maxBufferedBytes", PullSettings.max_buffered_bytes, 1024) or 1,
                heartbeat=_float(opts, "heartbeatSeconds", PullSettings.heartbeat, 0.1),
                expires=max(PullSettings.expires, 2 * _float(opts, "heartbeatSeconds", PullSettings.heartbeat, 0.1)),
            )
        except ValueError as err:
            raise JetStreamConfigError(f"jetstream pull options: {err}") from None
        connection = connection_config(opts)
        return cls(
            connection=connection,
            stream=_stream(opts),
            api_prefix=_api_prefix(opts, connection),
            filter_subjects=_subjects(opts.get("filterSubject")),
            starting_sequence=starting,
            starting_time=starting_time,
            ending_sequence=ending,
            min_partitions=_int(opts, "minPartitions", None),
            max_messages_per_partition=_int(opts, "maxMessagesPerPartition", None),
            max_messages_per_trigger=_int(opts, "maxMessagesPerTrigger", None),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            include_headers=_bool(opts, "includeHeaders", True),
            pull=pull,
            reader=_reader(opts),
        )


@dataclass(frozen=True)
class WriteOptions:
    """The validated options of a write."""

    connection: JetStreamConnectionConfig
    api_prefix: str
    subject: str | None
    subject_column: str | None
    data_column: str
    headers_column: str | None
    msg_id_column: str | None
    stream: str | None
    max_in_flight: int

    @classmethod
    def parse(cls, options: Mapping[str, str], columns: list[str]) -> WriteOptions:
        allowed = list(WRITE_OPTIONS) + list(CONNECTION_OPTIONS)
        opts = _normalized(options, allowed, "write")
        subject = opts.get("subject")
        subject_column = opts.get("subjectColumn")
        if subject and subject_column:
            raise JetStreamConfigError(
                f"jetstream options subject={subject!r} and subjectColumn={subject_column!r} were both given: give one"
            )
        if subject is None and subject_column is None:
            if "subject" not in columns:
                raise JetStreamConfigError(
                    "jetstream write: no subject: give the option subject, the option subjectColumn, or a "
                    f"column named 'subject' (columns: {', '.join(columns)})"
                )
            subject_column = "subject"

        def column(name: str, value: str | None) -> str | None:
            if value is not None and value not in columns:
                raise JetStreamConfigError(
                    f"jetstream option {name}={value!r} is not a column of the DataFrame "
                    f"(columns: {', '.join(columns)})"
                )
            return value

        data_column = opts.get("dataColumn", "data")
        if data_column not in columns:
            raise JetStreamConfigError(
                f"jetstream option dataColumn={data_column!r} is not a column of the DataFrame "
                f"(columns: {', '.join(columns)})"
            )
        headers_column = opts.get("headersColumn") or ("headers" if "headers" in columns else None)
        stream = opts.get("stream")
        if stream is not None:
            _stream({"stream": stream})
        connection = connection_config(opts)
        api_prefix = _api_prefix(opts, connection)
        if subject is not None:
            check_publish_subject(subject, "jetstream option subject", [api_prefix, connection.api_prefix])
        return cls(
            connection=connection,
            api_prefix=api_prefix,
            subject=subject,
            subject_column=column("subjectColumn", subject_column),
            data_column=data_column,
            headers_column=column("headersColumn", headers_column),
            msg_id_column=column("msgIdColumn", opts.get("msgIdColumn")),
            stream=stream,
            max_in_flight=_int(opts, "maxInFlight", 1000) or 1000,
        )
