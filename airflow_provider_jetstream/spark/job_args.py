"""Arguments of the packaged ``stream_to_parquet`` Spark job, declared once: :data:`JOB`.

``JetStreamSparkSubmitOperator`` checks them when the DAG is parsed (values without templates) and
again once rendered, before spark-submit starts (:data:`SUBMIT`: the job's tuning grouped in
:class:`SparkJobOptions`); the job checks its command line (:data:`COMMAND_LINE`, the same declarations
under their ``--flag`` names, the glossary's words in kebab-case: ``start_seq`` is ``--start-seq``). Each
error names the argument, the value and what is allowed; a retired flag or argument is refused naming its
replacement. They become a command line, so their text forms (``"5"``, ``"true"``) are accepted.

Airflow-free: the operator imports it at DAG parse time (with the ``spark`` extra), the job on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_jetstream.core.arguments import DEFAULT, REFUSE, REQUIRED, VALUE, Arg, Args, Rule, exclusive
from airflow_provider_jetstream.core.arguments.durations import INSTANT_HELP, instant, parse_instant
from airflow_provider_jetstream.core.arguments.names import (
    bucket_name,
    connection_id,
    kv_key,
    stream_name,
    subject_text,
)
from airflow_provider_jetstream.core.arguments.options import Options, options_arg
from airflow_provider_jetstream.core.arguments.retired import FLAG, flag
from airflow_provider_jetstream.core.arguments.values import boolean, integer, non_empty_text, optional
from airflow_provider_jetstream.core.errors import SpecError
from airflow_provider_jetstream.core.read.settings import READER
from airflow_provider_jetstream.core.signatures.shared import API_PREFIX, CONN_ID, DOMAIN, ONE_TARGET
from airflow_provider_jetstream.spark.options import CONNECTION_ENV_VAR

#: Columns the output may be partitioned by.
PARTITION_COLUMNS = ("stream", "domain", "subject", "date")
#: Output file systems where a range cannot be committed exactly once: their directory rename is a
#: copy, or their rename does not refuse an existing destination.
UNSUPPORTED_SCHEMES = ("s3", "s3a", "s3n", "gs", "wasb", "wasbs")


def output_directory(value: Any, field: str) -> str:
    """A directory (local path or Hadoop URI) on a file system that can commit a range exactly once."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field, value, "give a directory (local path or Hadoop URI)")
    scheme = urlsplit(value).scheme.lower()
    if scheme in UNSUPPORTED_SCHEMES:
        raise SpecError(
            field,
            value,
            f"the {scheme}:// file system cannot commit a range exactly once (its directory rename is a copy, or "
            "its rename does not refuse an existing destination); write to HDFS, ABFS (hierarchical namespace) or "
            "a local or mounted file system",
        )
    return value


def partition_columns(value: Any, field: str) -> tuple[str, ...]:
    """Partition columns: a list or a comma-separated string of ``stream, domain, subject, date``."""
    if isinstance(value, str):
        columns = tuple(c.strip() for c in value.split(",") if c.strip())
    elif isinstance(value, Sequence) and all(isinstance(c, str) for c in value):
        columns = tuple(value)
    else:
        raise SpecError(field, value, f"give a list of columns among {', '.join(PARTITION_COLUMNS)}")
    bad = [c for c in columns if c not in PARTITION_COLUMNS]
    if bad:
        raise SpecError(
            field,
            value,
            message=f"{field}={value!r}: {bad[0]!r} is not allowed; use {', '.join(PARTITION_COLUMNS)}",
        )
    if len(set(columns)) != len(columns):
        raise SpecError(field, value, "a column appears twice")
    return columns


_SEQUENCE = integer(1)


def start_position(value: Any, field: str) -> str:
    """``earliest`` or a sequence number >= 1 (as the command line's text)."""
    if isinstance(value, str) and value.strip().lower() == "earliest":
        return "earliest"
    try:
        return str(_SEQUENCE(value, field, text=True))
    except SpecError:
        raise SpecError(field, value, "use 'earliest' or a sequence number >= 1") from None


def time_text(value: Any, field: str) -> str:
    """An instant (RFC 3339 text with a zone, or a timezone-aware datetime) as the command line's RFC 3339 UTC text."""
    try:
        return parse_instant(value, field)
    except SpecError:
        raise SpecError(field, value, f"use {INSTANT_HELP}") from None


def _window_not_empty(values: Mapping[str, Any], prefix: str) -> None:
    start, end = values["start_time"], values["end_time"]
    if start is not None and end is not None and instant(end) <= instant(start):  # type: ignore[operator]
        raise SpecError(f"{prefix}end_time", end, f"use a time after start_time={start!r}: the window would be empty")


def _subjects(value: Any, field: str) -> str:
    return ",".join(subject_text(value, field))


def _starts_before_the_end(values: Mapping[str, Any], prefix: str) -> None:
    start, end = values["start_seq"], values["end_seq"]
    if start not in (None, "earliest") and end is not None and int(start) > end:
        raise SpecError(f"{prefix}start_seq", start, f"use at most end_seq={end}: the range would be empty")


