"""``JetStreamSparkSubmitOperator``: spark-submit a JetStream job with the NATS connection kept secret.

By default it runs the packaged job :mod:`airflow_provider_jetstream.spark.jobs.stream_to_parquet`
(a stream copied to Parquet incrementally, exactly once). The NATS connection reaches the Spark
driver in one environment variable, ``JETSTREAM_CONNECTION_SECRET`` (JSON), set on the
spark-submit process only: never on its command line (visible in ``ps`` and in the logged
command), never in logs; Spark redacts variables whose names contain ``SECRET``. The driver
resolves the connection and ships it to the executors inside the data source's read tasks.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowOptionalProviderFeatureException

from airflow_provider_jetstream.assets.lineage import OperatorLineageMixin, path_location
from airflow_provider_jetstream.core.errors import JetStreamConfigError
from airflow_provider_jetstream.core.values import as_bool
from airflow_provider_jetstream.hooks.jetstream import JetStreamHook
from airflow_provider_jetstream.operators.base import FailFastOnRefusal, stream_locations
from airflow_provider_jetstream.utils.templates import is_resolved_at_run_time

try:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_jetstream.spark.job_args import check_job_arguments, check_partition_by
except ImportError as err:  # the optional [spark] extra: the Spark provider, pyspark and pyarrow
    raise AirflowOptionalProviderFeatureException(
        f"JetStreamSparkSubmitOperator needs the Spark provider, pyspark and pyarrow ({err}): "
        "install 'airflow-provider-jetstream[spark]'"
    ) from err

#: A line of spark-submit output that states an error: a log record at level ERROR (the packaged
#: job logs its failure so), a Python exception line (``pkg.SomeError: ...``) or a JVM one.
ERROR_LINE = re.compile(
    r"(?:^|\s)ERROR\s+[\w.$]+:\s"
    r"|^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::\s|$)"
    r"|^Exception in thread "
)

#: The packaged spark-submit job (its file, as spark-submit takes it).
PACKAGED_JOB = str(Path(__file__).resolve().parents[1] / "spark" / "jobs" / "stream_to_parquet.py")
DEFAULT_LOCAL_MASTER = "local[*]"
#: The arguments ``SparkSubmitHook`` takes (``SparkSubmitOperator`` takes each of them too).
_HOOK_PARAMETERS = frozenset(inspect.signature(SparkSubmitHook.__init__).parameters) - {"self"}


class JetStreamSparkSubmitHook(SparkSubmitHook):
    """``SparkSubmitHook`` that adds secret environment variables to the spark-submit process only,
    runs the driver there (client mode), and never falls back to yarn silently.

    It overrides public methods only: ``get_connection`` (a local master for ``conn_id=None``; a
    named connection that cannot be loaded fails) and ``submit`` (the spark-submit process's
    environment, and the job's own error line in a failure's exception). The error line is read
    from the output the hook logs line by line, through ``log``.

    :param secret_env: variables for the spark-submit process (and so the driver); not logged.
    :param local_master: master used when ``conn_id`` is None. Default ``local[*]``.
    :param env_vars: variables for the spark-submit process too (in client mode, the driver's).
    :param kwargs: every other ``SparkSubmitHook`` argument.
    """

    def __init__(
        self,
        *,
        secret_env: dict[str, str],
        local_master: str = DEFAULT_LOCAL_MASTER,
        env_vars: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._secret_env = dict(secret_env)
        self._local_master = local_master
        # The driver runs in the spark-submit process (cluster mode is refused below): every variable
        # goes to that process's environment, none to a --conf on the command line.
        self._process_env = {key: str(value) for key, value in (env_vars or {}).items()}
        self._spark_connection: Any = None
        self._output_watch: _ErrorLineWatch | None = None
        super().__init__(**kwargs)
        deploy_mode = (
            kwargs.get("deploy_mode")
            or (self._spark_connection.extra_dejson.get("deploy-mode") if self._spark_connection else None)
            or (kwargs.get("conf") or {}).get("spark.submit.deployMode")
        )
        if deploy_mode == "cluster":
            raise JetStreamConfigError(
                "JetStreamSparkSubmitOperator: deploy_mode 'cluster' is not supported: the driver would run "
                "elsewhere, without the connection's environment; use client mode"
            )

    def get_connection(self, conn_id: str | None) -> Any:  # type: ignore[override]
        from airflow.sdk import Connection

        if conn_id is None:
            connection = Connection(conn_id="jetstream_spark_local", conn_type="spark", host=self._local_master)
        else:
            try:
                connection = super().get_connection(conn_id)
            except Exception as err:
                # SparkSubmitHook would quietly submit to yarn instead: refuse.
                raise JetStreamConfigError(
                    f"Spark connection {conn_id!r} could not be loaded ({type(err).__name__}); define it, e.g. "
                    '{"conn_type": "spark", "host": "local[*]"}, or pass conn_id=None for a local master'
                ) from None
        self._spark_connection = connection
        return connection

    @property
    def log(self) -> Any:  # type: ignore[override]
        """The hook's logger; while ``submit`` runs, one that also watches the spark-submit output."""
        return self._output_watch or super().log

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        """spark-submit ``application``; a failure's exception starts with the job's own error line."""
        kwargs["env"] = {**(kwargs.get("env") or os.environ), **self._process_env, **self._secret_env}
        self._output_watch = watch = _ErrorLineWatch(super().log)
        try:
            return super().submit(application, **kwargs)
        except Exception as err:
            if not watch.error_line:
                raise
            from airflow.sdk.log import redact

            raise type(err)(f"the Spark job failed: {redact(watch.error_line)}\n{err}") from None
        finally:
            self._output_watch = None


class _ErrorLineWatch:
    """A logger that passes everything on, remembering the last message that states an error."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self.error_line: str | None = None

    def info(self, message: Any, *args: Any, **kwargs: Any) -> None:
        text = str(message).strip()
        if ERROR_LINE.search(text):
            self.error_line = text
        self._log.info(message, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


class JetStreamSparkSubmitOperator(FailFastOnRefusal, OperatorLineageMixin, SparkSubmitOperator):
    """Run a Spark job on a JetStream stream; by default the packaged exactly-once Parquet copy.

    :param jetstream_conn_id: Airflow ``jetstream`` connection. Default ``jetstream_default``.
    :param stream: stream to read (packaged job). Templated.
    :param domain: JetStream domain of the stream. Default: the connection's.
    :param api_prefix: JetStream API prefix of the stream, instead of ``domain``.
    :param output_path: Parquet output directory (packaged job). Templated.
    :param checkpoint_bucket: KV bucket of the checkpoint (packaged job); created if missing.
    :param checkpoint_key: KV key. Default ``stream_to_parquet.<stream>``. Templated.
    :param checkpoint_domain: JetStream domain of the KV bucket. Default: the connection's.
    :param filter_subject: subject or comma list of subjects to copy. Default: all.
    :param end_sequence: last sequence to copy. Default: the stream's last at the start. Templated.
    :param starting_sequence: first run only: ``earliest`` (default) or a sequence number.
    :param partition_by: Parquet partition columns among stream, domain, subject, date. Default
        ``("date",)``.
    :param min_partitions: Spark partitions to read with. Default: Spark's default parallelism.
    :param fail_on_data_loss: fail when sequences of the range are gone. Default True.
    :param application: another spark-submit application instead of the packaged job; it gets the
        same connection environment (``spark.read.format("jetstream")`` without ``servers``).
    :param conn_id: Airflow Spark connection. Default None: a local master (``local_master``),
        without any connection. A named connection that cannot be loaded fails the task.
    :param local_master: master when ``conn_id`` is None. Default ``local[*]``.
    :param kwargs: every other ``SparkSubmitOperator`` argument (conf, executor_memory, ...).
        ``env_vars`` reach the spark-submit process, where the driver runs (client mode), on every
        master: never a ``--conf`` on the command line. ``deploy_mode='cluster'`` is refused.

    Lineage (packaged job; :mod:`airflow_provider_jetstream.assets.lineage`): OpenLineage input the
    stream read (``jetstream://<server>``, ``<domain>/<stream>``), output the Parquet directory
    (``file`` + absolute path, ``hdfs://<namenode>`` + path...). Unless ``outlets`` are given, the
    ``AssetAlias`` outlet ``jetstream:<dag_id>.<task_id>`` gets an event for the Parquet asset
    (``file:///abs/path``, ``hdfs://nn:8020/path``) after each successful run, so a DAG scheduled on
    that asset runs after each copy. With ``application``, give ``inlets``/``outlets`` yourself.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "jetstream_conn_id",
        "domain",
        "checkpoint_bucket",
        "stream",
        "output_path",
        "checkpoint_key",
        "end_sequence",
        "filter_subject",
    )

    def __init__(
        self,
        *,
        jetstream_conn_id: str = JetStreamHook.default_conn_name,
        stream: str | None = None,
        domain: str | None = None,
        api_prefix: str | None = None,
        output_path: str | None = None,
        checkpoint_bucket: str | None = None,
        checkpoint_key: str | None = None,
        checkpoint_domain: str | None = None,
        filter_subject: str | None = None,
        end_sequence: int | str | None = None,
        starting_sequence: int | str | None = None,
        partition_by: Sequence[str] | None = None,
        min_partitions: int | None = None,
        fail_on_data_loss: bool | None = None,
        application: str | None = None,
        conn_id: str | None = None,
        local_master: str = DEFAULT_LOCAL_MASTER,
        **kwargs: Any,
    ) -> None:
        job_args = {
            "stream": stream,
            "output_path": output_path,
            "checkpoint_bucket": checkpoint_bucket,
            "checkpoint_key": checkpoint_key,
            "checkpoint_domain": checkpoint_domain,
            "domain": domain,
            "api_prefix": api_prefix,
            "filter_subject": filter_subject,
            "end_sequence": end_sequence,
            "starting_sequence": starting_sequence,
            "partition_by": partition_by,
            "min_partitions": min_partitions,
            "fail_on_data_loss": fail_on_data_loss,
        }
        if application is None:
            missing = [name for name in ("stream", "output_path", "checkpoint_bucket") if not job_args[name]]
            if missing:
                raise JetStreamConfigError(
                    f"JetStreamSparkSubmitOperator: {', '.join(missing)} missing: the packaged stream_to_parquet "
                    "job needs stream, output_path and checkpoint_bucket (or give your own application)"
                )
        else:
            ignored = [name for name, value in job_args.items() if value is not None]
            if ignored:
                raise JetStreamConfigError(
                    f"JetStreamSparkSubmitOperator: {', '.join(ignored)} are arguments of the packaged "
                    f"stream_to_parquet job; with application={application!r} they would be ignored: pass your "
                    "job's own arguments in application_args"
                )
        if domain and api_prefix:
            raise JetStreamConfigError(
                f"JetStreamSparkSubmitOperator: domain={domain!r} and api_prefix={api_prefix!r}: give one"
            )
        if application is None:
            self._check_job_arguments(job_args, parsing=True)
        super().__init__(application=application or PACKAGED_JOB, conn_id=conn_id, **kwargs)  # type: ignore[arg-type]
        self.jetstream_conn_id = jetstream_conn_id
        self.stream = stream
        self.domain = domain
        self.api_prefix = api_prefix
        self.output_path = output_path
        self.checkpoint_bucket = checkpoint_bucket
        self.checkpoint_key = checkpoint_key
        self.checkpoint_domain = checkpoint_domain
        self.filter_subject = filter_subject
        self.end_sequence = end_sequence
        self.starting_sequence = starting_sequence
        self.partition_by = ("date",) if partition_by is None else partition_by
        self.min_partitions = min_partitions
        self.fail_on_data_loss = True if fail_on_data_loss is None else fail_on_data_loss
        self.local_master = local_master
        self._packaged = application is None
        self._secret_env: dict[str, str] = {}
        # For the hook: SparkSubmitOperator's arguments that are SparkSubmitHook's too, as given.
        self._spark_arguments = {
            name: value for name, value in {**kwargs, "conn_id": conn_id}.items() if name in _HOOK_PARAMETERS
        }
        self._found_spark_binary: str | None = None
        if self._packaged:
            self.declare_lineage_outlet()

    @staticmethod
    def _check_job_arguments(values: dict[str, Any], parsing: bool) -> None:
        """Check the packaged job's arguments: when parsing, those without templates; else all."""
        try:
            check_job_arguments(values, skip=is_resolved_at_run_time if parsing else lambda value: False)
        except JetStreamConfigError as err:
            raise JetStreamConfigError(f"JetStreamSparkSubmitOperator: {err}") from None

    def _job_values(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "output_path": self.output_path,
            "checkpoint_bucket": self.checkpoint_bucket,
            "checkpoint_key": self.checkpoint_key or None,
            "checkpoint_domain": self.checkpoint_domain or None,
            "domain": self.domain or None,
            "api_prefix": self.api_prefix or None,
            "filter_subject": self.filter_subject or None,
            "end_sequence": None if self.end_sequence in (None, "") else self.end_sequence,
            "starting_sequence": None if self.starting_sequence in (None, "") else self.starting_sequence,
            "partition_by": self.partition_by,
            "min_partitions": self.min_partitions,
            "fail_on_data_loss": self.fail_on_data_loss,
        }

    def _job_arguments(self) -> list[str]:
        """The packaged job's command-line arguments (checked): names and paths only, never a credential."""
        values = self._job_values()
        self._check_job_arguments(values, parsing=False)
        args = ["--stream", str(self.stream), "--output", str(self.output_path)]
        args += ["--checkpoint-bucket", str(self.checkpoint_bucket)]
        optional = {
            "--checkpoint-key": values["checkpoint_key"],
            "--checkpoint-domain": values["checkpoint_domain"],
            "--domain": values["domain"],
            "--api-prefix": values["api_prefix"],
            "--filter-subject": values["filter_subject"],
            "--end-sequence": values["end_sequence"],
            "--starting-sequence": values["starting_sequence"],
            "--min-partitions": values["min_partitions"],
        }
        for flag, value in optional.items():
            if value is not None:
                args += [flag, str(value).strip()]
        args += ["--partition-by", ",".join(check_partition_by(self.partition_by))]
        args += ["--fail-on-data-loss", "true" if as_bool("fail_on_data_loss", self.fail_on_data_loss) else "false"]
        return args

    def execute(self, context: Any) -> None:
        from airflow_provider_jetstream.spark.options import connection_env

        if self._packaged:  # once rendered, before any connection or process
            job_arguments = self._job_arguments()
        config = JetStreamHook(self.jetstream_conn_id).get_conn_config()  # registers secrets for masking
        env = connection_env(config)
        python = sys.executable
        user_env = self.env_vars or {}
        conf = self.conf or {}
        if "spark.pyspark.python" not in conf:
            env["PYSPARK_PYTHON"] = user_env.get("PYSPARK_PYTHON") or os.environ.get("PYSPARK_PYTHON") or python
        if "spark.pyspark.driver.python" not in conf:
            env["PYSPARK_DRIVER_PYTHON"] = (
                user_env.get("PYSPARK_DRIVER_PYTHON") or os.environ.get("PYSPARK_DRIVER_PYTHON") or python
            )
        if shutil.which(self._spark_arguments.get("spark_binary") or "spark-submit") is None:
            # pip's pyspark puts spark-submit beside the interpreter, maybe outside PATH.
            beside = Path(python).parent
            if (beside / "spark-submit").exists():
                env["PATH"] = f"{beside}{os.pathsep}{os.environ.get('PATH', '')}"
                self._found_spark_binary = str(beside / "spark-submit")
        self._secret_env = env
        if self._packaged:
            self.application_args = job_arguments + list(self.application_args or [])
        self.log.info(
            "NATS connection %s passed to the Spark driver in its environment (not on the command line)",
            config.describe(),
        )
        super().execute(context)
        if self._packaged:
            self._record_copy_lineage(context)

    def _record_copy_lineage(self, context: Any) -> None:
        """Input: the stream read; output (and asset event): the Parquet directory. Logged if it fails."""
        try:
            hook = JetStreamHook(self.jetstream_conn_id, domain=self.domain or None, api_prefix=self.api_prefix or None)
            config = hook.get_conn_config()
            inputs = stream_locations(hook, [(str(self.stream), None)], config.connect_timeout)
            self.record_lineage(context, inputs, [path_location(str(self.output_path))])
        except Exception as err:
            self.log.warning("lineage not recorded: %s: %s", type(err).__name__, err)

    def _get_hook(self) -> SparkSubmitHook:
        """The JetStream hook, with the arguments ``SparkSubmitOperator`` gives its hook: each
        templated one as rendered, the others as given to the constructor."""
        arguments = dict(self._spark_arguments)
        arguments.update({name: getattr(self, name) for name in self.template_fields if name in _HOOK_PARAMETERS})
        if self._found_spark_binary:
            arguments["spark_binary"] = self._found_spark_binary
        return JetStreamSparkSubmitHook(secret_env=self._secret_env, local_master=self.local_master, **arguments)
