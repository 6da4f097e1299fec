"""Arguments of the packaged ``stream_to_parquet`` Spark job, checked wherever they are known.

``JetStreamSparkSubmitOperator`` checks them when the DAG is parsed (values without templates) and
again once rendered, before spark-submit starts; the job checks its command line with the same
functions. Each error names the argument, the value and what is allowed.

Airflow-free and Spark-free: the operator imports it at DAG parse time, the job on the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_jetstream.core.connection.fields import validate_api_prefix, validate_domain
from airflow_provider_jetstream.core.errors import JetStreamConfigError, SpecError
from airflow_provider_jetstream.core.names import (
    subject_problem,
    validate_bucket,
    validate_key,
    validate_name,
)
from airflow_provider_jetstream.core.values import as_bool

#: Columns the output may be partitioned by.
PARTITION_COLUMNS = ("stream", "domain", "subject", "date")
#: Output file systems where a range cannot be committed exactly once: their directory rename is a
#: copy, or their rename does not refuse an existing destination.
UNSUPPORTED_SCHEMES = ("s3", "s3a", "s3n", "gs", "wasb", "wasbs")


def _spec(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    def run(value: Any, name: str) -> Any:
        try:
            return check(value, name)
        except SpecError as err:
            raise JetStreamConfigError(str(err)) from None

    return run


def check_stream(value: Any, name: str = "stream") -> str:
    return _spec(validate_name)(value, name)


def check_bucket(value: Any, name: str = "checkpoint_bucket") -> str:
    return _spec(validate_bucket)(value, name)


def check_key(value: Any, name: str = "checkpoint_key") -> str:
    return _spec(validate_key)(value, name)


def check_domain(value: Any, name: str = "domain") -> str:
    return validate_domain(value, name)


def check_api_prefix(value: Any, name: str = "api_prefix") -> str:
    return validate_api_prefix(value, name)


def check_filter_subject(value: Any, name: str = "filter_subject") -> str:
    """A subject or a comma-separated list of subjects (wildcards allowed)."""
    subjects = [s.strip() for s in value.split(",")] if isinstance(value, str) else [value]
    for subject in subjects:
        problem = subject_problem(subject, wildcards=True)
        if problem:
            raise JetStreamConfigError(
                f"{name}={value!r} is not allowed: {problem}; use a subject or a comma-separated list "
                "(e.g. 'orders.*,events.>')"
            )
    return ",".join(subjects)


def _positive(value: Any, name: str, what: str) -> int:
    number: int | None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    else:
        try:
            number = int(str(value).strip())
        except ValueError:
            number = None
    if number is None or number < 1:
        raise JetStreamConfigError(f"{name}={value!r} is not allowed: use an integer >= 1 ({what})")
    return number


def check_end_sequence(value: Any, name: str = "end_sequence") -> int:
    return _positive(value, name, "the last stream sequence to copy")


def check_min_partitions(value: Any, name: str = "min_partitions") -> int:
    return _positive(value, name, "Spark partitions to read with")


def check_starting_sequence(value: Any, name: str = "starting_sequence") -> str:
    if isinstance(value, str) and value.strip().lower() == "earliest":
        return "earliest"
    try:
        return str(_positive(value, name, ""))
    except JetStreamConfigError:
        raise JetStreamConfigError(
            f"{name}={value!r} is not allowed: use 'earliest' or a sequence number >= 1"
        ) from None


def check_partition_by(value: Any, name: str = "partition_by") -> tuple[str, ...]:
    """Partition columns: a list or a comma-separated string of ``stream, domain, subject, date``."""
    if isinstance(value, str):
        columns = tuple(c.strip() for c in value.split(",") if c.strip())
    elif isinstance(value, Sequence) and all(isinstance(c, str) for c in value):
        columns = tuple(value)
    else:
        raise JetStreamConfigError(
            f"{name}={value!r} is not allowed: give a list of columns among {', '.join(PARTITION_COLUMNS)}"
        )
    bad = [c for c in columns if c not in PARTITION_COLUMNS]
    if bad:
        raise JetStreamConfigError(f"{name}={value!r}: {bad[0]!r} is not allowed; use {', '.join(PARTITION_COLUMNS)}")
    if len(set(columns)) != len(columns):
        raise JetStreamConfigError(f"{name}={value!r} is not allowed: a column appears twice")
    return columns


def check_output(value: Any, name: str = "output_path") -> str:
    if not isinstance(value, str) or not value.strip():
        raise JetStreamConfigError(f"{name}={value!r} is not allowed: give a directory (local path or Hadoop URI)")
    scheme = urlsplit(value).scheme.lower()
    if scheme in UNSUPPORTED_SCHEMES:
        raise JetStreamConfigError(
            f"{name}={value!r} is not allowed: the {scheme}:// file system cannot commit a range exactly once (its "
            "directory rename is a copy, or its rename does not refuse an existing destination); write to HDFS, "
            "ABFS (hierarchical namespace) or a local or mounted file system"
        )
    return value


#: Argument name -> its check.
CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "stream": check_stream,
    "output_path": check_output,
    "checkpoint_bucket": check_bucket,
    "checkpoint_key": check_key,
    "checkpoint_domain": check_domain,
    "domain": check_domain,
    "api_prefix": check_api_prefix,
    "filter_subject": check_filter_subject,
    "end_sequence": check_end_sequence,
    "starting_sequence": check_starting_sequence,
    "partition_by": check_partition_by,
    "min_partitions": check_min_partitions,
    "fail_on_data_loss": lambda value, name: as_bool(name, value),
}


def check_job_arguments(values: Mapping[str, Any], skip: Callable[[Any], bool] = lambda v: False) -> None:
    """Check every given (not None, not ``skip``-ped) argument of the packaged job.

    :param values: argument name (as :data:`CHECKS` names them) -> value.
    :param skip: values to leave for later (e.g. ones that still hold a template).
    :raises JetStreamConfigError: naming the first bad argument, its value and what is allowed.
    """
    for name, value in values.items():
        if value is None or skip(value):
            continue
        CHECKS[name](value, name)