#: The packaged job's arguments (as the operator names them).
JOB = Args(
    "stream_to_parquet",
    {
        "stream": Arg(stream_name, REQUIRED, VALUE, "stream to read", templated=True),
        "output_path": Arg(output_directory, REQUIRED, VALUE, "Parquet output directory", templated=True),
        "checkpoint_bucket": Arg(bucket_name, REQUIRED, VALUE, "KV bucket of the checkpoint", templated=True),
        "checkpoint_key": Arg(kv_key, None, REFUSE, "KV key; default stream_to_parquet.<stream>", templated=True),
        "checkpoint_domain": DOMAIN.but(doc="JetStream domain of the KV bucket; default: the connection's"),
        "checkpoint_replicas": Arg(
            integer(1, 5, " (copies of the checkpoint bucket)"),
            None,
            DEFAULT,
            "replicas of the checkpoint bucket when the job creates it; default: the cluster's size up to 3 "
            "(1 on a single server)",
        ),
        "domain": DOMAIN.but(doc="JetStream domain of the stream; default: the connection's"),
        "api_prefix": API_PREFIX.but(doc="JetStream API prefix of the stream, instead of domain"),
        "filter_subjects": Arg(
            _subjects, None, REFUSE, "subject or comma list of subjects; default all", templated=True
        ),
        "end_seq": Arg(
            integer(1, hint=" (the last stream sequence to copy)"),
            None,
            REFUSE,
            "last sequence to copy; default: the stream's last at the start",
            templated=True,
        ),
        "start_seq": Arg(start_position, None, REFUSE, "first run only: 'earliest' (default) or a number"),
        "start_time": Arg(
            time_text,
            None,
            REFUSE,
            "first run only: start at the first message stored at or after this time (RFC 3339 with a zone)",
            templated=True,
        ),
        "end_time": Arg(
            time_text,
            None,
            REFUSE,
            "copy only messages stored before this time (RFC 3339 with a zone); the run fails while messages may "
            "still reach the window, after copying what is stored",
            templated=True,
        ),
        "min_partitions": Arg(
            integer(1, hint=" (Spark partitions to read with)"), None, DEFAULT, "default: Spark's default parallelism"
        ),
        "partition_by": Arg(partition_columns, ("date",), DEFAULT, "Parquet partition columns; default ('date',)"),
        "fail_on_data_loss": Arg(
            boolean,
            True,
            DEFAULT,
            "fail when sequences are gone, or the stream was recreated since the checkpoint; default True",
        ),
    },
    [
        ONE_TARGET,
        Rule(("start_seq", "end_seq"), _starts_before_the_end, "start_seq <= end_seq"),
        exclusive("start_seq", "start_time", "give one"),
        exclusive("end_seq", "end_time", "give one"),
        Rule(("start_time", "end_time"), _window_not_empty, "start_time < end_time"),
    ],
)


def servers_without_credentials(value: Any, field: str) -> str:
    """NATS servers (``host[:port]`` or URLs, comma-separated) that hold no password: a command line is
    visible to every user of the machine, so credentials go in the connection's environment variable."""
    text = non_empty_text(value, field)
    for server in text.split(","):
        server = server.strip()
        try:
            password = urlsplit(server if "://" in server else f"nats://{server}").password
        except ValueError:
            raise SpecError(field, server, "use host[:port] or URLs, comma-separated (e.g. 'hub-1:4222')") from None
        if password is not None:
            raise SpecError(
                field, "***", f"give servers without credentials: pass them in ${CONNECTION_ENV_VAR} instead"
            )
    return text


#: The names of the job's command-line flags, by argument: the glossary's words in kebab-case.
FLAGS = {name: flag(name) for name in JOB.args}
#: :data:`JOB` under the command line's flag names (``--partition-by``), as the job checks ``sys.argv``,
#: and the flags only the command line has (the operator hands the connection over in the environment).
COMMAND_LINE = JOB.renamed(**FLAGS) + Args(
    "stream_to_parquet command line",
    {
        "--reader": READER,
        "--servers": Arg(
            servers_without_credentials,
            None,
            DEFAULT,
            f"NATS servers without credentials; default: the connection in ${CONNECTION_ENV_VAR}",
        ),
    },
)


def refuse_retired_flags(argv: list[str]) -> None:
    """Refuse a retired flag (``--output``, ``--filter-subject``...) naming its replacement, before argparse would
    call it unrecognized (each flag's value as given: ``--flag=value`` or the next word)."""
    given: dict[str, Any] = {}
    for index, word in enumerate(argv):
        if word.startswith("--"):
            name, _, value = word.partition("=")
            given[name] = value if "=" in word else (argv[index + 1] if index + 1 < len(argv) else None)
    unknown = {name: value for name, value in given.items() if name not in COMMAND_LINE.args}
    COMMAND_LINE.refuse_retired(unknown, "stream_to_parquet", FLAG)


#: The job's arguments the operator takes in its options (:class:`SparkJobOptions`): how the copy is kept and laid out.
JOB_TUNING = ("checkpoint_key", "checkpoint_domain", "checkpoint_replicas", "partition_by", "min_partitions")
JOB_TUNING += ("fail_on_data_loss",)


@Options.declare
@dataclass
class SparkJobOptions(Options):
    """Options of ``JetStreamSparkSubmitOperator``: the packaged job's tuning, and the master without a Spark
    connection. Each None: the job's default.

    :param checkpoint_key: the checkpoint's KV key. Default ``stream_to_parquet.<stream>``.
    :param checkpoint_domain: the JetStream domain of the checkpoint's bucket. Default: the connection's.
    :param checkpoint_replicas: replicas of the checkpoint bucket when the job creates it (an existing bucket keeps
        its own). Default: the cluster's size up to 3 (1 on a single server).
    :param partition_by: Parquet partition columns among ``stream``, ``domain``, ``subject``, ``date``. Default
        ``("date",)``.
    :param min_partitions: Spark partitions to read with. Default: Spark's default parallelism.
    :param fail_on_data_loss: fail when sequences of the range are gone, or when the stream was deleted and
        created again since the checkpoint (False: skip the gone ones; copy a recreated stream from its first
        sequence). Default True.
    :param local_master: the master when there is no ``spark_conn_id``. Default ``local[*]``.
    """

    arguments = Args(
        "spark job options",
        {
            **{name: JOB.args[name].but(default=None) for name in JOB_TUNING},
            "local_master": Arg(
                non_empty_text, "local[*]", VALUE, "master when spark_conn_id is None; default 'local[*]'"
            ),
        },
    )

    checkpoint_key: str | None = None
    checkpoint_domain: str | None = None
    checkpoint_replicas: int | None = None
    partition_by: Sequence[str] | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool | None = None
    local_master: str = "local[*]"


def _given(values: Mapping[str, Any]) -> dict[str, Any]:
    """The job's arguments among the operator's checked values (its tuning read from ``options``)."""
    options = values["options"]
    return {name: getattr(options, name) if name in JOB_TUNING else values[name] for name in JOB.args}


def _packaged_job_needs(values: Mapping[str, Any], prefix: str) -> None:
    if values["application"] is None:
        missing = [name for name in ("stream", "output_path", "checkpoint_bucket") if values[name] is None]
        if missing:
            raise SpecError(
                missing[0],
                None,
                message=f"JetStreamSparkSubmitOperator: {', '.join(missing)} missing: the packaged stream_to_parquet "
                "job needs stream, output_path and checkpoint_bucket (or give your own application)",
            )


def _own_application_takes_none(values: Mapping[str, Any], prefix: str) -> None:
    application = values["application"]
    given = _given(values)
    ignored = [name for name in JOB.args if given[name] is not None]
    if application is not None and ignored:
        raise SpecError(
            ignored[0],
            given[ignored[0]],
            message=f"JetStreamSparkSubmitOperator: {', '.join(ignored)} are arguments of the packaged "
            f"stream_to_parquet job; with application={application!r} they would be ignored: pass your job's own "
            "arguments in application_args",
        )


#: ``JetStreamSparkSubmitOperator``'s arguments: the job's (each None: the job's default; its tuning in
#: :class:`SparkJobOptions`) and where it runs.
SUBMIT = Args(
    "spark submit",
    {
        "jetstream_conn_id": CONN_ID,
        **{name: arg.but(default=None) for name, arg in JOB.args.items() if name not in JOB_TUNING},
        "application": Arg(
            optional(non_empty_text), None, DEFAULT, "another spark-submit application instead of the packaged job"
        ),
        "spark_conn_id": Arg(
            optional(connection_id), None, DEFAULT, "Airflow Spark connection; default None: a local master"
        ),
        "options": options_arg(SparkJobOptions, "SparkJobOptions or a dict of its fields; default: every default"),
    },
    [
        *JOB.rules,
        Rule(("application", "stream", "output_path", "checkpoint_bucket"), _packaged_job_needs, "the job's needs"),
        Rule(
            ("application", *(n for n in JOB.args if n not in JOB_TUNING), "options"),
            _own_application_takes_none,
            "no job arguments with an application",
        ),
    ],
)


def job_arguments(values: Mapping[str, Any]) -> dict[str, Any]:
    """The packaged job's arguments from the operator's checked values (each None: the job's default)."""
    return _given(values)


def job_command_line(values: Mapping[str, Any]) -> list[str]:
    """The packaged job's command line from the operator's checked values: names and paths only, never a
    credential. Every argument given, and the partitioning and data-loss rule always (the job's defaults when not
    given), so the command line says how the output is laid out. One ``--flag=value`` each: a value that starts
    with ``-`` is never taken for a flag."""
    given = job_arguments(values)
    for name in ("partition_by", "fail_on_data_loss"):
        if given[name] is None:
            given[name] = JOB.args[name].default_value(name)
    command: list[str] = []
    for name, value in given.items():
        if value is None:
            continue
        if name == "partition_by":
            value = ",".join(value)
        elif name == "fail_on_data_loss":
            value = "true" if value else "false"
        command.append(f"{FLAGS[name]}={str(value).strip()}")
    return command
